"""Wall time from command start to solved for `parallel-rl run` (local cluster), over seeds.

    .venv/bin/python benchmarks/cluster_cartpole.py [--seeds 3] [--collectors 2]

Each seed runs the real command in a fresh process tree (coordinator in the
launcher, one learner and N collector processes) and times it to exit. The
serial pipeline on the same seeds is timed in the same run as a baseline.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time

SUMMARY = re.compile(r"env_steps=(\d+) train_iter=(\d+)")


def timed(cmd: list[str]) -> tuple[bool, float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("solved", "stopped"))]
    return proc.returncode == 0, wall, (lines[-1] if lines else proc.stderr.strip()[-300:])


def describe(label: str, values: list[float]) -> str:
    return f"{label:>8}: median {statistics.median(values):.2f}s  min {min(values):.2f}s  max {max(values):.2f}s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--collectors", type=int, default=2)
    parser.add_argument("--config", default="configs/cartpole_dqn_parallel.py")
    parser.add_argument("--no-serial", action="store_true", help="skip the serial baseline")
    args = parser.parse_args()
    results = {"cluster": [], "serial": []}
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as tmp:
            ok, wall, line = timed([sys.executable, "-m", "parallel_rl", "run", "-c", args.config,
                                    "--collectors", str(args.collectors), "--set", f"seed={seed}",
                                    "--set", f"exp_name={tmp}/exp"])
            m = SUMMARY.search(line)
            print(f"cluster seed {seed}: {'solved' if ok else 'FAILED'} in {wall:.2f}s "
                  f"({'env_steps=%s train_iter=%s' % m.groups() if m else line})", flush=True)
            if ok:
                results["cluster"].append(wall)
            if not args.no_serial:
                ok, wall, line = timed([sys.executable, "-m", "parallel_rl", "serial", "-c", "configs/cartpole_dqn.py",
                                        "--set", f"seed={seed}", "--set", f"exp_name={tmp}/serial"])
                print(f" serial seed {seed}: {'solved' if ok else 'FAILED'} in {wall:.2f}s", flush=True)
                if ok:
                    results["serial"].append(wall)
    print(f"CartPole-v1 DQN to eval mean >= 195, {args.collectors} collectors + 1 learner, "
          f"{len(results['cluster'])}/{args.seeds} solved")
    for label, values in results.items():
        if values:
            print(describe(label, values))
    if results["cluster"] and results["serial"]:
        print(f"   ratio: cluster median / serial median = "
              f"{statistics.median(results['cluster']) / statistics.median(results['serial']):.2f}")
    return 0 if len(results["cluster"]) == args.seeds else 1


if __name__ == "__main__":
    sys.exit(main())
