"""Shared fixtures: configs on the deterministic toy env, temp experiment dirs."""
from __future__ import annotations

import numpy as np
import pytest

from parallel_rl.config import compile_config
from parallel_rl.envs import EnvManager


@pytest.fixture
def toy_env():
    """4 copies of parallel_rl/Counting-v0 with 5-step episodes."""
    env = EnvManager("parallel_rl/Counting-v0", 4, seed=0, env_kwargs={"episode_length": 5})
    yield env
    env.close()


class ConstantPolicy:
    """A fake policy: always the same action (deterministic rewards on the toy env)."""

    def __init__(self, action: int = 1):
        self.action = action
        self.calls = []

    def forward(self, obs, **kwargs):
        self.calls.append(kwargs)
        return np.full(len(obs), self.action, dtype=np.int64)


@pytest.fixture
def constant_policy():
    return ConstantPolicy(1)


@pytest.fixture
def cfg(tmp_path):
    return compile_config({"exp_name": str(tmp_path / "exp")})
