"""Pool efficiency (issue 44): N seeds of one cluster config as one sweep on the service's pool, against N
`parallel-rl run`s one after another and N at once, in the same invocation on the same box.

    .venv/bin/python benchmarks/pool.py [--seeds 5] [--config configs/cartpole_ppo_parallel.py] [--collectors 2]
        [--pool-learners 2] [--pool-collectors 4] [--budget 20000] [--only pool sequential concurrent]
        [--set KEY=VALUE ...]

- sequential: `parallel-rl run -c CONFIG --collectors C --set seed=S` for each seed, one after another;
- concurrent: the same N commands started at once;
- pool: `parallel-rl serve --dir TMP --learners L --collectors P` started first (not timed: a service runs
  before its sweeps), then `parallel-rl sweep -c CONFIG --seeds 0-(N-1) --service URL` timed to its end; the
  pool's busy fraction (slot-seconds held by a running worker process / slot-seconds available, while a run ran
  or waited) is read from `GET /api/v1/pool` afterwards.

Every training trains ``--budget`` env steps (``run.stop_value=inf``, ``run.max_env_step=BUDGET``): a seed study
trains every seed to the same budget, and the modes then do the same work. ``--budget 0`` trains each to the
config's stop value instead; the modes then do not do the same work (how many env steps a synchronous PPO run
takes to its stop value depends on how late its evaluations come back, which depends on the load: docs/lab.md).
For each mode: the wall time for all N trainings, their exit codes (0: solved or budget mode, 3: a budget ran out
before the stop value) and the median env steps. Targets (docs/lab.md): the sweep's wall <= 0.8x the better of the
other two, busy fraction >= 0.85. ``--set`` overrides go to every training.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY = re.compile(r"env_steps=(\d+) train_iter=")
MODES = ("sequential", "concurrent", "pool")


def cli(*args: str) -> list:
    return [sys.executable, "-m", "parallel_rl", *args]


def run_command(config: str, seed: int, collectors: int, overrides: list, tmp: str) -> list:
    sets = [a for o in [*overrides, f"seed={seed}", f"exp_name={tmp}/run-{seed}"] for a in ("--set", o)]
    return cli("run", "-c", config, "--collectors", str(collectors), *sets)


def outcome(proc: subprocess.CompletedProcess | subprocess.Popen, out: str) -> tuple:
    steps = SUMMARY.findall(out)
    return proc.returncode, int(steps[-1]) if steps else None


def sequential(args, tmp: str) -> dict:
    start, ends = time.perf_counter(), []
    for seed in range(args.seeds):
        proc = subprocess.run(
            run_command(args.config, seed, args.collectors, args.set, tmp),
            capture_output=True,
            text=True,
            timeout=args.timeout,
        )
        ends.append(outcome(proc, proc.stdout))
    return {"wall": time.perf_counter() - start, "ends": ends}


def concurrent(args, tmp: str) -> dict:
    start = time.perf_counter()
    logs = [open(os.path.join(tmp, f"concurrent-{seed}.log"), "w+") for seed in range(args.seeds)]
    procs = [
        subprocess.Popen(
            run_command(args.config, seed, args.collectors, args.set, tmp),
            stdout=log,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for seed, log in enumerate(logs)
    ]
    ends = []
    for proc, log in zip(procs, logs):
        proc.wait(timeout=args.timeout)
        log.seek(0)
        ends.append(outcome(proc, log.read()))
        log.close()
    return {"wall": time.perf_counter() - start, "ends": ends}


@contextlib.contextmanager
def service(tmp: str, learners: int, collectors: int) -> Iterator[str]:
    """`parallel-rl serve --dir TMP/service` with that pool, its URL while the block runs; SIGTERM after it. The
    service and this process's clients (sweep, tune) share one token (PARALLEL_RL_TOKEN, made here if unset)."""
    os.environ.setdefault("PARALLEL_RL_TOKEN", secrets.token_urlsafe(24))
    log = open(os.path.join(tmp, "serve.log"), "w+")
    serve = subprocess.Popen(
        cli(
            "serve",
            "--dir",
            os.path.join(tmp, "service"),
            "--port",
            "0",
            "--learners",
            str(learners),
            "--collectors",
            str(collectors),
        ),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None:
            if serve.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the service did not start; see {log.name}")
            log.seek(0)
            found = re.search(r"^REST API: (http://\S+)/api/v1$", log.read(), re.M)
            url = found.group(1) if found else None
            time.sleep(0.1)
        yield url
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(90)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait(10)
        log.close()


def pool(args, tmp: str) -> dict:
    with service(tmp, args.pool_learners, args.pool_collectors) as url:
        start = time.perf_counter()
        sets = [a for o in args.set for a in ("--set", o)]
        out = os.path.join(tmp, "sweep")
        sweep = subprocess.run(
            cli("sweep", "-c", args.config, "--seeds", f"0-{args.seeds - 1}", "--service", url, "--out", out, *sets),
            capture_output=True,
            text=True,
            timeout=args.timeout * args.seeds,
        )
        wall = time.perf_counter() - start
        if sweep.returncode not in (0, 1):  # 1: some trial failed (its row says why); else no table at all
            raise SystemExit(f"the sweep failed (exit {sweep.returncode}): {sweep.stderr.strip()[-2000:]}")
        with urllib.request.urlopen(f"{url}/api/v1/pool", timeout=10) as answer:
            pool_state = json.load(answer)
        with open(os.path.join(out, "results.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        ends = [(int(r["exit"]) if r["exit"] else None, int(r["env_steps"]) if r["env_steps"] else None) for r in rows]
        return {"wall": wall, "ends": ends, "busy_fraction": pool_state["busy_fraction"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--config", default="configs/cartpole_ppo_parallel.py")
    parser.add_argument("--collectors", type=int, default=2, help="collectors of each `parallel-rl run`")
    parser.add_argument("--pool-learners", type=int, default=2, help="the service's learner slots")
    parser.add_argument("--pool-collectors", type=int, default=4, help="the service's collector slots")
    parser.add_argument("--only", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one training may take")
    parser.add_argument(
        "--budget", type=int, default=20_000, help="env steps every training trains (0: to the config's stop value)"
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run")
    args = parser.parse_args()
    if args.budget:
        args.set = ["run.stop_value=inf", f"run.max_env_step={args.budget}", *args.set]
    os.chdir(ROOT)
    results = {}
    with tempfile.TemporaryDirectory(prefix="pool-bench-") as tmp:
        for mode in args.only:
            results[mode] = {"sequential": sequential, "concurrent": concurrent, "pool": pool}[mode](args, tmp)
            print(f"{mode}: {summary(results[mode])}", flush=True)
    print(
        f"\n{args.seeds} trainings of {args.config} {' '.join(args.set)}; run --collectors {args.collectors}; "
        f"pool {args.pool_learners} learner(s) + {args.pool_collectors} collector(s)"
    )
    for mode, result in results.items():
        print(f"{mode:>10}: {summary(result)}")
    others = [results[m]["wall"] for m in ("sequential", "concurrent") if m in results]
    if "pool" in results and others:
        print(f"pool wall / best of the others: {results['pool']['wall'] / min(others):.2f} (target <= 0.8)")
    return 0


def summary(result: dict) -> str:
    codes = [code for code, _ in result["ends"]]
    steps = [s for _, s in result["ends"] if s is not None]
    text = (
        f"wall {result['wall']:.1f}s, exit 0: {codes.count(0)}, exit 3: {codes.count(3)}, other {codes}"
        if any(c not in (0, 3) for c in codes)
        else f"wall {result['wall']:.1f}s, exit 0: {codes.count(0)}, exit 3: {codes.count(3)}"
    )
    if steps:
        text += f", median env steps {statistics.median(steps):.0f}"
    if "busy_fraction" in result:
        busy = result["busy_fraction"]
        text += f", busy fraction {busy:.2f}" if busy is not None else ", busy fraction n/a"
    return text


if __name__ == "__main__":
    sys.exit(main())
