"""tianshou-style Collector over the serial collectors (docs/api.md lists the differences)."""

import gymnasium as gym
import numpy as np
import pytest

from parallel_rl.data.buffer import EpisodeReplayBuffer, NaiveReplayBuffer
from parallel_rl.envs import EnvManager
from parallel_rl.envs.toy import CountingEnv
from parallel_rl.compat.collectors import Collector, CollectStats, CollectStatsBase

from .support import ConstantPolicy


def test_collect_accepts_exactly_one_of_n_step_and_n_episode(toy_env, constant_policy):
    collector = Collector(constant_policy, toy_env)
    with pytest.raises(ValueError, match="exactly one of n_step and n_episode"):
        collector.collect()
    with pytest.raises(ValueError, match="n_step=4 and n_episode=2"):
        collector.collect(n_step=4, n_episode=2)
    with pytest.raises(ValueError, match="n_step=0"):
        collector.collect(n_step=0)


def test_n_step_collects_into_the_buffer_and_reports_tianshou_stats(toy_env, constant_policy):
    buffer = NaiveReplayBuffer({"replay_buffer_size": 100})
    collector = Collector(constant_policy, toy_env, buffer)
    stats = collector.collect(n_step=40)  # 2 episodes of 5 steps in each of 4 envs
    assert isinstance(stats, CollectStats)
    assert stats.n_collected_steps == 40 and stats.n_collected_episodes == 8
    assert stats.returns.tolist() == [5.0] * 8 and stats.lens.tolist() == [5] * 8
    assert stats.returns_stat.mean == 5.0 and stats.returns_stat.std == 0.0
    assert stats.lens_stat.max == 5 and stats.lens_stat.min == 5
    assert stats.collect_time > 0 and stats.collect_speed > 0
    assert len(buffer) == 40
    assert collector.collect_step == 40 and collector.collect_episode == 8
    base = CollectStatsBase(n_collected_episodes=1, n_collected_steps=5)
    assert (base.n_collected_episodes, base.n_collected_steps) == (1, 5)


def _uneven_env(lengths):
    return gym.vector.SyncVectorEnv([lambda n=n: CountingEnv(episode_length=n) for n in lengths])


def test_n_episode_is_unbiased_first_n_minus_env_num_then_one_per_env():
    # env 0 ends an episode every 2 steps, env 1 every 20: the first 4 episodes to
    # finish would all be env 0's; the rule takes the last env_num=2 one from each env
    env = EnvManager.from_env(_uneven_env([2, 20]))
    buffer = EpisodeReplayBuffer({"replay_buffer_size": 10})
    collector = Collector(ConstantPolicy(1), env, buffer)
    stats = collector.collect(n_episode=4)
    assert stats.n_collected_episodes == 4
    assert sorted(stats.lens) == [2, 2, 2, 20]
    assert len(buffer) == 4
    # envs are reset after episodic collection: the next call starts from t=0 everywhere
    stats = collector.collect(n_episode=2)
    assert sorted(stats.lens) == [2, 20]
    collector.close()


def test_random_true_samples_the_action_space():
    env = EnvManager.from_env(_uneven_env([50] * 4))
    collector = Collector(ConstantPolicy(1), env)
    env.action_space.seed(0)
    collector.collect(n_step=200, random=True)
    actions = collector.buffer.sample(collector.buffer.count())["action"]
    assert set(np.unique(actions)) == {0, 1}  # the constant policy would give only 1s
    collector.collect(n_step=20)  # and the policy is back afterwards
    assert collector.buffer.stats().pushed == 220
    collector.close()


def test_a_single_gym_env_is_wrapped(constant_policy):
    collector = Collector(constant_policy, CountingEnv(episode_length=3))
    assert collector.env.num_envs == 1
    stats = collector.collect(n_episode=2)
    assert stats.lens.tolist() == [3, 3] and stats.returns.tolist() == [3.0, 3.0]
    collector.close()


def test_reset_env_buffer_and_stat(constant_policy):
    collector = Collector(constant_policy, CountingEnv(episode_length=5))
    collector.collect(n_step=3)
    assert collector.env.obs[0, 0] == pytest.approx(0.6)
    collector.reset_env(gym_reset_kwargs={"options": None})
    assert collector.env.obs[0, 0] == 0.0
    pushed = collector.buffer.stats().pushed
    collector.reset_buffer(keep_statistics=True)
    assert len(collector.buffer) == 0 and collector.buffer.stats().pushed == pushed
    collector.collect(n_step=2)
    collector.reset_buffer(keep_statistics=False)
    assert len(collector.buffer) == 0 and collector.buffer.stats().pushed == 0
    collector.reset_stat()
    assert (collector.collect_step, collector.collect_episode, collector.collect_time) == (0, 0, 0.0)
    with pytest.raises(ValueError, match="render"):
        collector.collect(n_step=1, render=0.1)
    collector.close()
