"""Serial collectors: run a vector env with a policy, return columns of transitions.

``SampleSerialCollector.collect(n_sample=N)`` returns exactly N n-step
transitions (the surplus of the last vector step is kept for the next call);
``EpisodeSerialCollector.collect(n_episode=K)`` returns exactly K finished
episodes. Both report a :class:`CollectStats` in ``last_stats``.

A transition row: ``obs, action, reward, next_obs, done, discount, collect_iter``
where ``reward`` is the n-step return ``sum_k gamma^k r_{t+k}``, ``discount`` is
``gamma^k`` for the k steps it spans, and ``done`` is true only on termination
(a time-limit truncation still bootstraps).
"""
from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np
from easydict import EasyDict

from ..envs.env_manager import EnvManager
from ..registry import Registry

Columns = Dict[str, np.ndarray]

COLLECTOR_REGISTRY = Registry("collector")


@dataclass
class CollectStats:
    """What one ``collect`` call did (tianshou-style)."""

    env_steps: int = 0
    transitions: int = 0
    episodes: int = 0
    returns: List[float] = field(default_factory=list)
    lengths: List[int] = field(default_factory=list)
    duration: float = 0.0

    @property
    def speed(self) -> float:
        """Env steps per second."""
        return self.env_steps / self.duration if self.duration > 0 else 0.0

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns)) if self.returns else float("nan")


def concat_columns(pieces: List[Columns]) -> Columns:
    if not pieces:
        return {}
    if len(pieces) == 1:
        return pieces[0]
    return {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}


def slice_columns(cols: Columns, start: int, stop: Optional[int] = None) -> Columns:
    return {k: v[start:stop] for k, v in cols.items()}


def columns_len(cols: Columns) -> int:
    return len(next(iter(cols.values()))) if cols else 0


class ISerialCollector(abc.ABC):
    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(type="sample")

    @abc.abstractmethod
    def collect(self, *args, **kwargs): ...

    @abc.abstractmethod
    def reset_env(self, env: Optional[EnvManager] = None) -> None: ...

    @abc.abstractmethod
    def reset_policy(self, policy=None) -> None: ...

    def reset(self, policy=None, env: Optional[EnvManager] = None) -> None:
        self.reset_env(env)
        self.reset_policy(policy)

    @abc.abstractmethod
    def close(self) -> None: ...


class _NStepWindow:
    """Per-env windows of the last n steps, turned into n-step transitions (vectorized)."""

    def __init__(self, num_envs: int, obs_shape: tuple, nstep: int, gamma: float):
        self.n, self.gamma = nstep, gamma
        self.obs = np.zeros((num_envs, nstep) + obs_shape, dtype=np.float32)
        self.action = np.zeros((num_envs, nstep), dtype=np.int64)
        self.reward = np.zeros((num_envs, nstep), dtype=np.float32)
        self.length = np.zeros(num_envs, dtype=np.int64)
        self.gammas = (gamma ** np.arange(nstep)).astype(np.float32)

    def clear(self) -> None:
        self.length[:] = 0

    def step(self, obs, action, step, collect_iter: int) -> Optional[Columns]:
        """Add one vector step; return the transitions it completes (or None)."""
        valid = step.valid
        # Shift every window left by one and write the new step at the end.
        self.obs[:, :-1] = self.obs[:, 1:]
        self.action[:, :-1] = self.action[:, 1:]
        self.reward[:, :-1] = self.reward[:, 1:]
        self.obs[:, -1] = obs
        self.action[:, -1] = action
        self.reward[:, -1] = step.reward
        self.length = np.where(valid, np.minimum(self.length + 1, self.n), 0)
        done = step.terminated | step.truncated
        pieces = []
        full = np.flatnonzero((self.length == self.n) & ~done)
        if len(full):
            pieces.append(
                {
                    "obs": self.obs[full, 0],
                    "action": self.action[full, 0],
                    "reward": self.reward[full] @ self.gammas,
                    "next_obs": step.obs[full],
                    "done": np.zeros(len(full), dtype=bool),
                    "discount": np.full(len(full), self.gamma ** self.n, dtype=np.float32),
                }
            )
        for env in np.flatnonzero(done):  # episode ended: flush its whole window
            h = int(self.length[env])
            rewards = self.reward[env, self.n - h:]
            returns = np.array([rewards[j:] @ self.gammas[: h - j] for j in range(h)], dtype=np.float32)
            pieces.append(
                {
                    "obs": self.obs[env, self.n - h:],
                    "action": self.action[env, self.n - h:],
                    "reward": returns,
                    "next_obs": np.repeat(step.obs[env][None], h, axis=0),
                    "done": np.full(h, bool(step.terminated[env])),
                    "discount": (self.gamma ** np.arange(h, 0, -1)).astype(np.float32),
                }
            )
            self.length[env] = 0
        if not pieces:
            return None
        out = concat_columns(pieces)
        out["reward"] = out["reward"].astype(np.float32)
        out["collect_iter"] = np.full(len(out["action"]), collect_iter, dtype=np.int64)
        return out


