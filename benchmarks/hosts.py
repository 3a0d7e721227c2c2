"""Wall time to solve CartPole (DQN and PPO) with every role on a host of its own vs `parallel-rl run` on one host;
with --partition, the recovery after a network partition between hosts.

    sudo .venv/bin/python benchmarks/hosts.py [--runs 3] [--collectors 2] [--algos dqn,ppo] [--set KEY=VALUE ...]
    sudo .venv/bin/python benchmarks/hosts.py --partition collector|learner|asymmetric [--partition-seconds 30]
        [--runs 3] [--algos dqn] [--set KEY=VALUE ...]

--partition (issue 43's Measure): the roles on hosts as tests/test_faults.py starts them (coordinator on A, learner
on B, collectors on C and D), the run without a stop value or env-step budget (CartPole solves in seconds, before
any fault could start) and with a time budget of 45 s start-up + partition + 30 s (a --set of the same key wins); once every collector collects and the learner trains, the partitioned worker (the
collector on C, or the learner) is cut off from the coordinator with iptables DROP rules (`asymmetric`: only the
coordinator's answers to C are dropped) for --partition-seconds, then healed. Reported per run: seconds from the
heal until that worker's env steps (or train iterations) grow again, and chunks lost: chunk files on the shared
directory that the replay index does not hold once the run ended at its budget and every worker exited (target 0).
Progress lines go to stderr.

Needs root (network namespaces: tests/support/hosts.py, the harness of tests/test_hosts.py). Separate hosts: the
coordinator on host A (bound to A's address), the learner on B, each collector on a host of its own, registering
itself; every role PID 1 of its own PID namespace with its own TMPDIR; a directory is all they share. Timed from
the coordinator's start to its exit (it exits when the run ends). The baseline, `parallel-rl run` with the same
config, collectors and overrides, is timed from command start to exit in the same iteration (one after the other,
on the same box). Target: separate hosts / run <= 1.15 (medians), printed end to end and for the training phase
(from the coordinator's log lines: every role registered -> solved), the one to read the target against on one
box (docs/deploy.md, "Separate hosts": four hosts' torch imports share its two cores). A run that ends without
solving (a budget given with --set parallel.commander.max_seconds=..., e.g. to see the script work) is reported
with how it ended.
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
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CONFIGS = {"dqn": "configs/cartpole_dqn_parallel.py", "ppo": "configs/cartpole_ppo_parallel.py"}
DEADLINE = 900.0  # seconds for one run, of either kind
TOKEN = "benchmark-hosts-token"


def outcome(text: str) -> str:
    """How a run ended, from its output's last `solved:` / `stopped:` / ... line (`coordinator: ` or not)."""
    found = re.findall(r"^(?:coordinator: )?(solved|stopped|failed|cancelled)\b", text, re.M)
    return found[-1] if found else "unknown"


STAMP = r"^(\d\d):(\d\d):(\d\d\.\d+) INFO parallel_rl\.coordinator\.\w+: coordinator: "


def training_seconds(text: str, workers: int) -> Optional[float]:
    """The training phase of a run, from the coordinator's log lines in its output: from the registration of the
    last of its first ``workers`` workers (every role registered) to `solved:` (None without both)."""

    def seconds(match) -> float:
        return int(match.group(1)) * 3600 + int(match.group(2)) * 60 + float(match.group(3))

    registered = list(re.finditer(STAMP + "registered ", text, re.M))[:workers]
    solved = re.search(STAMP + "solved:", text, re.M)
    if len(registered) < workers or solved is None:
        return None
    return (seconds(solved) - max(seconds(m) for m in registered)) % 86400  # past midnight too


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
        coordinator = a.cli(
            "coordinator",
            "coordinator",
            "-c",
            str(ROOT / config),
            "--host",
            a.address,
            "--port",
            "8000",
            "--shared-dir",
            shared,
            "--set",
            f"exp_name={tmp / 'exp'}",
            *sets,
            env=env,
        )
        b.cli("learner", "learner", "--coordinator", url, "--host", b.address, "--port", "9000", *sets, env=env)
        for host in hosts:
            host.cli(
                host.name, "collector", "--coordinator", url, "--host", host.address, "--port", "9000", *sets, env=env
            )
        coordinator.wait(timeout=DEADLINE)
        text = coordinator.output()
        return time.perf_counter() - start, outcome(text), training_seconds(text, collectors + 1)


