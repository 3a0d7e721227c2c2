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

The issue's other figures (APPO vs synchronous PPO wall to eval 195 with 16 latency-bound collectors, the APPO
learner's busy fraction when collectors outpace it) go in :func:`appo_rows`, once
``configs/cartpole_appo_parallel.py`` lands.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, Optional

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APPO_CONFIG = os.path.join(ROOT, "configs", "cartpole_appo_parallel.py")


def start_run(tmp: str, config: str, collectors: int, *settings: str) -> tuple:
    """A `parallel-rl run` (output to a file: a full pipe would block it) and its REST API URL."""
    log = open(os.path.join(tmp, "run.log"), "w+")
    sets = [a for s in settings for a in ("--set", s)]
    proc = subprocess.Popen([sys.executable, "-m", "parallel_rl", "run", "-c", config, "--collectors", str(collectors),
                             "--set", f"exp_name={tmp}/exp", *sets], stdout=log, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT)
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
    return {"t": time.monotonic(), "env_steps": cluster["env_steps"], "bottleneck": cluster.get("bottleneck"),
            "workers": {w["worker_id"]: (w["kind"], w["time_breakdown"]) for w in workers
                        if w["state"] in ("idle", "busy") and w["time_breakdown"]}}


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


def measure(n: int, args: argparse.Namespace) -> Dict:
    """Env steps/s of a cluster with ``n`` latency-bound collectors flat out, over a window after warm-up."""
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_run(tmp, "configs/cartpole_dqn_parallel.py", n, f"env.step_latency_ms={args.latency_ms}",
                              f"env.collector_env_num={args.envs}", "parallel.commander.max_env_steps_per_update=0",
                              "parallel.commander.eval_freq=100000000", "env.stop_value=100000",
                              "parallel.commander.max_seconds=100000")
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
        finally:
            stop(proc)
    collectors, learner = window_shares(first, last, "collector"), window_shares(first, last, "learner")
    return {"n": n, "steps": (last["env_steps"] - first["env_steps"]) / (last["t"] - first["t"]),
            "env_step": collectors.get("env_step"), "waiting": collectors.get("waiting"),
            "learner_busy": 1.0 - learner["waiting_for_data"] if learner else None,
            "bottleneck": last["bottleneck"], "load": os.getloadavg()[0]}


def percent(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def appo_rows(args: argparse.Namespace) -> None:
    """THE LEAD'S PLACE for the issue's APPO figures, once ``configs/cartpole_appo_parallel.py`` lands:

    - APPO vs synchronous PPO, CartPole, 16 latency-bound collectors, wall to eval 195 (target <= 0.5x):
      ``start_run(tmp, config, 16, f"env.step_latency_ms={args.latency_ms}")`` for the APPO config and
      ``configs/cartpole_ppo_parallel.py``, each until the run prints ``solved: eval return`` (or
      ``parallel.commander.max_seconds``), timed from the start.
    - the APPO learner's busy fraction when collectors outpace it (target >= 0.9): in a run with many
      collectors, ``window_shares(first, last, "learner")`` over a window after warm-up, as :func:`measure` does;
      busy = 1 - the ``waiting_for_data`` share.
    """
    if not os.path.exists(APPO_CONFIG):
        print(f"APPO vs sync PPO wall to 195, APPO learner busy fraction: to be measured "
              f"({os.path.relpath(APPO_CONFIG, ROOT)} is not in this tree yet)")
        return
    print("APPO vs sync PPO wall to 195, APPO learner busy fraction: not written yet (benchmarks/async.py, "
          "appo_rows(): its docstring says how)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collectors", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--latency-ms", type=float, default=5.0)
    parser.add_argument("--envs", type=int, default=8, help="envs per collector (env.collector_env_num)")
    parser.add_argument("--seconds", type=float, default=10.0, help="the measured window")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after every collector is busy")
    parser.add_argument("--skip-appo", action="store_true")
    args = parser.parse_args()
    counts = sorted(set(args.collectors) | {1})
    ceiling = 1000.0 / args.latency_ms
    print(f"latency-bound CartPole: {args.latency_ms:g} ms per env step, {args.envs} envs per collector in turn "
          f"(a collector's ceiling: {ceiling:.0f} env steps/s); load before {os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'N':>3}  {'env steps/s':>11}  {'ratio vs N x one':>16}  {'vs N x ceiling':>14}  "
          f"{'collectors: env step':>20}  {'waiting':>7}  {'learner busy':>12}  {'load':>5}  bottleneck", flush=True)
    one = None
    for n in counts:
        r = measure(n, args)
        one = r["steps"] if n == 1 else one
        print(f"{n:>3}  {r['steps']:>11.0f}  {r['steps'] / (n * one):>16.2f}  {r['steps'] / (n * ceiling):>14.2f}  "
              f"{percent(r['env_step']):>20}  "
              f"{percent(r['waiting']):>7}  {percent(r['learner_busy']):>12}  {r['load']:>5.1f}  {r['bottleneck']}",
              flush=True)
    if not args.skip_appo:
        appo_rows(args)


if __name__ == "__main__":
    main()
