"""tianshou's AsyncCollector: only the ready envs step (EnvManager.step_ready over AsyncVectorEnv workers)."""

import functools
import multiprocessing

import gymnasium as gym
import numpy as np
import pytest

from parallel_rl.data.buffer import NaiveReplayBuffer
from parallel_rl.envs import EnvManager
from parallel_rl.errors import ConfigError
from parallel_rl.compat.collectors import AsyncCollector

from .support import ConstantPolicy

FORK = multiprocessing.get_context("fork")  # the gate Event reaches the env workers by inheritance


class GatedEnv(gym.Env):
    """Observation ``[env_index, t, 1]``; 5-step episodes, reward 1; a gated env's step waits for ``gate``."""

    def __init__(self, index: int, gate=None):
        self.index, self.gate = index, gate
        self.observation_space = gym.spaces.Box(-1.0, 100.0, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._t = 0

    def _obs(self):
        return np.array([self.index, self._t, 1.0], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        if self.gate is not None and not self.gate.wait(timeout=30):
            raise TimeoutError(f"env {self.index}: gate not opened within 30 s")
        self._t += 1
        return self._obs(), 1.0, self._t >= 5, False, {}


def gated_envs(n: int, gated: dict) -> EnvManager:
    fns = [functools.partial(GatedEnv, i, gated.get(i)) for i in range(n)]
    return EnvManager.from_env(gym.vector.AsyncVectorEnv(fns, context="fork"))


def test_step_ready_steps_only_the_given_envs_and_returns_the_ones_done():
    gate = FORK.Event()
    with gated_envs(3, {0: gate}) as env:
        env.step_timeout = 20.0
        env.reset()
        step = env.step_ready(np.ones(3, dtype=np.int64), np.arange(3))
        assert not step.ready[0] and step.ready[1:].any()  # env 0 is still stepping
        assert env.pending.tolist() == [0] + [i for i in (1, 2) if not step.ready[i]]
        assert (step.valid == step.ready).all() and step.n_valid == int(step.ready.sum())
        with pytest.raises(RuntimeError, match=r"envs \[0\] are still stepping"):
            env.step_ready(np.ones(1, dtype=np.int64), [0])
        with pytest.raises(RuntimeError, match="still stepping from step_ready"):
            env.step(np.ones(3, dtype=np.int64))
        gate.set()
        env.reset()  # waits for env 0's step and drops it
        assert env.pending.tolist() == []


def test_step_ready_needs_an_async_vector_env(toy_env):
    toy_env.reset()
    assert not toy_env.can_step_subset
    with pytest.raises(ConfigError, match="vector_mode='async'"):
        toy_env.step_ready(np.ones(4, dtype=np.int64), np.arange(4))
    with pytest.raises(ConfigError, match="AsyncCollector needs envs in worker processes"):
        AsyncCollector(ConstantPolicy(1), toy_env)


def test_counts_steps_episodes_and_returns_like_collector():
    with EnvManager("parallel_rl/Counting-v0", 3, vector_mode="async", env_kwargs={"episode_length": 5}) as env:
        buffer = NaiveReplayBuffer({"replay_buffer_size": 1000})
        collector = AsyncCollector(ConstantPolicy(1), env, buffer)
        stats = collector.collect(n_step=40)
        # may collect more than asked: at most what came back in the last step beyond n_step
        assert 40 <= stats.n_collected_steps <= 40 + 3 - 1
        assert len(buffer) == stats.n_collected_steps  # 1-step transitions, one per env step
        assert (
            stats.returns.tolist() == [5.0] * stats.n_collected_episodes and stats.n_collected_episodes >= 40 // 5 - 3
        )
        assert (buffer.sample(len(buffer))["reward"] == 1.0).all()
        episodes = collector.collect(n_episode=4)  # every episode finished by the 4th: 4 or more
        assert 4 <= episodes.n_collected_episodes <= 4 + 3 - 1
        assert episodes.lens.tolist() == [5] * episodes.n_collected_episodes
        assert collector.collect_step == stats.n_collected_steps + episodes.n_collected_steps


def test_may_collect_more_than_asked():
    # wait_num=env_num: every step returns all 3 envs, so asking for 1 step gives 3
    with EnvManager("parallel_rl/Counting-v0", 3, vector_mode="async", env_kwargs={"episode_length": 5}) as env:
        collector = AsyncCollector(ConstantPolicy(1), env, wait_num=3)
        stats = collector.collect(n_step=1)
        assert stats.n_collected_steps == 3 and len(collector.buffer) == 3


def test_a_slow_env_never_blocks_the_fast_ones():
    # env 0's step waits for a gate the test opens only afterwards: a collector that stepped every
    # env together could not return (its step would wait for env 0); AsyncCollector collects from the others
    gate = FORK.Event()
    with gated_envs(4, {0: gate}) as env:
        env.step_timeout = 20.0
        buffer = NaiveReplayBuffer({"replay_buffer_size": 1000})
        collector = AsyncCollector(ConstantPolicy(1), env, buffer)
        stats = collector.collect(n_step=30)
        env_ids = buffer.sample(len(buffer))["obs"][:, 0].astype(int)
        assert stats.n_collected_steps >= 30
        assert np.bincount(env_ids, minlength=4)[0] == 0 and (np.bincount(env_ids, minlength=4)[1:] > 0).all()
        assert stats.n_collected_episodes >= 30 // 5 - 3  # whole episodes of the fast envs
        gate.set()
        collector.collect(n_step=30)  # env 0's step comes back now and it takes part
        env_ids = buffer.sample(len(buffer))["obs"][:, 0].astype(int)
        assert np.bincount(env_ids, minlength=4)[0] > 0


class FailingEnv(GatedEnv):
    def step(self, action):
        raise ValueError(f"env {self.index} broke")


def test_an_env_that_raises_in_its_worker_is_reported_and_the_envs_still_close():
    fns = [functools.partial(GatedEnv, 0), functools.partial(FailingEnv, 1)]
    env = EnvManager.from_env(gym.vector.AsyncVectorEnv(fns, context="fork"))
    env.reset()
    with pytest.raises(RuntimeError, match="env 1 raised ValueError: env 1 broke"):
        env.step_ready(np.ones(2, dtype=np.int64), np.arange(2), wait_num=2)
    env.close()
    assert env.closed
