"""Other libraries' collector surfaces over our one collection loop.

- tianshou: :class:`Collector` (``collect(n_step=... | n_episode=...)`` ->
  :class:`CollectStats`), :class:`CollectStatsBase`.
- torchrl: :class:`DataCollectorBase` and :class:`SyncDataCollector`
  (iterate over batches of ``frames_per_batch`` frames, ``start()`` to fill a
  replay buffer in the background, ``update_policy_weights_()``,
  ``async_shutdown()``).

Every class here drives :class:`SampleSerialCollector` /
:class:`EpisodeSerialCollector` (the same env manager, policy modes, n-step
builder and buffers as the serial pipeline); nothing here steps an env itself.
Differences from the originals are listed in docs/api.md.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Optional, Union

import gymnasium as gym
import numpy as np
import torch

from ..data.buffer import EpisodeReplayBuffer, IBuffer, NaiveReplayBuffer
from ..envs.env_manager import EnvManager
from .collector import (
    CollectStats,
    CollectStatsBase,
    EpisodeSerialCollector,
    SampleSerialCollector,
    SequenceSummaryStats,
    concat_columns,
)

logger = logging.getLogger(__name__)

__all__ = ["Collector", "CollectStats", "CollectStatsBase", "SequenceSummaryStats", "RandomPolicy", "as_env_manager"]


class RandomPolicy:
    """Samples the env's (batched) action space: what ``collect(random=True)`` acts with."""

    def __init__(self, action_space: gym.Space):
        self.action_space = action_space

    def forward(self, obs: np.ndarray, **kwargs: Any) -> np.ndarray:
        return np.asarray(self.action_space.sample(), dtype=np.int64)[: len(obs)]


def as_env_manager(env: Union[EnvManager, gym.Env, "gym.vector.VectorEnv"]) -> EnvManager:
    """Our :class:`EnvManager` as it is; a gymnasium ``Env`` / ``VectorEnv`` wrapped (tianshou wraps a single env)."""
    return env if isinstance(env, EnvManager) else EnvManager.from_env(env)


def as_policy_mode(policy: Any) -> Any:
    """A policy object with ``collect_mode`` gives that mode; anything with ``forward(obs)`` is used as it is."""
    mode = getattr(policy, "collect_mode", None)
    if mode is not None:
        return mode
    if not callable(getattr(policy, "forward", None)):
        raise TypeError(f"policy {type(policy).__name__} has neither collect_mode nor forward(obs)")
    return policy