class SampleSerialCollector(ISerialCollector):
    """Collects exactly ``n_sample`` n-step transitions per call."""

    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(type="sample")

    def __init__(
        self,
        cfg: Optional[EasyDict],
        env: EnvManager,
        policy,
        nstep: int = 1,
        discount_factor: float = 0.99,
    ):
        """``policy``: a policy mode whose ``forward(obs, **policy_kwargs)`` returns actions."""
        if nstep <= 0:
            raise ValueError(f"{nstep=} must be > 0")
        self.cfg = cfg
        self._nstep, self._gamma = nstep, discount_factor
        self._policy = policy
        self._env: Optional[EnvManager] = None
        self.envstep = 0
        self.last_stats = CollectStats()
        self.reset_env(env)

    def reset_env(self, env: Optional[EnvManager] = None) -> None:
        if env is not None:
            self._env = env
        self._env.reset()
        self._window = _NStepWindow(self._env.num_envs, self._env.obs_shape, self._nstep, self._gamma)
        self._carry: List[Columns] = []
        self._carry_len = 0

    def reset_policy(self, policy=None) -> None:
        if policy is not None:
            self._policy = policy

    @property
    def env(self) -> EnvManager:
        return self._env

    def collect(self, n_sample: int, train_iter: int = 0, policy_kwargs: Optional[dict] = None) -> Columns:
        """Run the envs until ``n_sample`` transitions are ready; return exactly that many."""
        if n_sample <= 0:
            raise ValueError(f"{n_sample=} must be > 0")
        policy_kwargs = policy_kwargs or {}
        stats = CollectStats()
        start = time.perf_counter()
        pieces, have = self._carry, self._carry_len
        env, window, forward = self._env, self._window, self._policy.forward
        while have < n_sample:
            obs = env.obs
            action = forward(obs, **policy_kwargs)
            step = env.step(action)
            stats.env_steps += int(step.valid.sum())
            done_rows = np.flatnonzero(step.terminated | step.truncated)
            if len(done_rows):
                stats.episodes += len(done_rows)
                stats.returns.extend(step.episode_return[done_rows].tolist())
                stats.lengths.extend(step.episode_length[done_rows].tolist())
            out = window.step(obs, action, step, train_iter)
            if out is not None:
                pieces.append(out)
                have += len(out["action"])
        data = concat_columns(pieces)
        self._carry = [slice_columns(data, n_sample)] if have > n_sample else []
        self._carry_len = have - n_sample
        data = slice_columns(data, 0, n_sample)
        self.envstep += stats.env_steps
        stats.transitions = n_sample
        stats.duration = time.perf_counter() - start
        self.last_stats = stats
        return data

    def close(self) -> None:
        if self._env is not None:
            self._env.close()


class EpisodeSerialCollector(ISerialCollector):
    """Collects exactly ``n_episode`` whole episodes (1-step transitions) per call."""

    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(type="episode")

    def __init__(self, cfg: Optional[EasyDict], env: EnvManager, policy, discount_factor: float = 0.99):
        self.cfg = cfg
        self._gamma = discount_factor
        self._policy = policy
        self._env: Optional[EnvManager] = None
        self.envstep = 0
        self.last_stats = CollectStats()
        self.reset_env(env)

    def reset_env(self, env: Optional[EnvManager] = None) -> None:
        if env is not None:
            self._env = env
        self._env.reset()
        self._partial: List[List[Columns]] = [[] for _ in range(self._env.num_envs)]
        self._ready: List[Columns] = []

    def reset_policy(self, policy=None) -> None:
        if policy is not None:
            self._policy = policy

    def collect(self, n_episode: int, train_iter: int = 0, policy_kwargs: Optional[dict] = None) -> List[Columns]:
        if n_episode <= 0:
            raise ValueError(f"{n_episode=} must be > 0")
        policy_kwargs = policy_kwargs or {}
        stats = CollectStats()
        start = time.perf_counter()
        env = self._env
        while len(self._ready) < n_episode:
            obs = env.obs
            action = self._policy.forward(obs, **policy_kwargs)
            step = env.step(action)
            stats.env_steps += int(step.valid.sum())
            for i in np.flatnonzero(step.valid):
                self._partial[i].append(
                    {
                        "obs": obs[i : i + 1],
                        "action": action[i : i + 1].astype(np.int64),
                        "reward": step.reward[i : i + 1],
                        "next_obs": step.obs[i : i + 1],
                        "done": step.terminated[i : i + 1],
                        "discount": np.full(1, self._gamma, dtype=np.float32),
                        "collect_iter": np.full(1, train_iter, dtype=np.int64),
                    }
                )
                if step.terminated[i] or step.truncated[i]:
                    self._ready.append(concat_columns(self._partial[i]))
                    self._partial[i] = []
                    stats.returns.append(float(step.episode_return[i]))
                    stats.lengths.append(int(step.episode_length[i]))
        episodes, self._ready = self._ready[:n_episode], self._ready[n_episode:]
        stats.episodes = len(episodes)
        stats.transitions = sum(columns_len(e) for e in episodes)
        self.envstep += stats.env_steps
        stats.duration = time.perf_counter() - start
        self.last_stats = stats
        return episodes

    def close(self) -> None:
        if self._env is not None:
            self._env.close()


COLLECTOR_REGISTRY.register("sample", SampleSerialCollector)
COLLECTOR_REGISTRY.register("episode", EpisodeSerialCollector)


def create_serial_collector(cfg: EasyDict, env: EnvManager, policy, **kwargs) -> ISerialCollector:
    """Build the collector named by ``cfg.type`` (``sample``, ``episode`` or a registered one)."""
    return COLLECTOR_REGISTRY.build(cfg.get("type", "sample"), cfg, env, policy, **kwargs)
