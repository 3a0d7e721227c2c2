"""Wall time from process start to solved for the serial pipeline, over several seeds.

    .venv/bin/python benchmarks/serial_cartpole.py [--seeds 5] [--config configs/cartpole_dqn.py]

Each seed runs `parallel-rl serial` as a fresh process (so torch's import is
counted, as a user would see it) and reads the final summary line.
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


def run_once(config: str, seed: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "parallel_rl",
                "serial",
                "-c",
                config,
                "--set",
                f"seed={seed}",
                "--set",
                f"exp_name={tmp}/exp",
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        wall = time.perf_counter() - start
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    m = SUMMARY.search(last)
    return {
        "seed": seed,
        "ok": proc.returncode == 0,
        "wall": wall,
        "env_steps": int(m.group(1)) if m else -1,
        "train_iter": int(m.group(2)) if m else -1,
        "line": last or proc.stderr.strip()[-200:],
    }


def describe(label: str, values: list[float], unit: str = "") -> str:
    return (
        f"{label:>12}: median {statistics.median(values):.2f}{unit}  "
        f"min {min(values):.2f}{unit}  max {max(values):.2f}{unit}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--config", default="configs/cartpole_dqn.py")
    parser.add_argument("--set", dest="extra", action="append", default=[])
    args = parser.parse_args()
    extra = [x for s in args.extra for x in ("--set", s)]
    # baseline in the same run: a bare `import torch` process (start-up floor)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    floor = time.perf_counter() - start
    runs = []
    for seed in range(args.seeds):
        r = run_once(args.config, seed, extra)
        runs.append(r)
        print(
            f"seed {seed}: {'solved' if r['ok'] else 'FAILED'} in {r['wall']:.2f}s "
            f"(env_steps={r['env_steps']} train_iter={r['train_iter']})",
            flush=True,
        )
    ok = [r for r in runs if r["ok"]]
    print(f"serial CartPole-v1 DQN, {len(ok)}/{len(runs)} seeds solved; `import torch` alone: {floor:.2f}s")
    if ok:
        print(describe("wall time", [r["wall"] for r in ok], "s"))
        print(describe("env steps", [r["env_steps"] for r in ok]))
        print(describe("train iters", [r["train_iter"] for r in ok]))
        print(
            f"{'vs import':>12}: median wall time is {statistics.median(r['wall'] for r in ok) / floor:.1f}x "
            f"a bare torch import"
        )
    return 0 if len(ok) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
