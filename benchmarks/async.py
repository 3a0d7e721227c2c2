"""Collectors past the core count, on a latency-bound env (#26).

    .venv/bin/python benchmarks/async.py [--collectors 1 2 4 8 16 32] [--latency-ms 5] [--envs 8]
        [--seconds 10] [--warmup 5]

The env: CartPole-v1 with ``env.step_latency_ms`` (every step of every sub-env sleeps ``--latency-ms``: a
simulator on another machine, no CPU used). A collector steps its ``--envs`` sub-envs in a SyncVectorEnv, one
after another, so its ceiling is 1000 / latency_ms env steps/s whatever its env count; more envs per collector
only batch the policy's forward, which keeps the CPU per env step low enough for 32 collectors on 2 cores.

The config: ``configs/cartpole_dqn_parallel.py`` with ``parallel.commander.max_env_steps_per_update=0`` and
evaluation off. DQN is off-policy: without the replay ratio the coordinator's allowance never stops a collector,
so every collector collects flat out and the figure measures collection, chunk traffic and the coordinator, not
the learner (synchronous PPO's collectors wait for every policy version, which would measure the learner).
The learner trains flat out beside them, as it would in a real run.

For each N, a ``parallel-rl run --collectors N``: once every collector is busy and ``--warmup`` seconds more
have passed, the cluster's env steps/s over ``--seconds`` (``GET /api/v1/cluster``); its ratio to N × the
N = 1 figure of the same invocation; over the same window, from ``GET /api/v1/workers``' time breakdowns, the
collectors' share of their time in env steps and waiting, and the learner's busy fraction (1 - waiting for
data); and the load average. Target (#26): ratio >= 0.85 for N = 2, 4, 8, 16, 32. Beside it, the ratio to N x
the ceiling (1000 / latency_ms per collector): on a loaded box a sleeping collector wakes late, and one
collector alone was seen to wake later than several (7.2 ms per 5 ms step against 6.1 ms with two, at load
average ~20), which flatters the ratio to N x one.

Then (unless ``--skip-appo``) the issue's APPO figures, :func:`appo_rows`: APPO vs synchronous PPO wall to
eval 195 with 16 latency-bound collectors, and the APPO learner's busy fraction and stale-drop fraction.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, Optional

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APPO_CONFIG = os.path.join(ROOT, "configs", "cartpole_appo_parallel.py")
PPO_CONFIG = os.path.join(ROOT, "configs", "cartpole_ppo_parallel.py")


def start_run(tmp: str, config: str, collectors: int, *settings: str) -> tuple:
    """A `parallel-rl run` (output to a file: a full pipe would block it) and its REST API URL."""
    log = open(os.path.join(tmp, "run.log"), "w+")
    sets = [a for s in settings for a in ("--set", s)]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "parallel_rl",
            "run",
            "-c",
            config,
            "--collectors",
            str(collectors),
            "--set",
            f"exp_name={tmp}/exp",
            *sets,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"^REST API: (\S+)$", open(log.name).read(), re.M)
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    stop(proc)
    raise RuntimeError(f"`parallel-rl run` did not print its REST API within 60 s:\n{open(log.name).read()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def snapshot(url: str) -> Dict:
    """Time, the cluster's env steps and the active workers' time breakdowns (cumulative seconds)."""
    cluster = requests.get(url + "/cluster", timeout=10).json()
    workers = requests.get(url + "/workers", timeout=10).json()["workers"]
    return {
        "t": time.monotonic(),
        "env_steps": cluster["env_steps"],
        "bottleneck": cluster.get("bottleneck"),
        "workers": {
            w["worker_id"]: (w["kind"], w["time_breakdown"])
            for w in workers
            if w["state"] in ("idle", "busy") and w["time_breakdown"]
        },
    }


def window_shares(first: Dict, last: Dict, kind: str) -> Dict[str, float]:
    """Each phase's share of the wall time of ``kind``'s workers between two snapshots."""
    wall, seconds = 0.0, {}
    for worker_id, (k, b2) in last["workers"].items():
        b1 = first["workers"].get(worker_id, (k, None))[1]
        if k != kind or b1 is None:
            continue
        wall += b2["wall_seconds"] - b1["wall_seconds"]
        for phase, p in b2["phases"].items():
            seconds[phase] = seconds.get(phase, 0.0) + p["seconds"] - b1["phases"][phase]["seconds"]
    return {phase: s / wall for phase, s in seconds.items()} if wall > 0 else {}


def busy_collectors(url: str) -> int:
    return sum(w["state"] == "busy" for w in requests.get(url + "/collectors", timeout=10).json()["collectors"])


# DQN's collectors flat out: without the replay ratio the coordinator's allowance never stops a collector; the
# learner samples each row once on average (one batch of 64 per 64 rows pushed), not flat out: a learner that
# trains as fast as it can takes one of this box's two cores whatever the collectors do
FLAT_OUT = ("parallel.commander.max_env_steps_per_update=0", "parallel.learner.max_updates_per_transition=0.015625")
# a run that does not end by itself: measured over a window
ENDLESS = ("parallel.commander.eval_freq=100000000", "env.stop_value=100000", "parallel.commander.max_seconds=100000")


def measure(
    n: int, args: argparse.Namespace, config: str = "configs/cartpole_dqn_parallel.py", settings: tuple = FLAT_OUT
) -> Dict:
    """Env steps/s of a cluster with ``n`` latency-bound collectors, over a window after warm-up."""
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_run(
            tmp,
            config,
            n,
            f"env.step_latency_ms={args.latency_ms}",
            f"env.collector_env_num={args.envs}",
            *settings,
            *ENDLESS,
        )
        try:
            deadline = time.monotonic() + 120
            while busy_collectors(url) < n:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"{n} collectors were not all busy within 120 s")
                time.sleep(0.5)
            time.sleep(args.warmup)
            first = snapshot(url)
            time.sleep(args.seconds)
            last = snapshot(url)
            buffers = requests.get(url + "/buffers", timeout=10).json()["buffers"]
        finally:
            stop(proc)
    collectors, learner = window_shares(first, last, "collector"), window_shares(first, last, "learner")
    pushed = sum(b["pushed"] for b in buffers)
    return {
        "n": n,
        "steps": (last["env_steps"] - first["env_steps"]) / (last["t"] - first["t"]),
        "env_step": collectors.get("env_step"),
        "waiting": collectors.get("waiting"),
        "learner_busy": 1.0 - learner["waiting_for_data"] if learner else None,
        "dropped": sum(b.get("dropped_stale") or 0 for b in buffers) / pushed if pushed else None,
        "bottleneck": last["bottleneck"],
        "load": os.getloadavg()[0],
    }


# an evaluation's envs step at once, each in its own process, as a user of a remote simulator would have them: in
# turn, an evaluation of 8 episodes near 195 steps takes 8 x 195 x 5 ms (~8 s) and holds each run's end up by that
EVALUATOR_AT_ONCE = ("env.evaluator_vector_mode=async",)


def wall_to_solve(config: str, n: int, args: argparse.Namespace, seed: int, settings=()) -> tuple:
    """(seconds from `parallel-rl run`'s start to its exit after ``solved``, env steps then); (None, None): it
    stopped unsolved. ``settings``: more ``--set`` values for this run."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        proc, _url = start_run(
            tmp,
            config,
            n,
            f"env.step_latency_ms={args.latency_ms}",
            f"env.collector_env_num={args.envs}",
            f"seed={seed}",
            f"parallel.commander.max_seconds={args.max_seconds}",
            *EVALUATOR_AT_ONCE,
            *settings,
        )
        try:
            proc.wait(args.max_seconds + 120)
        finally:
            if proc.poll() is None:
                stop(proc)
        wall = time.monotonic() - start
        solved = re.search(r"^solved: eval return.*; env_steps=(\d+)", open(os.path.join(tmp, "run.log")).read(), re.M)
    return (wall, int(solved.group(1))) if solved else (None, None)