def time_run(config: str, collectors: int, overrides: list) -> tuple:
    sets = [arg for text in overrides for arg in ("--set", text)]
    with tempfile.TemporaryDirectory(prefix="prl-run-") as tmp:
        start = time.perf_counter()
        proc = subprocess.run(
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
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            cwd=ROOT,
            env={**os.environ, "TMPDIR": tmp},
        )
        text = proc.stdout + proc.stderr
        return time.perf_counter() - start, outcome(text), training_seconds(text, collectors + 1)


def worker_progress(e, url: str, address: str) -> int:
    """Env steps (collectors) or train iterations (learners) of every worker entry at ``address`` (the entry lost
    in the partition and the one registered again after it)."""
    return sum(
        w.get("env_steps", 0) + w.get("train_iter", 0)
        for w in e.get_json(f"{url}/api/v1/workers")["workers"]
        if w["address"] == address
    )


PARTITION_SETTINGS = ("env.stop_value=null", "parallel.commander.max_env_step=0")  # the run outlasts the fault
START_SECONDS = 45.0  # the budget's share for the start-up: every role importing torch on a 2-core box
AFTER_HEAL_SECONDS = 30.0  # the budget's time past the heal: the recovery (seconds), then the run ends
EXIT_SECONDS = 60.0  # the budget's end until every worker has let go and exited


def partition_overrides(overrides: list, seconds: float) -> list:
    """The config of a partition run: no stop value and no env-step budget (CartPole DQN solves in seconds, before
    any fault), a time budget of start-up, fault and AFTER_HEAL_SECONDS (a --set of the same key wins)."""
    keys = {o.split("=", 1)[0] for o in overrides}
    budget = f"parallel.commander.max_seconds={START_SECONDS + seconds + AFTER_HEAL_SECONDS:g}"
    return [o for o in (*PARTITION_SETTINGS, budget) if o.split("=", 1)[0] not in keys] + overrides


