"""A deterministic toy env for exact assertions in tests and benchmarks.

``parallel_rl/Counting-v0``: every episode lasts ``episode_length`` steps, the
observation is ``[t / episode_length, last_action, 1.0]`` and the reward is
``1.0`` for action 1, ``0.0`` for action 0. Nothing is random, so step,
episode and return counts are known in advance.

``parallel_rl/Spaces-v0``: the same clock with a chosen observation space
(``box``, ``box2d`` (a 2x3 image-like Box), ``dict``) and action space
(``discrete``, ``box``, ``multidiscrete``): tests of which spaces and
algorithms fit. The reward is ``-|action - 0.5|`` summed (Box) or as Counting's.
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


_OBS_SPACES = {
    "box": lambda: gym.spaces.Box(-1.0, 2.0, shape=(3,), dtype=np.float32),
    "box2d": lambda: gym.spaces.Box(-1.0, 2.0, shape=(2, 3), dtype=np.float32),
    "dict": lambda: gym.spaces.Dict({"t": gym.spaces.Box(-1.0, 2.0, shape=(3,), dtype=np.float32)}),
}
_ACTION_SPACES = {
    "discrete": lambda: gym.spaces.Discrete(2),
    "box": lambda: gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32),
    "multidiscrete": lambda: gym.spaces.MultiDiscrete([2, 3]),
}


class SpacesEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, episode_length: int = 10, obs_space: str = "box", action_space: str = "discrete"):
        if obs_space not in _OBS_SPACES or action_space not in _ACTION_SPACES:
            raise ValueError(
                f"{obs_space=} must be in {sorted(_OBS_SPACES)}, {action_space=} in {sorted(_ACTION_SPACES)}"
            )
        self.episode_length = episode_length
        self.observation_space = _OBS_SPACES[obs_space]()
        self.action_space = _ACTION_SPACES[action_space]()
        self._t = 0

    def _obs(self):
        t = np.full(3, self._t / self.episode_length, dtype=np.float32)
        if isinstance(self.observation_space, gym.spaces.Dict):
            return {"t": t}
        return np.resize(t, self.observation_space.shape).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        if isinstance(self.action_space, gym.spaces.Box):
            reward = -float(np.abs(np.asarray(action) - 0.5).sum())
        else:
            reward = float(np.asarray(action).sum())
        return self._obs(), reward, self._t >= self.episode_length, False, {}


if "parallel_rl/Spaces-v0" not in gym.registry:
    gym.register(id="parallel_rl/Spaces-v0", entry_point=SpacesEnv)
