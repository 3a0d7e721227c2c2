"""Other libraries' collector surfaces over our one collection loop.

- tianshou (1.0): :class:`Collector` (``collect(n_step=... | n_episode=...)`` ->
  :class:`CollectStats`), :class:`AsyncCollector` (steps only the ready envs),
  :class:`CollectStatsBase`; ``preprocess_fn`` through :class:`PreprocessedEnv`,
  ``exploration_noise`` through :class:`ExplorationMode`.
- torchrl: :class:`~parallel_rl.compat.torchrl.DataCollectorBase` and
  :class:`~parallel_rl.compat.torchrl.SyncDataCollector` in :mod:`parallel_rl.compat.torchrl`.

Every class here drives :class:`SampleSerialCollector` /
:class:`EpisodeSerialCollector` (the same env manager, policy modes, n-step
builder and buffers as the serial pipeline); nothing here steps an env itself.
Differences from the originals are listed in docs/api.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any, Callable, Optional, Union

import gymnasium as gym
import numpy as np
import torch
from easydict import EasyDict

from ..data.buffer import EpisodeReplayBuffer, IBuffer, NaiveReplayBuffer
from ..envs.env_manager import EnvManager
from ..envs.steps import EnvStep
from ..errors import ConfigError
from ..collector.serial import (
    CollectStats,
    CollectStatsBase,
    EpisodeSerialCollector,
    RandomPolicy,
    SampleSerialCollector,
    SequenceSummaryStats,
    concat_columns,
    split_policy_output,
)

logger = logging.getLogger(__name__)

__all__ = [
    "Collector",
    "AsyncCollector",
    "CollectStats",
    "CollectStatsBase",
    "SequenceSummaryStats",
    "RandomPolicy",
    "as_env_manager",
]


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


class ExplorationMode:
    """A collect mode whose actions pass through tianshou's ``policy.exploration_noise(act, batch)`` while
    ``enabled``; ``batch.obs`` is what the policy saw. A policy without ``exploration_noise`` (ours explore in
    their collect mode) keeps its actions, as tianshou's base policy does."""

    def __init__(self, mode: Any, policy: Any, enabled: bool):
        self.mode, self.policy, self.enabled = mode, policy, enabled

    def forward(self, obs: np.ndarray, **kwargs: Any) -> Any:
        out = self.mode.forward(obs, **kwargs)
        noise = getattr(self.policy, "exploration_noise", None)
        if not self.enabled or noise is None:
            return out
        act, extra = split_policy_output(out)
        act = np.asarray(noise(np.asarray(act), EasyDict(obs=obs)))
        return act if extra is None else {"action": act, **extra}

    def __getattr__(self, name: str) -> Any:  # state_dict, load_state_dict, ... of the mode
        return getattr(self.mode, name)


