"""A deterministic toy env for exact assertions in tests and benchmarks.

``parallel_rl/Counting-v0``: every episode lasts ``episode_length`` steps, the
observation is ``[t / episode_length, last_action, 1.0]`` and the reward is
``1.0`` for action 1, ``0.0`` for action 0. Nothing is random, so step,
episode and return counts are known in advance.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np


class CountingEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, episode_length: int = 10):
        if episode_length <= 0:
            raise ValueError(f"{episode_length=} must be > 0")
        self.episode_length = episode_length
        self.observation_space = gym.spaces.Box(-1.0, 2.0, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0

    def _obs(self, action: int) -> np.ndarray:
        return np.array([self._t / self.episode_length, float(action), 1.0], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(0), {}

    def step(self, action):
        action = int(action)
        self._t += 1
        terminated = self._t >= self.episode_length
        return self._obs(action), float(action), terminated, False, {}


if "parallel_rl/Counting-v0" not in gym.registry:
    gym.register(id="parallel_rl/Counting-v0", entry_point=CountingEnv)
