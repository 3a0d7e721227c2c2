"""Throughput inside a running local cluster, next to bare loops measured in the same run.

    .venv/bin/python benchmarks/cluster_throughput.py [--seconds 6]

1. Bare loops in this process (from hot_loops.py): a DQN update loop and a
   hand-written collector loop, each alone on an idle machine.
2. `parallel-rl run` (2 collectors, 1 learner, evaluation off) with the shipped
   replay ratio: learner updates/s from GET /api/v1/cluster over a window,
   and policy propagation delay (announcement -> first chunk stamped with it).
3. The same with the replay ratio off (collectors flat out): env steps/s
   delivered into the coordinator's buffer (GET /api/v1/buffers).
Targets: learner >= 0.8 of bare, collectors >= 0.7 of bare, propagation p95 <= 100 ms.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
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
        cmd = [sys.executable, "-m", "parallel_rl", "run", "-c", "configs/cartpole_dqn_parallel.py",
               "--set", "parallel.commander.eval_freq=100000000", "--set", "env.stop_value=100000",
               "--set", f"exp_name={tmp}/exp", *extra]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            url = re.match(r"REST API: (\S+)", proc.stdout.readline()).group(1)

            def snap():
                c = requests.get(url + "/cluster", timeout=5).json()
                b = requests.get(url + "/buffers", timeout=5).json()["buffers"][0]
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
    return {"updates": (c2["train_iter"] - c1["train_iter"]) / dt, "pushed": (b2["pushed"] - b1["pushed"]) / dt,
            "env_steps": (c2["env_steps"] - c1["env_steps"]) / dt, "propagation": c2["policy_propagation_ms"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = compile_config({"policy": {"learn": {"learner": {"hook": {"log_show_after_iter": 0,
                                                                     "save_ckpt_after_run": False}}}}})
    bare_updates, _ = hot_loops.learner_rates(cfg, 3.0, "advanced")
    bare_steps, _ = hot_loops.collector_rates(cfg, 3.0, cfg.policy.nstep)
    print(f"bare loops (alone): {bare_updates:.0f} updates/s, {bare_steps:.0f} env steps/s", flush=True)
    ratio_on = measure_cluster(args.seconds, [])
    print(f"cluster, replay ratio on : learner {ratio_on['updates']:.0f} updates/s "
          f"(ratio {ratio_on['updates'] / bare_updates:.2f}), collectors {ratio_on['pushed']:.0f} transitions/s; "
          f"policy propagation ms {ratio_on['propagation']}", flush=True)
    ratio_off = measure_cluster(args.seconds, ["--set", "parallel.commander.max_env_steps_per_update=0"])
    print(f"cluster, replay ratio off: collectors {ratio_off['env_steps']:.0f} env steps/s into the buffer "
          f"(ratio {ratio_off['env_steps'] / bare_steps:.2f} of one bare loop), learner {ratio_off['updates']:.0f} "
          f"updates/s; policy propagation ms {ratio_off['propagation']}", flush=True)


if __name__ == "__main__":
    main()
