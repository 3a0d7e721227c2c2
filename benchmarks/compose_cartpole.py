"""Wall time from `docker compose up` to solved (CartPole-v1 DQN), with `parallel-rl run` as the baseline.

    .venv/bin/python benchmarks/compose_cartpole.py [--runs 3] [--collectors 2]

Needs a Docker engine with Compose v2 and the image already built (`docker compose build`, or
`.ci/docker.sh` then the compose test): this times the cluster, not the build. Each run is a fresh
compose project (unique name, own volume and network): `docker compose up -d --scale collector=N` is
timed until the coordinator's `/api/v1/cluster` says `solved` (the coordinator runs with `--linger`, so
the answer stays readable), then `docker compose down -v`. The baseline, `parallel-rl run` with the same
config and collectors (command start to exit), is timed in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent


def compose(project: str, env: dict, *args: str) -> str:
    return subprocess.run(
        ["docker", "compose", "-p", project, "-f", str(ROOT / "docker-compose.yml"), *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    ).stdout


def time_compose(collectors: int) -> float:
    project = f"prl-bench-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "PARALLEL_RL_TOKEN": uuid.uuid4().hex, "PARALLEL_RL_PORT": "0"}
    start = time.perf_counter()
    try:
        compose(project, env, "up", "-d", "--scale", f"collector={collectors}")
        port = compose(project, env, "port", "coordinator", "8000").strip().rsplit(":", 1)[1]
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            state = requests.get(f"http://127.0.0.1:{port}/api/v1/cluster", timeout=5).json()["state"]
            if state != "running":
                if state != "solved":
                    raise RuntimeError(f"compose run ended {state}")
                return time.perf_counter() - start
            time.sleep(0.1)
        raise RuntimeError("not solved within 600 s")
    finally:
        compose(project, env, "down", "-v", "--timeout", "10")


def time_run(collectors: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run(
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
            ],
            check=True,
            capture_output=True,
            timeout=600,
            cwd=ROOT,
        )
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--collectors", type=int, default=2)
    args = parser.parse_args()
    results = {"compose": [], "run": []}
    for i in range(args.runs):
        results["compose"].append(time_compose(args.collectors))
        results["run"].append(time_run(args.collectors))
        print(
            f"run {i}: compose up -> solved {results['compose'][-1]:.1f}s, parallel-rl run {results['run'][-1]:.1f}s",
            flush=True,
        )
    for label, values in results.items():
        print(f"{label:>8}: median {statistics.median(values):.1f}s  min {min(values):.1f}s  max {max(values):.1f}s")
    ratio = statistics.median(results["compose"]) / statistics.median(results["run"])
    print(f"compose / run (medians): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
