"""Throughput inside a running local cluster, next to bare loops measured in the same run.

    .venv/bin/python benchmarks/cluster_throughput.py [--seconds 6]

1. Bare loops in this process (from hot_loops.py): a DQN update loop and a
   hand-written collector loop, each alone on an idle machine.
2. `parallel-rl run` (2 collectors, 1 learner, evaluation off) with the shipped
   replay ratio: learner updates/s from GET /api/v1/cluster over a window,
   and policy propagation delay (announcement -> first chunk stamped with it).
3. One collector process with a coordinator and no learner: what the collection
   plumbing (chunk files, announcements) costs next to one bare loop.
4. `parallel-rl run` with the replay ratio off and no CPU reserved for the learner
   (2 collectors flat out beside a learner training at full speed): env steps/s
   delivered into the coordinator's buffer.
Targets: learner >= 0.8 of bare, collectors >= 0.7 of bare, propagation p95 <= 100 ms.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import requests
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hot_loops  # noqa: E402  (the bare loops live there)

from parallel_rl.config import compile_config  # noqa: E402


def measure_cluster(seconds: float, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "parallel_rl",
            "run",
            "-c",
            "configs/cartpole_dqn_parallel.py",
            "--set",
            "parallel.commander.eval_freq=100000000",
            "--set",
            "env.stop_value=100000",
            "--set",
            f"exp_name={tmp}/exp",
            *extra,
        ]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            url = re.match(r"REST API: (\S+)", proc.stdout.readline()).group(1)

            def snap():
                c = requests.get(url + "/cluster", timeout=5).json()
                b = requests.get(url + "/buffers", timeout=5).json()["buffers"][0]
                c["messages"] = worker_messages(url[: -len("/api/v1")])
                c["cpu"] = cpu_seconds(proc.pid)  # the launcher's process: the coordinator and the supervisor
                return time.monotonic(), c, b

            deadline = time.monotonic() + 60
            while snap()[1]["train_iter"] < 200:  # warm-up: every process started and training
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster did not start training within 60 s")
                time.sleep(0.2)
            t1, c1, b1 = snap()
            time.sleep(seconds)
            t2, c2, b2 = snap()
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
    dt = t2 - t1
    chunks = (b2["chunks"] + b2["chunks_deleted"]) - (b1["chunks"] + b1["chunks_deleted"])
    messages, cpu = c2["messages"] - c1["messages"], c2["cpu"] - c1["cpu"]
    return {
        "updates": (c2["train_iter"] - c1["train_iter"]) / dt,
        "pushed": (b2["pushed"] - b1["pushed"]) / dt,
        "env_steps": (c2["env_steps"] - c1["env_steps"]) / dt,
        "propagation": c2["policy_propagation_ms"],
        "coordinator_cpu": cpu / dt,
        "chunks": chunks / dt,
        "messages": messages / dt,
        "cpu_per_chunk_us": 1e6 * cpu / max(1, chunks),
        "cpu_per_message_us": 1e6 * cpu / max(1, messages),
    }


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` used so far (Linux /proc; NaN elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def worker_messages(base_url: str) -> float:
    """HTTP calls of the workers the coordinator answered so far (heartbeat, metadata, sample), from /metrics."""
    text = requests.get(base_url + "/metrics", timeout=5).text
    return sum(float(v) for v in re.findall(r"^parallel_rl_control_message_seconds_count\{[^}]*\} (\S+)$", text, re.M))


def measure_one_collector(seconds: float) -> float:
    """Env steps/s that one collector process delivers into a coordinator's buffer, no learner running."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PARALLEL_RL_TOKEN="bench")
        common = ["--shared-dir", f"{tmp}/shared"]
        coordinator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "parallel_rl",
                "coordinator",
                "-c",
                "configs/cartpole_dqn_parallel.py",
                "--port",
                "0",
                "--set",
                "parallel.commander.max_env_steps_per_update=0",
                "--set",
                f"exp_name={tmp}/exp",
                *common,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        collector = None
        try:
            url = re.match(r"REST API: (\S+)", coordinator.stdout.readline()).group(1)
            collector = subprocess.Popen(
                [sys.executable, "-m", "parallel_rl", "collector", "--coordinator", url[: -len("/api/v1")], *common],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )

            def pushed():
                return time.monotonic(), requests.get(url + "/buffers", timeout=5).json()["buffers"][0]["pushed"]

            deadline = time.monotonic() + 60
            while pushed()[1] < 20000:  # warm-up
                if time.monotonic() > deadline:
                    raise RuntimeError("the collector did not start within 60 s")
                time.sleep(0.2)
            t1, p1 = pushed()
            time.sleep(seconds)
            t2, p2 = pushed()
        finally:
            for proc in (collector, coordinator):
                if proc is not None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(30)
    return (p2 - p1) / (t2 - t1)


def spread(values: list) -> str:
    return f"median {statistics.median(values):.0f} (min {min(values):.0f}, max {max(values):.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--repeat", type=int, default=3, help="cluster runs per scenario (this machine is noisy)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = compile_config(
        {"policy": {"learn": {"learner": {"hook": {"log_show_after_iter": 0, "save_ckpt_after_run": False}}}}}
    )
    bare_updates, _ = hot_loops.learner_rates(cfg, 3.0, "advanced")
    bare_steps, _ = hot_loops.collector_rates(cfg, 3.0, cfg.policy.nstep)
    print(f"bare loops (alone): {bare_updates:.0f} updates/s, {bare_steps:.0f} env steps/s", flush=True)
    on = [measure_cluster(args.seconds, []) for _ in range(args.repeat)]
    # collectors flat out, and free to use every CPU (no core reserved for the learner)
    off = [
        measure_cluster(
            args.seconds,
            ["--set", "parallel.commander.max_env_steps_per_update=0", "--set", "parallel.learner.dedicated_cpu=false"],
        )
        for _ in range(args.repeat)
    ]
    updates = [r["updates"] for r in on]
    p95 = [r["propagation"]["p95"] for r in on if r["propagation"]["p95"] is not None]
    p50 = [r["propagation"]["p50"] for r in on if r["propagation"]["p50"] is not None]
    steps = [r["env_steps"] for r in off]
    alone = [measure_one_collector(args.seconds) for _ in range(args.repeat)]
    print(f"{args.repeat} runs per scenario, {args.seconds:g} s windows")
    print(
        f"learner updates/s in the cluster (shipped config): {spread(updates)}; "
        f"ratio to bare {statistics.median(updates) / bare_updates:.2f}"
    )
    print(f"policy propagation (shipped config): p50 {spread(p50)} ms, p95 {spread(p95)} ms")
    print(
        f"one collector process, no learner, transitions/s into the buffer: {spread(alone)}; "
        f"ratio to one bare loop {statistics.median(alone) / bare_steps:.2f}"
    )
    print(
        f"2 collectors flat out beside a training learner, env steps/s into the buffer: {spread(steps)}; "
        f"ratio to one bare loop {statistics.median(steps) / bare_steps:.2f}"
    )


if __name__ == "__main__":
    main()