class PreprocessedEnv:
    """An env manager whose observations and rewards pass through tianshou's ``preprocess_fn``.

    A reset calls ``preprocess_fn(obs=, info=, env_id=)``; a step, on the rows that are transitions,
    ``preprocess_fn(obs_next=, rew=, done=, info=, policy=, env_id=, act=)`` (``info`` and ``policy`` are
    empty dicts: the hot path keeps neither). The returned dict's ``obs`` / ``obs_next`` / ``rew`` (others
    are ignored) replace the env's: the policy acts on and the buffer stores the processed values, and
    episode returns add up processed rewards (tianshou reads them from its buffer). Everything else is the
    wrapped :class:`EnvManager`'s.
    """

    def __init__(self, env: EnvManager, preprocess_fn: Callable[..., Any]):
        self.manager, self.preprocess_fn = env, preprocess_fn
        self._obs: Optional[np.ndarray] = None
        self._returns = np.zeros(env.num_envs, dtype=np.float64)
        self._sent: Optional[np.ndarray] = None  # step_ready: each env's last action, full width

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)

    @property
    def obs(self) -> np.ndarray:
        if self._obs is None:
            raise RuntimeError(f"EnvManager({self.manager.env_id}): call reset() before reading obs")
        return self._obs

    def _reset_obs(self, obs: np.ndarray, env_id: np.ndarray) -> np.ndarray:
        out = self.preprocess_fn(obs=obs, info={}, env_id=env_id) or {}
        return np.asarray(out.get("obs", obs), dtype=np.float32)

    def reset(self, **kwargs: Any) -> np.ndarray:
        self._obs = self._reset_obs(self.manager.reset(**kwargs), np.arange(self.manager.num_envs))
        self._returns[:] = 0.0
        return self._obs

    def reset_done(self) -> np.ndarray:
        ids = self.manager.reset_done()
        if ids.size:
            self._obs[ids] = self._reset_obs(self.manager.obs[ids], ids)
        return ids

    def step(self, actions: np.ndarray) -> EnvStep:
        return self._processed(self.manager.step(actions), np.asarray(actions))

    def step_ready(self, actions: np.ndarray, env_ids: np.ndarray, *args: Any, **kwargs: Any) -> EnvStep:
        actions = np.asarray(actions)
        if self._sent is None:
            self._sent = np.zeros((self.manager.num_envs,) + actions.shape[1:], dtype=actions.dtype)
        self._sent[np.asarray(env_ids)] = actions
        return self._processed(self.manager.step_ready(actions, env_ids, *args, **kwargs), self._sent)

    def _processed(self, step: EnvStep, act: np.ndarray) -> EnvStep:
        rows = np.flatnonzero(step.valid)
        obs_next, reward = step.obs.copy(), step.reward.copy()
        if rows.size:
            out = (
                self.preprocess_fn(
                    obs_next=step.obs[rows],
                    rew=step.reward[rows],
                    done=step.done[rows],
                    info={},
                    policy={},
                    env_id=rows,
                    act=act[rows],
                )
                or {}
            )
            obs_next[rows] = out.get("obs_next", obs_next[rows])
            reward[rows] = out.get("rew", reward[rows])
        current = self._obs.copy()
        current[rows] = obs_next[rows]
        stepped = np.ones(len(step.valid), dtype=bool) if step.ready is None else step.ready
        fresh = stepped & ~step.valid  # auto-reset by gymnasium: the row is a first observation
        if step.reset is not None:
            fresh |= step.reset  # reset by the manager (reset_kwargs) after its last step
        if fresh.any():
            ids = np.flatnonzero(fresh)
            current[ids] = self._reset_obs(self.manager.obs[ids], ids)
        self._obs = current
        self._returns[rows] += reward[rows]
        done = step.done
        episode_return = np.where(done, self._returns, np.nan) if step.episode_ended else step.episode_return
        self._returns[done] = 0.0
        return dataclasses.replace(step, obs=obs_next, reward=reward.astype(np.float32), episode_return=episode_return)


