"""torchrl-style SyncDataCollector over the serial collector (docs/api.md lists the differences)."""

import multiprocessing
import threading

import gymnasium as gym
import numpy as np
import pytest
import torch

from parallel_rl.data.buffer import NaiveReplayBuffer
from parallel_rl.envs import EnvManager
from parallel_rl.envs.toy import CountingEnv
from parallel_rl.compat.torchrl import DataCollectorBase, SyncDataCollector

from .support import ConstantPolicy, eventually


class BiasPolicy:
    """A policy whose weights select a constant action: zero weights, a one-hot bias."""

    def __init__(self, action: int):
        self.net = torch.nn.Linear(3, 2)
        with torch.no_grad():
            self.net.weight.zero_()
            self.net.bias.copy_(torch.nn.functional.one_hot(torch.tensor(action), 2).float())

    def forward(self, obs, **kwargs):
        return self.net(torch.from_numpy(obs)).argmax(-1).numpy()

    def state_dict(self):
        return self.net.state_dict()

    def load_state_dict(self, state):
        self.net.load_state_dict(state)


class GatedCountingEnv(CountingEnv):
    """Steps only once ``gate`` is open (at most 10 s): shows what returns without waiting for steps."""

    def __init__(self, gate: threading.Event):
        super().__init__(episode_length=5)
        self.gate = gate

    def step(self, action):
        if not self.gate.wait(timeout=10):
            raise TimeoutError("GatedCountingEnv: gate not opened within 10 s")
        return super().step(action)


def test_iteration_yields_frames_per_batch_until_total_frames(toy_env, constant_policy):
    collector = SyncDataCollector(toy_env, constant_policy, frames_per_batch=6, total_frames=30)
    assert isinstance(collector, DataCollectorBase)
    batches = list(collector)
    assert [len(b["action"]) for b in batches] == [6] * 5
    assert collector.frames == 30
    collector.shutdown()
    assert toy_env.closed


def test_update_policy_weights_makes_the_next_batch_use_the_new_weights(toy_env):
    collector = SyncDataCollector(toy_env, BiasPolicy(0), frames_per_batch=7, total_frames=-1)
    batches = iter(collector)
    assert np.all(next(batches)["action"] == 0)
    collector.update_policy_weights_(BiasPolicy(1).state_dict())  # 7 is not a multiple of 4 envs: a surplus was made
    assert np.all(next(batches)["action"] == 1)
    collector.update_policy_weights_(BiasPolicy(0))  # a policy object works too
    assert np.all(next(batches)["action"] == 0)
    with pytest.raises(ValueError, match="worker_ids"):
        collector.update_policy_weights_(worker_ids=[0])
    state = collector.state_dict()
    assert state["frames"] == 21
    collector.shutdown()


def test_start_returns_at_once_and_fills_the_replay_buffer_in_the_background():
    gate = threading.Event()
    env = EnvManager.from_env(gym.vector.SyncVectorEnv([lambda: GatedCountingEnv(gate)] * 2))
    buffer = NaiveReplayBuffer({"replay_buffer_size": 16})
    collector = SyncDataCollector(env, BiasPolicy(0), frames_per_batch=8, replay_buffer=buffer)
    collector.start()  # returns although no env can step yet
    assert len(buffer) == 0
    gate.set()
    eventually(lambda: len(buffer) == 16, message="buffer filled by the background collector")
    collector.update_policy_weights_(BiasPolicy(1))
    pushed = buffer.stats().pushed
    eventually(lambda: buffer.stats().pushed >= pushed + 16, message="16 more rows pushed")
    assert np.all(buffer.sample(len(buffer))["action"] == 1)  # every row now came after the update
    collector.async_shutdown(timeout=5)
    assert not any(t.name == "sync-data-collector" for t in threading.enumerate())
    assert env.closed


def test_async_shutdown_is_bounded_by_its_timeout_and_leaves_nothing_open():
    gate = threading.Event()
    env = EnvManager.from_env(gym.vector.SyncVectorEnv([lambda: GatedCountingEnv(gate)]))
    collector = SyncDataCollector(env, ConstantPolicy(1), frames_per_batch=4, replay_buffer=NaiveReplayBuffer())
    collector.start()
    with pytest.raises(TimeoutError, match="still running after timeout=0.2"):
        collector.async_shutdown(timeout=0.2)  # the env is stuck in a step: the call still returns
    gate.set()
    collector.async_shutdown(timeout=5)
    assert not any(t.name == "sync-data-collector" for t in threading.enumerate()) and env.closed


def test_async_shutdown_leaves_no_env_process():
    env = EnvManager("parallel_rl/Counting-v0", 2, vector_mode="async")
    buffer = NaiveReplayBuffer({"replay_buffer_size": 64})
    collector = SyncDataCollector(env, ConstantPolicy(1), frames_per_batch=4, replay_buffer=buffer)
    collector.start()
    eventually(lambda: len(buffer) >= 8, message="background rows")
    collector.async_shutdown(timeout=10)
    assert env.closed
    eventually(lambda: not multiprocessing.active_children(), message="env worker processes gone")


def test_set_seed_and_state_dict_round_trip(toy_env):
    collector = SyncDataCollector(toy_env, BiasPolicy(1), frames_per_batch=4, total_frames=8)
    assert collector.set_seed(3) == 3 + toy_env.num_envs
    assert collector.set_seed(3, static_seed=True) == 3
    list(collector)
    other = SyncDataCollector(EnvManager("parallel_rl/Counting-v0", 1), BiasPolicy(0), frames_per_batch=4)
    other.load_state_dict(collector.state_dict())
    assert other.frames == 8 and np.all(other.next()["action"] == 1)
    collector.init_updater(note="kwargs reach the weight updater")
    assert collector.weight_updater.init_kwargs == {"note": "kwargs reach the weight updater"}
    with pytest.raises(RuntimeError, match="replay_buffer"):
        collector.start()
    collector.shutdown()
    other.shutdown()