def percent(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def appo_rows(args: argparse.Namespace) -> None:
    """The issue's APPO figures, with ``--appo-collectors`` (16) latency-bound collectors on CartPole:

    - wall from the command's start to eval >= 195, APPO (asynchronous flow) vs PPO (synchronous segments:
      collectors wait for every version), same env, latency and collectors, evaluators' envs stepped at once
      (``env.evaluator_vector_mode=async``) for both, per seed (target APPO <= 0.5x);
    - over a window of an APPO run that does not stop, the learner's busy fraction (1 - its share of waiting
      for data; target >= 0.9 when the collectors outpace it: measured again with 2 collectors on CartPole
      without latency, which do) and the fraction of pushed rows dropped as too stale (target <= 5 %)."""
    n = args.appo_collectors
    print(
        f"\nCartPole to eval 195, {n} latency-bound collectors ({args.latency_ms:g} ms per env step), "
        f"wall from the command's start:",
        flush=True,
    )
    ratios = []
    for seed in range(args.appo_seeds):
        appo, appo_steps = wall_to_solve(APPO_CONFIG, n, args, seed, args.appo_set)
        ppo, ppo_steps = wall_to_solve(PPO_CONFIG, n, args, seed, args.ppo_set)
        ratio = appo / ppo if appo and ppo else None
        if ratio:
            ratios.append(ratio)
        print(
            f"  seed {seed}: APPO {'-' if appo is None else f'{appo:.1f} s ({appo_steps} env steps)'}  sync PPO "
            f"{'-' if ppo is None else f'{ppo:.1f} s ({ppo_steps} env steps)'}  ratio "
            f"{'-' if ratio is None else f'{ratio:.2f}'}  load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    if ratios:
        print(
            f"  APPO / sync PPO wall, median over {len(ratios)} solved seeds: {statistics.median(ratios):.2f} "
            f"(target <= 0.5)",
            flush=True,
        )
    for label, collectors, latency in (
        (f"{n} latency-bound collectors", n, args.latency_ms),
        ("2 collectors without latency (they outpace the learner)", 2, 0.0),
    ):
        r = measure(collectors, argparse.Namespace(**{**vars(args), "latency_ms": latency}), APPO_CONFIG, ())
        print(
            f"APPO, {label}, a {args.seconds:g} s window: {r['steps']:.0f} env steps/s, learner busy "
            f"{percent(r['learner_busy'])} (target >= 90% when collectors outpace it), rows dropped as too stale "
            f"{percent(r['dropped'])} (target <= 5%), collectors waiting {percent(r['waiting'])}, load "
            f"{r['load']:.1f}; {r['bottleneck']}",
            flush=True,
        )


def overlap_bound(args: argparse.Namespace) -> None:
    """What overlapping collection and training can buy at most, measured: the env steps/s of synchronous PPO and
    of APPO with ``--appo-collectors`` latency-bound collectors over a window without evaluations. At equal env
    steps to 195 the wall ratio APPO / sync PPO cannot go below sync's rate / APPO's rate; APPO goes lower only by
    needing fewer env steps than sync PPO (its rows are 1-``max_staleness`` versions old, so it needs as many or
    more)."""
    n = args.appo_collectors
    sync = measure(n, args, PPO_CONFIG, tuple(args.ppo_set))
    appo = measure(n, args, APPO_CONFIG, tuple(args.appo_set))
    print(
        f"\nthe overlap's ceiling, {n} collectors at {args.latency_ms:g} ms, a {args.seconds:g} s window each, no "
        f"evaluations:\n  sync PPO {sync['steps']:.0f} env steps/s (collectors waiting {percent(sync['waiting'])}, "
        f"learner busy {percent(sync['learner_busy'])})\n  APPO {appo['steps']:.0f} env steps/s (collectors waiting "
        f"{percent(appo['waiting'])}, learner busy {percent(appo['learner_busy'])})\n  APPO / sync PPO wall at "
        f"equal env steps >= {sync['steps'] / appo['steps']:.2f} (the target 0.5 needs APPO to need "
        f"{0.5 * appo['steps'] / sync['steps']:.2f}x sync PPO's env steps or fewer); load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collectors", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--envs", type=int, default=8, help="envs per collector (env.collector_env_num)")
    parser.add_argument("--seconds", type=float, default=10.0, help="the measured window")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after every collector is busy")
    parser.add_argument("--skip-appo", action="store_true")
    parser.add_argument("--appo-collectors", type=int, default=16)
    parser.add_argument("--appo-seeds", type=int, default=3)
    parser.add_argument(
        "--appo-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for the APPO runs to 195 (as parallel-rl's --set)",
    )
    parser.add_argument(
        "--ppo-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for the sync PPO runs to 195",
    )
    parser.add_argument("--max-seconds", type=float, default=300.0, help="a run to 195 gives up after this")
    parser.add_argument(
        "--overlap-only",
        action="store_true",
        help="only the overlap's ceiling: sync PPO's and APPO's env steps/s, no runs to 195",
    )
    args = parser.parse_args()
    if args.overlap_only:
        overlap_bound(args)
        return
    counts = sorted(set(args.collectors) | {1})
    ceiling = 1000.0 / args.latency_ms
    print(
        f"latency-bound CartPole: {args.latency_ms:g} ms per env step, {args.envs} envs per collector in turn "
        f"(a collector's ceiling: {ceiling:.0f} env steps/s); load before {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    print(
        f"{'N':>3}  {'env steps/s':>11}  {'ratio vs N x one':>16}  {'vs N x ceiling':>14}  "
        f"{'collectors: env step':>20}  {'waiting':>7}  {'learner busy':>12}  {'load':>5}  bottleneck",
        flush=True,
    )
    one = None
    for n in counts:
        r = measure(n, args)
        one = r["steps"] if n == 1 else one
        print(
            f"{n:>3}  {r['steps']:>11.0f}  {r['steps'] / (n * one):>16.2f}  {r['steps'] / (n * ceiling):>14.2f}  "
            f"{percent(r['env_step']):>20}  "
            f"{percent(r['waiting']):>7}  {percent(r['learner_busy']):>12}  {r['load']:>5.1f}  {r['bottleneck']}",
            flush=True,
        )
    if not args.skip_appo:
        appo_rows(args)
        overlap_bound(args)


if __name__ == "__main__":
    main()
