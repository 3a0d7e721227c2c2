"""What losing a process costs a CartPole solve: SIGKILL one role mid-training and time the recovery.

    .venv/bin/python benchmarks/recovery.py [--runs 3] [--kill-at 300] [--roles learner collector coordinator]

For each run (seed) and each role:
- ``learner`` / ``collector``: `parallel-rl run` (the launcher restarts the dead child); the baseline is
  the same command with nothing killed, same seed.
- ``coordinator``: the roles as separate processes, as docker compose runs them (`parallel-rl coordinator`,
  one learner, two collectors); the driver restarts the coordinator at once, as compose's restart policy
  would. The baseline is the same topology with nothing killed, same seed.
The victim is killed once the cluster reports ``--kill-at`` train iterations (the learner has saved its
full state at 200). Printed per role, median over the runs:
- recovery: seconds from the SIGKILL to training resumed (a learner's iteration count rising again,
  as seen in ``GET /api/v1/learners``);
- extra: the solve's wall time minus the baseline's (same seed, same topology).
DQN on CartPole is noisy (a seed solves in 4-10 s): read ``extra`` with that in mind; ``recovery`` is
the direct measure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

import requests

CONFIG = "configs/cartpole_dqn_parallel.py"
TOKEN = "recovery-benchmark"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(*args: str, log) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "parallel_rl", *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PARALLEL_RL_TOKEN": TOKEN},
    )


def learners(url: str) -> Optional[Dict[str, int]]:
    """worker id -> train_iter of the busy learners; None while the coordinator does not answer."""
    try:
        answer = requests.get(f"{url}/api/v1/learners", timeout=1).json()
    except (requests.RequestException, ValueError):
        return None
    return {w["worker_id"]: w.get("train_iter", 0) for w in answer["learners"] if w["state"] == "busy"}


def train_iter(url: str) -> int:
    try:
        return requests.get(f"{url}/api/v1/cluster", timeout=1).json()["train_iter"]
    except (requests.RequestException, ValueError, KeyError):
        return 0


def children(pid: int) -> Dict[int, str]:
    """pid -> role of the processes whose parent is ``pid``."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline") as f:
                    argv = f.read().split("\0")
            except OSError:
                continue
            if parent == pid:
                out[int(entry)] = next((a for a in argv if a in ("learner", "collector")), "")
    return out


def workers_of(run_pid: int) -> Dict[int, str]:
    """pid -> role of the learner and collectors of `run` ``run_pid``: forks of its fork server (a child of it)."""
    return {pid: role for child in children(run_pid) for pid, role in children(child).items() if role}


def wait_recovered(url: str, deadline: float) -> Optional[float]:
    """Monotonic time at which a busy learner's iteration count rose between two readings taken after the kill."""
    seen: Dict[str, int] = {}
    while time.monotonic() < deadline:
        now = learners(url)
        if now:
            if any(wid in seen and it > seen[wid] for wid, it in now.items()):
                return time.monotonic()
            seen = now
        time.sleep(0.02)
    return None


def one_run(role: Optional[str], seed: int, kill_at: int, tmp: str) -> tuple:
    """(solved, wall seconds, recovery seconds or None) of one solve; ``role`` None: nothing killed."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    common = ["-c", CONFIG, "--set", f"seed={seed}", "--set", f"exp_name={tmp}/exp"]
    log = open(os.path.join(tmp, "log.txt"), "ab")
    procs: List[subprocess.Popen] = []
    start = time.perf_counter()
    deadline = time.monotonic() + 120  # a solve takes ~6 s; a stuck run fails instead of waiting forever
    recovery = None
    compose = role == "coordinator" or role == "roles"
    try:
        if compose:
            shared = os.path.join(tmp, "shared")
            coordinator_args = ["coordinator", *common, "--port", str(port), "--shared-dir", shared]
            coordinator = cli(*coordinator_args, log=log)
            procs += [
                cli(r, "--coordinator", url, "--shared-dir", shared, log=log)
                for r in ("learner", "collector", "collector")
            ]
            main = coordinator
        else:
            main = cli("run", *common, "--port", str(port), log=log)
        if role in ("learner", "collector", "coordinator"):
            while train_iter(url) < kill_at and main.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if main.poll() is None:
                if role == "coordinator":
                    victim = coordinator.pid
                else:
                    victim = next(pid for pid, r in workers_of(main.pid).items() if r == role)
                os.kill(victim, signal.SIGKILL)
                killed = time.monotonic()
                if role == "coordinator":
                    coordinator.wait(10)
                    main = coordinator = cli(*coordinator_args, log=log)
                recovered = wait_recovered(url, deadline)
                recovery = None if recovered is None else recovered - killed
        try:
            code = main.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = None
        wall = time.perf_counter() - start
        return code == 0, wall, recovery
    finally:
        for p in procs + ([main] if main not in procs else []):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs + [main]:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kill-at", type=int, default=300, help="kill once the cluster reports this many iterations")
    parser.add_argument(
        "--roles",
        nargs="+",
        default=["learner", "collector", "coordinator"],
        choices=["learner", "collector", "coordinator"],
    )
    args = parser.parse_args()
    scenarios = (
        (["run"] if {"learner", "collector"} & set(args.roles) else [])
        + (["roles"] if "coordinator" in args.roles else [])
        + list(args.roles)
    )
    walls: Dict[str, List[Optional[float]]] = {s: [] for s in scenarios}
    recoveries: Dict[str, List[float]] = {s: [] for s in args.roles}
    for seed in range(args.runs):
        for scenario in scenarios:
            with tempfile.TemporaryDirectory() as tmp:
                ok, wall, recovery = one_run(None if scenario == "run" else scenario, seed, args.kill_at, tmp)
                if not ok:  # keep the processes' output of a failed run
                    kept = os.path.join(tempfile.gettempdir(), f"recovery-{scenario}-seed{seed}-{os.getpid()}.log")
                    shutil.copyfile(os.path.join(tmp, "log.txt"), kept)
                    print(f"  (output of the failed run: {kept})", flush=True)
            walls[scenario].append(wall if ok else None)
            if recovery is not None:
                recoveries[scenario].append(recovery)
            print(
                f"seed {seed} {scenario:>11}: {'solved' if ok else 'FAILED'} in {wall:.2f}s"
                + (f", training resumed {recovery:.2f}s after the kill" if recovery is not None else ""),
                flush=True,
            )
    print(
        f"CartPole-v1 DQN, 1 learner + 2 collectors, victim killed at {args.kill_at} iterations, "
        f"median over {args.runs} runs"
    )
    for role in args.roles:
        base = "roles" if role == "coordinator" else "run"
        extra = [w - b for w, b in zip(walls[role], walls[base]) if w is not None and b is not None]
        rec = recoveries[role]
        print(
            f"{role:>11}: training resumed after {statistics.median(rec):.2f}s (max {max(rec):.2f}s, "
            f"{len(rec)}/{args.runs} measured); extra wall time vs baseline {statistics.median(extra):+.2f}s "
            f"(runs: {', '.join(f'{e:+.2f}' for e in extra)})"
            if rec and extra
            else f"{role:>11}: no measurement"
        )
    for base in ("run", "roles"):
        if base in walls:
            ok = [w for w in walls[base] if w is not None]
            if ok:
                print(f"  baseline {base}: median solve {statistics.median(ok):.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