class Collector:
    """tianshou-style collector: ``collect(n_step=N)`` or ``collect(n_episode=K)`` into ``buffer``.

    ``policy``: one of our policies (its ``collect_mode`` is used) or any
    object with ``forward(obs, **kwargs) -> actions``; ``env``: an
    :class:`EnvManager`, a gymnasium ``VectorEnv`` or a single ``gym.Env``
    (wrapped as a 1-env vector env); ``buffer``: one of our buffers (default:
    a ``NaiveReplayBuffer`` of 10,000 transitions). ``policy_kwargs`` go to
    every ``forward`` call (e.g. ``{"eps": 0.1}`` for DQN); ``nstep`` /
    ``discount_factor`` shape the transitions as in the serial pipeline
    (tianshou stores 1-step transitions: the default).
    """

    def __init__(
        self,
        policy: Any,
        env: Union[EnvManager, gym.Env, "gym.vector.VectorEnv"],
        buffer: Optional[IBuffer] = None,
        exploration_noise: bool = False,
        *,
        policy_kwargs: Optional[dict] = None,
        nstep: int = 1,
        discount_factor: float = 0.99,
    ):
        self.env = as_env_manager(env)
        self.policy = policy
        self.exploration_noise = exploration_noise
        self.policy_kwargs = dict(policy_kwargs or {})
        self.buffer = buffer if buffer is not None else NaiveReplayBuffer({"replay_buffer_size": 10_000})
        mode = as_policy_mode(policy)
        self._steps = SampleSerialCollector(None, self.env, mode, nstep=nstep, discount_factor=discount_factor)
        self._episodes = EpisodeSerialCollector(None, self.env, mode, discount_factor=discount_factor)
        self._active = self._steps  # whose partial state matches the env's
        self._random = RandomPolicy(self.env.action_space)
        self.reset_stat()

    # ---- tianshou's resets -------------------------------------------------------
    def reset(self, reset_buffer: bool = True, reset_stats: bool = True, gym_reset_kwargs: Optional[dict] = None) -> None:
        self.reset_env(gym_reset_kwargs)
        if reset_buffer:
            self.reset_buffer()
        if reset_stats:
            self.reset_stat()

    def reset_env(self, gym_reset_kwargs: Optional[dict] = None) -> None:
        """Reset every env (``gym_reset_kwargs`` go to gymnasium's ``reset``, e.g. ``{"options": ...}``)."""
        self._active.reset_env(gym_reset_kwargs=gym_reset_kwargs)

    def reset_buffer(self, keep_statistics: bool = False) -> None:
        """Empty the buffer; ``keep_statistics`` keeps its pushed / sampled / evicted counters."""
        counters = {k: getattr(self.buffer, k) for k in ("pushed", "sampled", "evicted") if hasattr(self.buffer, k)}
        self.buffer.clear()
        for name, value in counters.items():
            setattr(self.buffer, name, value if keep_statistics else 0)

    def reset_stat(self) -> None:
        """Zero the running totals ``collect_step``, ``collect_episode``, ``collect_time``."""
        self.collect_step = 0
        self.collect_episode = 0
        self.collect_time = 0.0

    def close(self) -> None:
        self.env.close()

    # ---- collecting ----------------------------------------------------------------
    def _use(self, core) -> None:
        if self._active is not core:  # the other core left the env mid-way: start clean
            core.reset_env()
            self._active = core

    def collect(
        self,
        n_step: Optional[int] = None,
        n_episode: Optional[int] = None,
        random: bool = False,
        render: Optional[float] = None,
        no_grad: bool = True,
        gym_reset_kwargs: Optional[dict] = None,
    ) -> CollectStats:
        """Collect ``n_step`` transitions or ``n_episode`` whole episodes into ``self.buffer``.

        Exactly one of ``n_step`` / ``n_episode``. ``n_episode`` is unbiased
        (tianshou's rule): the first ``n_episode - env_num`` episodes come from
        any env, the last ``env_num`` one from each env, and the envs are
        reset afterwards. ``random=True`` acts by sampling the action space.
        ``gym_reset_kwargs``: reset the envs with them before collecting.
        ``render`` is not supported (our env manager renders nothing).
        """
        if (n_step is None) == (n_episode is None):
            raise ValueError(f"give exactly one of n_step and n_episode, got {n_step=} and {n_episode=}")
        if n_step is not None and n_step <= 0:
            raise ValueError(f"{n_step=} must be > 0")
        if n_episode is not None and n_episode <= 0:
            raise ValueError(f"{n_episode=} must be > 0")
        if render is not None:
            raise ValueError(f"{render=}: rendering is not supported by parallel_rl's env manager; pass render=None")
        core = self._steps if n_step is not None else self._episodes
        self._use(core)
        if gym_reset_kwargs is not None:
            core.reset_env(gym_reset_kwargs=gym_reset_kwargs)
        mode = core._policy
        if random:
            core.reset_policy(self._random)
        try:
            with torch.no_grad() if no_grad else contextlib.nullcontext():
                if n_step is not None:
                    data = core.collect(n_sample=n_step, policy_kwargs=self.policy_kwargs)
                    self.buffer.push(data, cur_collector_envstep=core.envstep)
                else:
                    episodes = core.collect(n_episode=n_episode, policy_kwargs=self.policy_kwargs, spread_evenly=True)
                    pushed = episodes if isinstance(self.buffer, EpisodeReplayBuffer) else concat_columns(episodes)
                    self.buffer.push(pushed, cur_collector_envstep=core.envstep)
                    core.reset_env()  # tianshou resets after episodic collection: no env starts mid-episode
        finally:
            core.reset_policy(mode)
        stats = core.last_stats
        self.collect_step += stats.env_steps
        self.collect_episode += stats.episodes
        self.collect_time += stats.duration
        return stats
