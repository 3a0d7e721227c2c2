"""Wall time to solve CartPole (DQN and PPO) with every role on a host of its own vs `parallel-rl run` on one host.

    sudo .venv/bin/python benchmarks/hosts.py [--runs 3] [--collectors 2] [--algos dqn,ppo] [--set KEY=VALUE ...]

Needs root (network namespaces: tests/support/hosts.py, the harness of tests/test_hosts.py). Separate hosts: the
coordinator on host A (bound to A's address), the learner on B, each collector on a host of its own, registering
itself; every role PID 1 of its own PID namespace with its own TMPDIR; a directory is all they share. Timed from
the coordinator's start to its exit (it exits when the run ends). The baseline, `parallel-rl run` with the same
config, collectors and overrides, is timed from command start to exit in the same iteration (one after the other,
on the same box). Target: separate hosts / run <= 1.15 (medians). A run that ends without solving (a budget given
with --set parallel.commander.max_seconds=..., e.g. to see the script work) is reported with how it ended.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIGS = {"dqn": "configs/cartpole_dqn_parallel.py", "ppo": "configs/cartpole_ppo_parallel.py"}
DEADLINE = 900.0  # seconds for one run, of either kind
TOKEN = "benchmark-hosts-token"


def outcome(text: str) -> str:
    """How a run ended, from its output's last `solved:` / `stopped:` / ... line (`coordinator: ` or not)."""
    found = re.findall(r"^(?:coordinator: )?(solved|stopped|failed|cancelled)\b", text, re.M)
    return found[-1] if found else "unknown"


def time_hosts(config: str, collectors: int, overrides: list) -> tuple:
    from tests.support.hosts import Network

    sets = [arg for text in overrides for arg in ("--set", text)]
    with tempfile.TemporaryDirectory(prefix="prl-hosts-") as tmp, Network(Path(tmp)) as network:
        tmp = Path(tmp)
        a, b = network.host("coordinator"), network.host("learner")
        hosts = [network.host(f"collector{i}") for i in range(collectors)]
        shared, env = str(tmp / "shared"), {"PARALLEL_RL_TOKEN": TOKEN}
        url = a.url(8000)
        start = time.perf_counter()
        coordinator = a.cli("coordinator", "coordinator", "-c", str(ROOT / config), "--host", a.address, "--port",
                            "8000", "--shared-dir", shared, "--set", f"exp_name={tmp / 'exp'}", *sets, env=env)
        b.cli("learner", "learner", "--coordinator", url, "--host", b.address, "--port", "9000", *sets, env=env)
        for host in hosts:
            host.cli(host.name, "collector", "--coordinator", url, "--host", host.address, "--port", "9000",
                     *sets, env=env)
        coordinator.wait(timeout=DEADLINE)
        return time.perf_counter() - start, outcome(coordinator.output())


def time_run(config: str, collectors: int, overrides: list) -> tuple:
    sets = [arg for text in overrides for arg in ("--set", text)]
    with tempfile.TemporaryDirectory(prefix="prl-run-") as tmp:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "parallel_rl", "run", "-c", config, "--collectors",
                               str(collectors), "--set", f"exp_name={tmp}/exp", *sets], capture_output=True,
                              text=True, timeout=DEADLINE, cwd=ROOT, env={**os.environ, "TMPDIR": tmp})
        return time.perf_counter() - start, outcome(proc.stdout + proc.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--collectors", type=int, default=2)
    parser.add_argument("--algos", default="dqn,ppo", help="comma-separated: " + ", ".join(CONFIGS))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for both kinds of run (repeatable)")
    args = parser.parse_args()
    algos = args.algos.split(",")
    unknown = [a for a in algos if a not in CONFIGS]
    if unknown:
        parser.error(f"unknown --algos {unknown}: choose from {sorted(CONFIGS)}")
    if os.geteuid() != 0:
        print("benchmarks/hosts.py: network namespaces need root: run it with sudo", file=sys.stderr)
        return 2
    for algo in algos:
        results = {"hosts": [], "run": []}
        for i in range(args.runs):
            for label, timer in (("hosts", time_hosts), ("run", time_run)):
                seconds, how = timer(CONFIGS[algo], args.collectors, args.overrides)
                results[label].append(seconds)
                print(f"{algo} run {i}: {label:>5} {how} in {seconds:.1f}s", flush=True)
        for label, values in results.items():
            print(f"{algo} {label:>5}: median {statistics.median(values):.1f}s  min {min(values):.1f}s  "
                  f"max {max(values):.1f}s")
        ratio = statistics.median(results["hosts"]) / statistics.median(results["run"])
        print(f"{algo} separate hosts / run (medians): {ratio:.2f} (target <= 1.15)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
