"""InteractionSerialEvaluator / VectorEvalMonitor under DI-engine's names; collectors' reset(_policy=, _env=)."""

import gymnasium as gym
import numpy as np
import pytest

from parallel_rl.envs import EnvManager
from parallel_rl.envs.toy import CountingEnv
from parallel_rl.worker import InteractionSerialEvaluator, SampleSerialCollector, VectorEvalMonitor

from .support import ConstantPolicy


class InfoCountingEnv(CountingEnv):
    """Reports the episode's score in the final step's info."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, ({"score": 10.0 * self._t} if terminated else {})


def evaluator(env, policy):
    return InteractionSerialEvaluator(
        InteractionSerialEvaluator.default_config(), env, policy, stop_value=3.0, n_evaluator_episode=4
    )


def test_env_info_is_kept_only_when_asked_and_reaches_the_eval_monitor():
    env = EnvManager.from_env(gym.vector.SyncVectorEnv([lambda: InfoCountingEnv(3)] * 2))
    env.reset()
    for _ in range(3):
        env.step(np.ones(2, dtype=np.int64))
    assert env.info == {}  # keep_info is off: the step does not keep it
    ev = evaluator(env, ConstantPolicy(1))
    stop, info = ev.eval(policy_kwargs={"eps": 0.0})
    assert stop and info["episode_info"] == {"score_mean": 30.0}
    monitor = VectorEvalMonitor(2, 2)
    assert monitor.get_episode_info() is None
    monitor.update_info(0, {"score": 1.0, "name": "x"})
    monitor.update_info(1, {"score": 3.0})
    assert monitor.get_episode_info() == {"score_mean": 2.0}
    with pytest.raises(ValueError, match="force_render=True"):
        ev.eval(force_render=True)
    env.close()


def test_evaluator_reset_and_reset_env_take_di_engine_keyword_names(toy_env):
    ev = evaluator(toy_env, ConstantPolicy(0))
    stop, _ = ev.eval()
    assert not stop and ev.eval_count == 1
    other = EnvManager("parallel_rl/Counting-v0", 2, env_kwargs={"episode_length": 3})
    ev.reset(_policy=ConstantPolicy(1), _env=other)
    assert ev.eval_count == 0 and ev.env is other
    stop, info = ev.eval()
    assert stop and info["eval_episode_return_mean"] == 3.0
    ev.reset_env(_env=toy_env)
    assert ev.env is toy_env
    other.close()


def test_collector_reset_takes_di_engine_keyword_names(toy_env):
    collector = SampleSerialCollector(None, toy_env, ConstantPolicy(0))
    single = EnvManager("parallel_rl/Counting-v0", 1, env_kwargs={"episode_length": 5})
    collector.reset(_policy=ConstantPolicy(1), _env=single)
    data = collector.collect(n_sample=3)
    assert collector.env is single and np.all(data["action"] == 1)
    single.close()


def test_env_info_handles_nested_info_dicts():
    env = EnvManager.from_env(
        gym.vector.SyncVectorEnv([lambda: gym.wrappers.RecordEpisodeStatistics(InfoCountingEnv(2))] * 2)
    )
    ev = evaluator(env, ConstantPolicy(1))
    stop, info = ev.eval()
    assert info["episode_info"] == {"score_mean": 20.0}  # the nested "episode" dict is kept but not averaged
    assert set(env.env_info(0)["episode"]) >= {"r", "l"}
    env.close()
