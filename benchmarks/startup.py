"""Start-up of `parallel-rl run`: command start -> every worker registered, and a killed collector's restart.

    .venv/bin/python benchmarks/startup.py [--repeat 3] [--collectors 2] [--baseline DIR]

Runs the real command (CartPole DQN, a large step budget so that it keeps running) and reads its log as it
arrives: the time from the command's start to the coordinator's `registered` line of every worker; then it
kills one collector (SIGKILL) and times the restart: kill -> registered again, and the launcher's `started`
line -> registered. `--baseline DIR` runs the same from another checkout (e.g. a `git worktree` of an older
commit) in the same run, alternating, and prints the ratios: this box is noisy.

Each round also times the floor under "every worker registered": a fresh interpreter that imports torch and
nothing else, and one that imports what the fork server preloads (``parallel_rl.entry.preload``: torch,
gymnasium, TensorBoard's writer, the roles) — a worker forked from the fork server cannot register before that.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Dict, Optional

REGISTERED = re.compile(r"coordinator: registered (\S+) at")
STARTED = re.compile(r"launcher: started (\S+) \(pid (\d+)\)")
REST = re.compile(r"REST API: (http://\S+)")
DEADLINE = 120.0


def one_run(tree: str, collectors: int) -> Dict[str, float]:
    env = dict(os.environ, PYTHONPATH=tree, PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "parallel_rl",
                "run",
                "-c",
                "configs/cartpole_dqn_parallel.py",
                "--collectors",
                str(collectors),
                "--set",
                f"exp_name={tmp}/exp",
                "--set",
                "env.stop_value=100000",
                "--set",
                "parallel.commander.max_env_step=10000000",
            ],
            cwd=tree,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        events: list = []
        cond = threading.Condition()

        def read() -> None:
            for line in proc.stdout:
                with cond:
                    events.append((time.perf_counter() - start, line))
                    cond.notify_all()

        threading.Thread(target=read, daemon=True).start()

        def wait_for(pattern: re.Pattern, name: Optional[str], after: int) -> tuple:
            """(time, match, index) of the first line from ``after`` on matching ``pattern`` (and ``name``)."""
            deadline = time.perf_counter() + DEADLINE
            i = after
            with cond:
                while True:
                    while i < len(events):
                        m = pattern.search(events[i][1])
                        if m and (name is None or m.group(1) == name):
                            return events[i][0], m, i
                        i += 1
                    left = deadline - time.perf_counter()
                    if left <= 0 or proc.poll() is not None:
                        raise RuntimeError(
                            f"no {pattern.pattern!r} line within {DEADLINE:g}s; the log ends with "
                            f"{''.join(e[1] for e in events[-5:])}"
                        )
                    cond.wait(min(left, 0.5))

        try:
            seen, at, index = set(), 0.0, 0
            while len(seen) < collectors + 1:
                at, m, index = wait_for(REGISTERED, None, index)
                seen.add(m.group(1))
                index += 1
            all_registered = at
            _, m, _ = wait_for(REST, None, 0)
            with urllib.request.urlopen(f"{m.group(1)}/collectors", timeout=10) as answer:
                pid = next(w["pid"] for w in json.load(answer)["collectors"] if w["worker_id"] == "collector-1")
            mark = len(events)
            killed = time.perf_counter() - start
            os.kill(pid, signal.SIGKILL)
            started, m, index = wait_for(STARTED, None, mark)  # the restarted collector, under a new name
            registered, _, _ = wait_for(REGISTERED, m.group(1), index)
            return {
                "all_registered": all_registered,
                "kill_to_registered": registered - killed,
                "started_to_registered": registered - started,
            }
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def import_floor(tree: str) -> Dict[str, float]:
    """Wall of a fresh interpreter importing torch alone, and importing what the fork server preloads."""
    env = dict(os.environ, PYTHONPATH=tree)
    out = {}
    for label, code in (("import_torch", "import torch"), ("import_preload", "import parallel_rl.entry.preload")):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, check=True)
        out[label] = time.perf_counter() - start
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--collectors", type=int, default=2)
    parser.add_argument("--baseline", help="another checkout, run alternately with this one")
    args = parser.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this": here, **({"baseline": os.path.abspath(args.baseline)} if args.baseline else {})}
    results: Dict[str, Dict[str, list]] = {label: {} for label in trees}
    for r in range(args.repeat):
        for label, tree in trees.items():
            figures = {**one_run(tree, args.collectors), **import_floor(tree)}
            print(f"{label:>8} run {r}: " + "  ".join(f"{k} {v:.2f}s" for k, v in figures.items()), flush=True)
            for k, v in figures.items():
                results[label].setdefault(k, []).append(v)
    print(f"medians over {args.repeat} runs (1 learner + {args.collectors} collectors, CartPole DQN):")
    for k in results["this"]:
        line = "  ".join(f"{label} {statistics.median(results[label][k]):.2f}s" for label in trees)
        if args.baseline:
            line += f"  ratio {statistics.median(results['this'][k]) / statistics.median(results['baseline'][k]):.2f}"
        print(f"  {k:>22}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
