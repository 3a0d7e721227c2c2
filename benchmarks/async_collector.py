"""AsyncCollector vs Collector on envs whose step time differs 10x across env indices, same run.

    .venv/bin/python benchmarks/async_collector.py [--envs 4] [--seconds 3] [--fast-ms 2]

Env i's step takes ``fast_ms * (1 + 9 i / (envs - 1))`` ms (env 0 the fastest, the
last env 10x slower), spent asleep as a remote simulator or an env waiting on I/O
would; every env runs in its own ``AsyncVectorEnv`` worker process. ``Collector``
steps every env each vector step, so it moves at the pace of the slowest env;
``AsyncCollector`` steps only the envs that are ready. Both act with the same DQN
collect mode (epsilon-greedy) and push 1-step transitions into a replay buffer.
Prints env steps/s of each and their ratio (target: AsyncCollector >= 1.5x).
"""

from __future__ import annotations

import argparse
import functools
import time

import gymnasium as gym
import numpy as np
import torch

from parallel_rl.config import compile_config
from parallel_rl.envs import EnvManager
from parallel_rl.policy import DQNPolicy
from parallel_rl.compat.collectors import AsyncCollector, Collector


class DelayEnv(gym.Env):
    """A 4-d observation, 2 actions, 50-step episodes; each step sleeps ``delay`` seconds."""

    def __init__(self, delay: float):
        self.delay = delay
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(4, dtype=np.float32), {}

    def step(self, action):
        time.sleep(self.delay)
        self._t += 1
        obs = np.full(4, self._t / 50.0, dtype=np.float32)
        return obs, 1.0, self._t >= 50, False, {}


def make_env(envs: int, fast_ms: float) -> EnvManager:
    delays = [fast_ms / 1000.0 * (1 + 9 * i / max(1, envs - 1)) for i in range(envs)]
    return EnvManager.from_env(gym.vector.AsyncVectorEnv([functools.partial(DelayEnv, d) for d in delays]), seed=0)


def steps_per_second(collector, seconds: float, n_step: int) -> float:
    collector.collect(n_step=n_step)  # warm-up
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += collector.collect(n_step=n_step).n_collected_steps
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--fast-ms", type=float, default=2.0)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the library's processes run (system.torch_num_threads); tiny batches
    cfg = compile_config({})
    policy = DQNPolicy(cfg.policy, 4, 2, seed=0)
    rates = {}
    for name, cls in (("Collector", Collector), ("AsyncCollector", AsyncCollector)):
        env = make_env(args.envs, args.fast_ms)
        try:
            collector = cls(policy, env, policy_kwargs={"eps": 0.1})
            rates[name] = steps_per_second(collector, args.seconds, n_step=8 * args.envs)
        finally:
            env.close()
    slowest = args.fast_ms * 10
    print(f"{args.envs} envs, step time {args.fast_ms:g}..{slowest:g} ms across env indices")
    for name, rate in rates.items():
        print(f"{name:15s} {rate:8.0f} env steps/s")
    print(f"ratio AsyncCollector / Collector: {rates['AsyncCollector'] / rates['Collector']:.2f} (target >= 1.5)")


if __name__ == "__main__":
    main()
