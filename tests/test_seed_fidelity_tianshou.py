"""Code written against tianshou 1.0's Collector / AsyncCollector / CollectStats and torchrl's DataCollectorBase
runs here as it is documented there (issue 27). Each test is one sentence of those documents."""

import dataclasses
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from parallel_rl.compat.collectors import (
    AsyncCollector,
    Collector,
    CollectStats,
    CollectStatsBase,
    SequenceSummaryStats,
)
from parallel_rl.compat.torchrl import SyncDataCollector
from parallel_rl.data.buffer import EpisodeReplayBuffer, NaiveReplayBuffer
from parallel_rl.envs import EnvManager
from parallel_rl.envs.toy import CountingEnv
from parallel_rl.errors import ConfigError

from .support import ConstantPolicy, eventually


class MarkedEnv(gym.Env):
    """Observation ``[t, marker, 1]``: ``marker`` is ``options["marker"]`` of the reset that began the episode."""

    def __init__(self, episode_length: int = 3):
        self.episode_length = episode_length
        self.observation_space = gym.spaces.Box(-100.0, 100.0, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._t, self._marker = 0, 0.0

    def _obs(self):
        return np.array([self._t, self._marker, 1.0], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t, self._marker = 0, float((options or {}).get("marker", 0))
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        return self._obs(), float(action), self._t >= self.episode_length, False, {}


def marked_envs(n: int, episode_length: int = 3, vector=gym.vector.SyncVectorEnv) -> EnvManager:
    return EnvManager.from_env(vector([lambda: MarkedEnv(episode_length) for _ in range(n)]))


def uneven_envs(lengths) -> EnvManager:
    return EnvManager.from_env(gym.vector.SyncVectorEnv([lambda n=n: CountingEnv(episode_length=n) for n in lengths]))


# ---- tianshou: Collector.collect ------------------------------------------------------------------------------


def test_n_step_stats_count_the_transitions_this_call_stored_and_no_surplus_leaks(toy_env, constant_policy):
    # tianshou: collect(n_step=10) on 4 envs steps every env until >= 10 steps (12), all stored and reported
    buffer = NaiveReplayBuffer({"replay_buffer_size": 100})
    collector = Collector(constant_policy, toy_env, buffer)
    stats = collector.collect(n_step=10)
    assert stats.n_collected_steps == len(buffer) == 12
    stats = collector.collect(n_step=2)  # one more vector step: 4 transitions, none carried over
    assert stats.n_collected_steps == len(buffer) - 12 == 4
    assert collector.collect_step == 16


def test_n_episode_returns_exactly_k_episodes_and_counts_their_steps(toy_env, constant_policy):
    # the 4 envs end their 5-step episodes at the same step
    buffer = EpisodeReplayBuffer({"replay_buffer_size": 100})
    collector = Collector(constant_policy, toy_env, buffer)
    stats = collector.collect(n_episode=2)
    assert stats.n_collected_episodes == 2 and len(stats.lens) == 2 and len(stats.returns) == 2
    assert stats.n_collected_steps == int(stats.lens.sum()) == 10
    assert len(buffer) == 2
    stats = collector.collect(n_episode=6)  # 4, then 2 more from 2 envs: 30 steps of those episodes
    assert stats.n_collected_episodes == 6 and stats.lens.tolist() == [5] * 6
    assert stats.n_collected_steps == 30 and len(buffer) == 8


def test_n_episode_below_env_num_is_not_biased_to_short_episodes(constant_policy):
    # tianshou collects n_episode < env_num episodes from the first n_episode envs, not from the fastest ones
    collector = Collector(constant_policy, uneven_envs([20, 2, 2, 2]), EpisodeReplayBuffer({"replay_buffer_size": 10}))
    stats = collector.collect(n_episode=1)
    assert stats.lens.tolist() == [20] and stats.n_collected_steps == 20
    collector.close()


def test_gym_reset_kwargs_apply_to_every_reset_during_collect(constant_policy):
    collector = Collector(constant_policy, marked_envs(2), NaiveReplayBuffer({"replay_buffer_size": 100}))
    collector.collect(n_step=4)  # the constructor's reset: marker 0; each env is at t=2 of 3
    collector.reset_buffer()
    # 6 vector steps: each env ends its first episode, then every episode begun during the call has marker 7
    stats = collector.collect(n_step=12, gym_reset_kwargs={"options": {"marker": 7}})
    rows = collector.buffer.sample(len(collector.buffer))
    assert stats.n_collected_steps == len(rows["obs"]) == 12
    begun_before = rows["obs"][:, 1] == 0
    assert begun_before.sum() == 2 and (rows["obs"][begun_before, 0] == 2).all()
    assert (rows["obs"][~begun_before, 1] == 7).all() and (rows["next_obs"][~begun_before, 1] == 7).all()
    collector.reset_buffer()
    collector.collect(n_episode=4, gym_reset_kwargs={"options": {"marker": 3}})
    rows = collector.buffer.sample(len(collector.buffer))
    assert len(rows["obs"]) == 12 and (rows["obs"][:, 1] == 3).all()  # 4 episodes of 3 steps
    collector.close()


def test_gym_reset_kwargs_apply_to_an_episode_that_ended_in_the_call_before(constant_policy):
    collector = Collector(constant_policy, marked_envs(2), NaiveReplayBuffer({"replay_buffer_size": 100}))
    collector.collect(n_step=6)  # both envs end their first episode on the last step of this call
    collector.reset_buffer()
    collector.collect(n_step=12, gym_reset_kwargs={"options": {"marker": 9}})  # 2 more episodes per env
    assert (collector.buffer.sample(12)["obs"][:, 1] == 9).all()
    collector.close()


def test_gym_reset_kwargs_reach_the_envs_of_an_async_collector(constant_policy):
    with marked_envs(2, vector=lambda fns: gym.vector.AsyncVectorEnv(fns, context="fork")) as env:
        collector = AsyncCollector(constant_policy, env, NaiveReplayBuffer({"replay_buffer_size": 100}))
        collector.collect(n_episode=2)  # whole episodes begun by the constructor's reset: marker 0
        collector.reset_buffer()
        collector.collect(n_step=20, gym_reset_kwargs={"options": {"marker": 4}})
        rows = collector.buffer.sample(len(collector.buffer))
        begun_before = rows["obs"][:, 1] == 0  # only the rest of episodes running when the call began
        assert (rows["obs"][~begun_before, 1] == 4).all() and (~begun_before).sum() >= 20 - 2 * 3
        assert (rows["obs"][begun_before, 0] > 0).all()  # no episode with marker 0 began in the call


def test_gym_reset_kwargs_on_envs_that_cannot_reset_one_env_say_so(constant_policy):
    collector = Collector(constant_policy, EnvManager("CartPole-v1", 2))  # CartPole's own vector env
    with pytest.raises(ConfigError, match="vector_mode='sync'"):
        collector.collect(n_step=4, gym_reset_kwargs={"options": {"low": -0.01, "high": 0.01}})
    collector.close()


def test_reset_takes_gym_reset_kwargs_as_its_second_positional_argument(constant_policy):
    collector = Collector(constant_policy, marked_envs(2), NaiveReplayBuffer({"replay_buffer_size": 100}))
    collector.collect(n_step=4)
    collector.reset(False, {"options": {"marker": 5}})  # reset_buffer=False, gym_reset_kwargs
    assert (collector.env.obs[:, 1] == 5).all() and len(collector.buffer) == 4
    assert (collector.collect_step, collector.collect_episode) == (0, 0)
    collector.close()


class NoisyPolicy(ConstantPolicy):
    """tianshou's exploration hook: ``exploration_noise(act, batch)`` flips every action."""

    def __init__(self):
        super().__init__(1)
        self.batches = []

    def exploration_noise(self, act, batch):
        self.batches.append(batch)
        return 1 - act


def test_exploration_noise_true_calls_the_policys_exploration_noise(toy_env):
    policy = NoisyPolicy()
    collector = Collector(policy, toy_env, exploration_noise=True)
    collector.collect(n_step=8)
    assert (collector.buffer.sample(8)["action"] == 0).all()
    assert len(policy.batches) == 2 and policy.batches[0].obs.shape == (4, 3)  # batch.obs: what the policy saw
    quiet = Collector(NoisyPolicy(), uneven_envs([5]), exploration_noise=False)
    quiet.collect(n_step=3)
    assert (quiet.buffer.sample(3)["action"] == 1).all() and quiet.policy.batches == []
    quiet.close()


def test_preprocess_fn_is_the_fourth_argument_and_applied_to_resets_and_steps(toy_env, constant_policy):
    seen = []

    def preprocess_fn(**kwargs):
        seen.append(sorted(kwargs))
        if "obs_next" in kwargs:  # a step: obs_next, rew, done, info, policy, env_id, act
            return {"obs_next": kwargs["obs_next"] + 10.0, "rew": kwargs["rew"] * 2.0}
        return {"obs": kwargs["obs"] + 10.0}  # a reset: obs, info, env_id

    buffer = NaiveReplayBuffer({"replay_buffer_size": 100})
    collector = Collector(constant_policy, toy_env, buffer, preprocess_fn)
    assert collector.preprocess_fn is preprocess_fn
    collector.collect(n_step=12)  # crosses the end of the 5-step episodes: resets in between
    rows = buffer.sample(len(buffer))
    assert (rows["obs"][:, 2] == 11.0).all() and (rows["next_obs"][:, 2] == 11.0).all()
    assert (rows["reward"] == 2.0).all()
    assert ["env_id", "info", "obs"] in seen and ["act", "done", "env_id", "info", "obs_next", "policy", "rew"] in seen


# ---- tianshou: CollectStats ----------------------------------------------------------------------------------


def test_collect_stats_is_tianshous_dataclass(toy_env, constant_policy):
    assert issubclass(CollectStats, CollectStatsBase)
    names = {f.name for f in dataclasses.fields(CollectStats)}
    assert {
        "n_collected_episodes",
        "n_collected_steps",
        "collect_time",
        "collect_speed",
        "returns",
        "returns_stat",
        "lens",
        "lens_stat",
    } <= names
    built = CollectStats(
        n_collected_episodes=1,
        n_collected_steps=5,
        collect_time=0.5,
        collect_speed=10.0,
        returns=np.array([5.0]),
        returns_stat=SequenceSummaryStats.from_sequence([5.0]),
        lens=np.array([5]),
        lens_stat=SequenceSummaryStats.from_sequence([5]),
    )
    assert built.n_collected_steps == 5 and built.lens_stat.mean == 5.0
    collector = Collector(constant_policy, toy_env)
    stats = collector.collect(n_step=4)  # one vector step: no episode ends
    assert isinstance(stats.returns, np.ndarray) and isinstance(stats.lens, np.ndarray)
    assert stats.returns.size == 0 and stats.lens.size == 0
    assert stats.returns_stat is None and stats.lens_stat is None
    stats = collector.collect(n_step=16)
    assert stats.returns.tolist() == [5.0] * 4 and stats.lens.dtype.kind == "i"
    assert stats.returns_stat.mean == 5.0 and stats.lens_stat.max == 5


# ---- tianshou: AsyncCollector --------------------------------------------------------------------------------


def test_async_collector_n_episode_stores_every_step_it_counts():
    fns = [lambda: CountingEnv(episode_length=3), lambda: CountingEnv(episode_length=50)]
    with EnvManager.from_env(gym.vector.AsyncVectorEnv(fns, context="fork")) as env:
        buffer = NaiveReplayBuffer({"replay_buffer_size": 1000})
        collector = AsyncCollector(ConstantPolicy(1), env, buffer)
        stats = collector.collect(n_episode=1)
        assert stats.n_collected_episodes >= 1
        assert stats.n_collected_steps == len(buffer) == int(stats.lens.sum())
        more = collector.collect(n_episode=2)
        assert more.n_collected_steps == len(buffer) - stats.n_collected_steps == int(more.lens.sum())


# ---- torchrl: DataCollectorBase ------------------------------------------------------------------------------


class WeightPolicy(ConstantPolicy):
    def __init__(self):
        super().__init__(1)
        self.net = torch.nn.Linear(3, 2)

    def state_dict(self):
        return self.net.state_dict()

    def load_state_dict(self, state):
        self.net.load_state_dict(state)


def test_init_updater_forwards_positional_arguments_and_is_a_no_op_without_an_updater(toy_env):
    collector = SyncDataCollector(toy_env, WeightPolicy(), frames_per_batch=4)
    collector.init_updater("first", second=2)
    assert collector.weight_updater.init_args == ("first",)
    assert collector.weight_updater.init_kwargs == {"second": 2}
    collector.weight_updater = None
    collector.init_updater("ignored")  # torchrl: no weight updater, nothing to do
    collector.shutdown()


def test_update_policy_weights_takes_torchrls_deprecated_policy_weights_keyword(toy_env):
    policy, trained = WeightPolicy(), WeightPolicy()
    collector = SyncDataCollector(toy_env, policy, frames_per_batch=4)
    with pytest.warns(DeprecationWarning, match="policy_or_weights"):
        collector.update_policy_weights_(policy_weights=trained.state_dict())
    assert torch.equal(policy.net.weight, trained.net.weight)
    collector.shutdown()


def test_next_returns_none_once_total_frames_are_delivered_and_len_counts_batches(toy_env, constant_policy):
    collector = SyncDataCollector(toy_env, constant_policy, frames_per_batch=4, total_frames=10)
    assert len(collector) == 3
    assert [len(collector.next()["action"]) for _ in range(3)] == [4, 4, 4]
    assert collector.next() is None
    with pytest.raises(RuntimeError, match="total_frames"):
        len(SyncDataCollector(toy_env, constant_policy, frames_per_batch=4))
    collector.shutdown(timeout=5, close_env=False)  # torchrl's shutdown(timeout, close_env)
    assert not toy_env.closed


def test_pause_stops_background_collection_until_the_block_ends(toy_env, constant_policy):
    buffer = NaiveReplayBuffer({"replay_buffer_size": 100_000})
    collector = SyncDataCollector(toy_env, constant_policy, frames_per_batch=8, replay_buffer=buffer)
    collector.start()
    eventually(lambda: collector.frames > 0, message="background collection started")
    with collector.pause():
        frames = collector.frames
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:  # nothing is collected while paused
            assert collector.frames == frames
    eventually(lambda: collector.frames > frames, message="collection resumed after pause()")
    collector.async_shutdown(timeout=10)


def test_iterator_and_the_collector_attributes_torchrl_documents(toy_env, constant_policy):
    collector = SyncDataCollector(toy_env, constant_policy, frames_per_batch=4, total_frames=8)
    assert [len(batch["obs"]) for batch in collector.iterator()] == [4, 4]
    assert collector.requested_frames_per_batch == collector.frames_per_batch == 4
    assert (collector.trust_policy, collector.compiled_policy, collector.cudagraphed_policy, collector.verbose) == (
        True,
        False,
        False,
        False,
    )
    collector.shutdown()