class Collector:
    """tianshou's ``Collector(policy, env, buffer=None, preprocess_fn=None, exploration_noise=False)``.

    ``collect(n_step=N)`` or ``collect(n_episode=K)`` into ``buffer``, returning :class:`CollectStats`.
    ``policy``: one of our policies (its ``collect_mode`` is used) or any object with ``forward(obs,
    **kwargs) -> actions`` (and, for ``exploration_noise=True``, tianshou's ``exploration_noise(act,
    batch)``); ``env``: an :class:`EnvManager`, a gymnasium ``VectorEnv`` or a single ``gym.Env`` (wrapped
    as a 1-env vector env); ``buffer``: one of our buffers (default: a ``NaiveReplayBuffer`` of 10,000
    transitions); ``preprocess_fn``: see :class:`PreprocessedEnv`. ``policy_kwargs`` go to every
    ``forward`` call (e.g. ``{"eps": 0.1}`` for DQN); ``nstep`` / ``discount_factor`` shape the transitions
    as in the serial pipeline (tianshou stores 1-step transitions: the default).
    """

    # n_episode: tianshou's unbiased rule and a reset of the envs afterwards (AsyncCollector: neither)
    _exact = True

    def __init__(
        self,
        policy: Any,
        env: Union[EnvManager, gym.Env, "gym.vector.VectorEnv"],
        buffer: Optional[IBuffer] = None,
        preprocess_fn: Optional[Callable[..., Any]] = None,
        exploration_noise: bool = False,
        *,
        policy_kwargs: Optional[dict] = None,
        nstep: int = 1,
        discount_factor: float = 0.99,
    ):
        self._manager = as_env_manager(env)
        self.env = self._manager if preprocess_fn is None else PreprocessedEnv(self._manager, preprocess_fn)
        self.policy = policy
        self.preprocess_fn = preprocess_fn
        self.policy_kwargs = dict(policy_kwargs or {})
        self.buffer = buffer if buffer is not None else NaiveReplayBuffer({"replay_buffer_size": 10_000})
        self._mode = ExplorationMode(as_policy_mode(policy), policy, exploration_noise)
        self._steps = SampleSerialCollector(None, self.env, self._mode, nstep=nstep, discount_factor=discount_factor)
        self._episodes = EpisodeSerialCollector(None, self.env, self._mode, discount_factor=discount_factor)
        self._active = self._steps  # whose partial state matches the env's
        self._random = RandomPolicy(self.env.action_space)
        self.reset_stat()

    @property
    def exploration_noise(self) -> bool:
        return self._mode.enabled

    @exploration_noise.setter
    def exploration_noise(self, value: bool) -> None:
        self._mode.enabled = value

    # ---- tianshou's resets -------------------------------------------------------
    def reset(
        self, reset_buffer: bool = True, gym_reset_kwargs: Optional[dict] = None, *, reset_stats: bool = True
    ) -> None:
        """Reset the envs (``gym_reset_kwargs`` go to gymnasium's ``reset``), the stats and, if asked, the buffer."""
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
    def _use(self, core, gym_reset_kwargs: Optional[dict]) -> None:
        if self._active is not core:  # the other core left the env mid-way: start clean
            core.reset_env(gym_reset_kwargs=gym_reset_kwargs)
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
        """Collect at least ``n_step`` transitions or exactly ``n_episode`` whole episodes into ``self.buffer``.

        Exactly one of ``n_step`` / ``n_episode``. ``n_step`` steps every env
        until at least ``n_step`` transitions are made and stores them all (up
        to ``env_num - 1`` more, as tianshou). ``n_episode`` is unbiased
        (tianshou's rule): the first ``n_episode - env_num`` episodes come from
        any env, the last ``env_num`` one from each env (fewer episodes than
        envs: one from each of the first ``n_episode`` envs), and the envs are
        reset afterwards. The stats count what this call stored: its
        transitions, and the episodes that ended in it. ``random=True`` acts by
        sampling the action space. ``gym_reset_kwargs`` go to every reset made
        during the call (each env whose episode ends is reset with them at
        once). ``render`` is not supported (our env manager renders nothing).
        """
        if (n_step is None) == (n_episode is None):
            raise ValueError(f"give exactly one of n_step and n_episode, got {n_step=} and {n_episode=}")
        if n_step is not None and n_step <= 0:
            raise ValueError(f"{n_step=} must be > 0")
        if n_episode is not None and n_episode <= 0:
            raise ValueError(f"{n_episode=} must be > 0")
        if render is not None:
            raise ValueError(f"{render=}: rendering is not supported by parallel_rl's env manager; pass render=None")
        if gym_reset_kwargs is not None and not self._manager.can_reset_subset:
            raise ConfigError(
                f"gym_reset_kwargs={gym_reset_kwargs} need per-env resets, which "
                f"{self._manager.vector_mode} envs cannot do; build the env with vector_mode='sync'"
            )
        core = self._steps if n_step is not None else self._episodes
        mode = core._policy
        if random:
            core.reset_policy(self._random)
        self._manager.reset_kwargs = gym_reset_kwargs
        try:
            self._use(core, gym_reset_kwargs)
            self.env.reset_done()  # an episode that ended in an earlier call: its reset is made in this one
            with torch.no_grad() if no_grad else contextlib.nullcontext():
                if n_step is not None:
                    data = core.collect(n_sample=n_step, policy_kwargs=self.policy_kwargs, drop_extra=False)
                    self.buffer.push(data, cur_collector_envstep=core.envstep)
                else:
                    episodes = core.collect(
                        n_episode=n_episode,
                        policy_kwargs=self.policy_kwargs,
                        spread_evenly=self._exact,
                        drop_extra=self._exact,
                    )
                    pushed = episodes if isinstance(self.buffer, EpisodeReplayBuffer) else concat_columns(episodes)
                    self.buffer.push(pushed, cur_collector_envstep=core.envstep)
                    if self._exact:  # tianshou resets after episodic collection: no env starts mid-episode
                        core.reset_env(gym_reset_kwargs=gym_reset_kwargs)
        finally:
            self._manager.reset_kwargs = None
            core.reset_policy(mode)
        done = core.last_stats
        stats = CollectStats(
            n_collected_episodes=len(done.lens),
            returns=done.returns,
            returns_stat=done.returns_stat,
            lens=done.lens,
            lens_stat=done.lens_stat,
            transitions=done.transitions,
        )
        stats.n_collected_steps = done.transitions  # what this call stored
        stats.duration = done.duration
        self.collect_step += stats.n_collected_steps
        self.collect_episode += stats.n_collected_episodes
        self.collect_time += stats.collect_time
        return stats