def time_partition(config: str, kind: str, seconds: float, overrides: list) -> tuple:
    """One partition run: (seconds from the heal until the partitioned worker progresses again, or None when the
    run ended first; chunks lost; how the run ended)."""
    from tests.support import eventually
    from tests.support.hosts import Network, cut, heal, start_roles

    sets = [arg for text in partition_overrides(overrides, seconds) for arg in ("--set", text)]
    with tempfile.TemporaryDirectory(prefix="prl-partition-") as tmp, Network(Path(tmp)) as network:
        tmp = Path(tmp)
        (a, b, c, d, e), coordinator, url = start_roles(network, str(ROOT / config), tmp, *sets)
        end_line = r"^coordinator: (solved|stopped|failed|cancelled)\b"

        def ended() -> bool:
            if coordinator.proc.poll() is not None:
                raise RuntimeError(
                    f"the coordinator exited ({coordinator.proc.returncode}):\n{coordinator.output()[-3000:]}"
                )
            return re.search(end_line, coordinator.output(), re.M) is not None

        def working():
            if ended():
                raise RuntimeError(f"the run ended before every role worked: {outcome(coordinator.output())}")
            ws = e.get_json(f"{url}/api/v1/workers")["workers"]
            return sum(w["kind"] == "collector" and w["state"] == "busy" for w in ws) == 2 and any(
                w["kind"] == "learner" and w.get("train_iter", 0) > 0 for w in ws
            )

        eventually(working, timeout=DEADLINE, interval=0.5, message="the run working")
        victim = b if kind == "learner" else c
        if kind == "asymmetric":
            ruled, rules = a, cut(a, c, answers_only_from_port=int(url.rsplit(":", 1)[1]))
        else:
            ruled, rules = victim, cut(victim, a)
        print(f"  partitioned {victim.name} ({kind}) for {seconds:g}s", file=sys.stderr, flush=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:  # the fault lasts `seconds`: watched, not slept through
            e.get_json(f"{url}/api/v1/cluster")
        heal(ruled, rules)
        healed, before = time.perf_counter(), worker_progress(e, url, victim.url(9000))
        progressed = eventually(
            lambda: (
                ("progress" if worker_progress(e, url, victim.url(9000)) > before else None)
                or ("ended" if ended() else None)
            ),
            timeout=DEADLINE,
            interval=0.2,
            message="the partitioned worker progressing again",
        )
        recovery = time.perf_counter() - healed if progressed == "progress" else None
        line = coordinator.wait_line(end_line, timeout=DEADLINE)
        for host in (b, c, d):  # every worker lets go and exits: what it wrote is announced by then
            for process in host.processes:
                process.wait(timeout=EXIT_SECONDS)

        def unindexed() -> int:  # chunk files on the store that the replay index does not hold
            (buffer,) = e.get_json(f"{url}/api/v1/buffers")["buffers"]
            return max(0, len(list((tmp / "shared" / "data").glob("*.npz"))) - buffer["chunks"])

        try:  # the last announcements are applied, evicted chunks' files removed
            eventually(lambda: unindexed() == 0, timeout=EXIT_SECONDS, interval=1.0, message="every chunk indexed")
        except AssertionError:
            pass  # counted below as lost
        return recovery, unindexed(), line.group(1)


def main_partition(args) -> int:
    for algo in args.algos.split(","):
        recoveries, lost = [], []
        for i in range(args.runs):
            recovery, chunks, how = time_partition(
                CONFIGS[algo], args.partition, args.partition_seconds, args.overrides
            )
            lost.append(chunks)
            if recovery is None:
                again = "no progress again before the run's budget ended"
            else:
                recoveries.append(recovery)
                again = f"progress again {recovery:.1f}s after the heal"
            print(
                f"{algo} {args.partition} partition of {args.partition_seconds:g}s, run {i}: {again}, "
                f"{chunks} chunk(s) lost, the run {how}",
                flush=True,
            )
        summary = (
            f"recovery median {statistics.median(recoveries):.1f}s  max {max(recoveries):.1f}s"
            if recoveries
            else "no recovery seen"
        )
        print(f"{algo} {args.partition}: {summary}; chunks lost {sum(lost)} (target 0)", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--collectors", type=int, default=2)
    parser.add_argument("--algos", default="dqn,ppo", help="comma-separated: " + ", ".join(CONFIGS))
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override for both kinds of run (repeatable)",
    )
    parser.add_argument(
        "--partition",
        choices=("collector", "learner", "asymmetric"),
        help="measure the recovery after this partition instead (see above)",
    )
    parser.add_argument("--partition-seconds", type=float, default=30.0)
    args = parser.parse_args()
    algos = args.algos.split(",")
    unknown = [a for a in algos if a not in CONFIGS]
    if unknown:
        parser.error(f"unknown --algos {unknown}: choose from {sorted(CONFIGS)}")
    if os.geteuid() != 0:
        print("benchmarks/hosts.py: network namespaces need root: run it with sudo", file=sys.stderr)
        return 2
    if args.partition:
        return main_partition(args)
    for algo in algos:
        results: dict = {"hosts": [], "run": []}
        training: dict = {"hosts": [], "run": []}
        for i in range(args.runs):
            for label, timer in (("hosts", time_hosts), ("run", time_run)):
                seconds, how, phase = timer(CONFIGS[algo], args.collectors, args.overrides)
                results[label].append(seconds)
                if phase is not None:
                    training[label].append(phase)
                trained = "" if phase is None else f" (training {phase:.1f}s, start-up {seconds - phase:.1f}s)"
                print(f"{algo} run {i}: {label:>5} {how} in {seconds:.1f}s{trained}", flush=True)
        for label, values in results.items():
            print(
                f"{algo} {label:>5}: median {statistics.median(values):.1f}s  min {min(values):.1f}s  "
                f"max {max(values):.1f}s; training phase median "
                + (f"{statistics.median(training[label]):.1f}s" if training[label] else "n/a (none solved)")
            )
        ratio = statistics.median(results["hosts"]) / statistics.median(results["run"])
        print(f"{algo} separate hosts / run (medians), end to end: {ratio:.2f} (target <= 1.15)", flush=True)
        if training["hosts"] and training["run"]:
            phase_ratio = statistics.median(training["hosts"]) / statistics.median(training["run"])
            print(
                f"{algo} separate hosts / run (medians), training phase (every role registered -> solved): "
                f"{phase_ratio:.2f} (target <= 1.15)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
