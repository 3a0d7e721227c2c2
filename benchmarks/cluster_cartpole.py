"""Wall time from command start to solved for `parallel-rl run` (local cluster), over seeds.

    .venv/bin/python benchmarks/cluster_cartpole.py [--seeds 3] [--collectors 2] [--set KEY=VALUE ...]
        [--vs-set KEY=VALUE ...]

Each seed runs the real command in a fresh process tree (coordinator in the
launcher, one learner and N collector processes) and times it to exit. The
serial pipeline on the same seeds is timed in the same run as a baseline.
``--set`` overrides the cluster's config; ``--vs-set`` adds a second cluster
variant (the cluster config with those overrides instead), run right after the
first on each seed, so that two settings are compared in the same minutes.
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
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="cluster config override")
    parser.add_argument(
        "--vs-set",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="a second cluster variant with these overrides, alternating with the first",
    )
    args = parser.parse_args()
    variants = {"cluster": args.set}
    if args.vs_set is not None:
        variants["variant"] = args.vs_set
    results = {**{label: [] for label in variants}, "serial": []}
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as tmp:
            for label, settings in variants.items():
                ok, wall, line = timed(
                    [
                        sys.executable,
                        "-m",
                        "parallel_rl",
                        "run",
                        "-c",
                        args.config,
                        "--collectors",
                        str(args.collectors),
                        "--set",
                        f"seed={seed}",
                        "--set",
                        f"exp_name={tmp}/{label}",
                        *[a for setting in settings for a in ("--set", setting)],
                    ]
                )
                m = SUMMARY.search(line)
                print(
                    f"{label} seed {seed}: {'solved' if ok else 'FAILED'} in {wall:.2f}s "
                    f"({'env_steps=%s train_iter=%s' % m.groups() if m else line})",
                    flush=True,
                )
                if ok:
                    results[label].append(wall)
            if not args.no_serial:
                ok, wall, line = timed(
                    [
                        sys.executable,
                        "-m",
                        "parallel_rl",
                        "serial",
                        "-c",
                        "configs/cartpole_dqn.py",
                        "--set",
                        f"seed={seed}",
                        "--set",
                        f"exp_name={tmp}/serial",
                    ]
                )
                print(f" serial seed {seed}: {'solved' if ok else 'FAILED'} in {wall:.2f}s", flush=True)
                if ok:
                    results["serial"].append(wall)
    print(
        f"CartPole-v1 DQN to eval mean >= 195, {args.collectors} collectors + 1 learner, "
        f"{len(results['cluster'])}/{args.seeds} solved"
    )
    for label, values in results.items():
        if values:
            print(describe(label, values))
    for label in variants:
        if results[label] and results["serial"]:
            print(
                f"   ratio: {label} median / serial median = "
                f"{statistics.median(results[label]) / statistics.median(results['serial']):.2f}"
            )
    return 0 if all(len(results[label]) == args.seeds for label in variants) else 1


if __name__ == "__main__":
    sys.exit(main())