class AsyncCollector(Collector):
    """tianshou's ``AsyncCollector``: steps only the envs that are ready, so a slow env never holds up the rest.

    ``env`` must run its envs in worker processes: an :class:`EnvManager` with
    ``vector_mode="async"`` or a gymnasium ``AsyncVectorEnv``. Each vector
    step acts on the envs whose last step has come back and waits until at
    least one stepping env is done (up to ``wait_num`` of them, or what is
    done after ``timeout`` seconds). The same collection loops as
    :class:`Collector` (:meth:`ISerialCollector.step_ready_envs`); transitions
    are 1-step.

    ``collect(n_step=N)`` may collect more than asked: every transition that
    came back in the last step is kept (up to ``env_num - 1`` more), and envs
    still stepping finish in the next call. ``collect(n_episode=K)`` likewise
    returns every episode finished when the K-th one is (K or more; short
    ones first, not tianshou's unbiased rule of :class:`Collector`) and does
    not reset the envs afterwards; it stores and counts whole episodes (an
    episode still running is stored and counted by the call in which it ends).
    """

    _exact = False

    def __init__(
        self,
        policy: Any,
        env: Union[EnvManager, "gym.vector.AsyncVectorEnv"],
        buffer: Optional[IBuffer] = None,
        preprocess_fn: Optional[Callable[..., Any]] = None,
        exploration_noise: bool = False,
        *,
        wait_num: int = 1,
        timeout: Optional[float] = None,
        policy_kwargs: Optional[dict] = None,
        discount_factor: float = 0.99,
    ):
        manager = as_env_manager(env)
        if not manager.can_step_subset:
            raise ConfigError(
                f"AsyncCollector needs envs in worker processes (EnvManager(..., vector_mode='async') or a "
                f"gymnasium AsyncVectorEnv), got {manager.vector_mode!r}; use Collector for this env"
            )
        super().__init__(
            policy,
            manager,
            buffer,
            preprocess_fn,
            exploration_noise,
            policy_kwargs=policy_kwargs,
            nstep=1,
            discount_factor=discount_factor,
        )
        self.wait_num, self.timeout = wait_num, timeout
        for core in (self._steps, self._episodes):
            core.step_ready_envs(wait_num, timeout)
