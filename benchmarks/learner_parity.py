"""Do 2 data-parallel learner ranks learn as well as one learner? CartPole DQN, same samples, same seeds.

    .venv/bin/python benchmarks/learner_parity.py [--seeds 3] [--iters 1500] [--episodes 40] [--sizes 1 2]

For each seed, `parallel-rl run -c configs/cartpole_dqn_parallel.py` once per learner world size
(`parallel.learner.world_size`), every run stopped by the same budget of learner updates
(`parallel.commander.max_train_iter`): each update trains one global batch of `policy.learn.batch_size`
sampled rows (with 2 ranks, each rank's half; the gradients are averaged), and collectors may run only
`max_env_steps_per_update` env steps per update, so every run trains on as many samples from about as many
env steps. No stop value (`env.stop_value=Infinity`: the budget is the goal, no early end) and no
evaluations during training.
The final policy (the newest checkpoint the learner published) is then evaluated greedily on the same
`--episodes` CartPole episodes for every run (the library's InteractionSerialEvaluator, fixed env seeds).
Prints every run's final return, each world size's mean, and the ratio of the means against world size 1.

The cluster is asynchronous (collection and training interleave as the OS schedules them), so two runs
of one seed are not identical even with one learner: compare means over seeds, with their spread.
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

from parallel_rl.config import load_config
from parallel_rl.envs import EnvManager
from parallel_rl.policy import create_policy
from parallel_rl.storage import SharedStorage
from parallel_rl.evaluator.serial import InteractionSerialEvaluator

CONFIG = "configs/cartpole_dqn_parallel.py"
SUMMARY = re.compile(r"env_steps=(\d+) train_iter=(\d+)")


def train(seed: int, world_size: int, iters: int, shared: str) -> dict:
    """One `parallel-rl run` to the update budget; its env steps, updates and wall seconds."""
    cmd = [
        sys.executable,
        "-m",
        "parallel_rl",
        "run",
        "-c",
        CONFIG,
        "--shared-dir",
        shared,
        "--set",
        f"seed={seed}",
        "--set",
        f"exp_name={shared}/exp",
        "--set",
        f"parallel.learner.world_size={world_size}",
        "--set",
        f"parallel.commander.max_train_iter={iters}",
        "--set",
        "parallel.commander.max_env_step=0",
        "--set",
        "parallel.commander.max_seconds=0",
        "--set",
        "parallel.commander.eval_freq=1000000000",
        "--set",
        "env.stop_value=Infinity",
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - start
    found = SUMMARY.findall(proc.stdout)
    if proc.returncode != 0 or not found:
        raise SystemExit(
            f"seed {seed} world_size {world_size}: parallel-rl run exited {proc.returncode}: "
            f"{(proc.stderr or proc.stdout).strip()[-600:]}"
        )
    env_steps, train_iter = map(int, found[-1])
    return {"env_steps": env_steps, "train_iter": train_iter, "wall": wall}


def final_return(shared: str, episodes: int) -> tuple:
    """(mean greedy return, policy version) of the newest published policy, on fixed evaluation episodes."""
    cfg = load_config(CONFIG)
    storage = SharedStorage(shared)
    version = storage.policies.latest()
    if version is None:
        raise SystemExit(f"no policy checkpoint under {shared}")
    env = EnvManager.from_cfg(cfg.env, cfg.env.evaluator_env_num, seed=123)
    policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0)
    policy.load_model_state_dict(storage.policies.load(version))
    evaluator = InteractionSerialEvaluator(
        cfg.policy.eval.evaluator,
        env,
        policy.eval_mode,
        stop_value=cfg.run.stop_value,
        n_evaluator_episode=episodes,
        seed=1000,
    )
    try:
        _, info = evaluator.eval()
    finally:
        evaluator.close()
    return info["eval_episode_return_mean"], version


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=1500, help="learner updates per run (the sample budget)")
    parser.add_argument("--episodes", type=int, default=40, help="evaluation episodes of each final policy")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2], help="learner world sizes")
    args = parser.parse_args()
    batch = load_config(CONFIG).policy.learn.batch_size
    print(
        f"CartPole-v1 DQN, {args.iters} updates of {batch} samples per run "
        f"({args.iters * batch} samples trained), seeds 0..{args.seeds - 1}; final policy on "
        f"{args.episodes} greedy episodes",
        flush=True,
    )
    returns = {size: [] for size in args.sizes}
    for seed in range(args.seeds):
        for size in args.sizes:
            with tempfile.TemporaryDirectory() as shared:
                run = train(seed, size, args.iters, shared)
                ret, version = final_return(shared, args.episodes)
            returns[size].append(ret)
            print(
                f"  seed {seed} world_size {size}: final return {ret:6.1f} (policy version {version}; "
                f"{run['train_iter']} updates, {run['env_steps']} env steps, {run['wall']:.0f} s; "
                f"load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    base = statistics.mean(returns[args.sizes[0]])
    print(f"\n| learner world size | final return per seed | mean | x world size {args.sizes[0]} |\n|---|---|---|---|")
    for size, values in returns.items():
        mean = statistics.mean(values)
        print(
            f"| {size} | {' / '.join(f'{v:.1f}' for v in values)} | {mean:.1f} | "
            f"{mean / base if base else float('nan'):.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
