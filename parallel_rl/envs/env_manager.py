"""A vector env manager over gymnasium.

Picks the fastest vectorization the env offers: the env's own vector
implementation when it has one (CartPole's is ~3.5x faster than
``SyncVectorEnv``), ``SyncVectorEnv`` otherwise, ``AsyncVectorEnv`` when asked
(slow envs). All of gymnasium's vector envs auto-reset on the *next* step
(``AutoresetMode.NEXT_STEP``): the step after an episode ends returns that
env's first observation and no transition. :class:`EnvStep` marks such rows
``valid=False`` so callers never record them.

Over an ``AsyncVectorEnv`` (``vector_mode="async"``) the manager can also step
a *subset* of envs and return as soon as some are done (:meth:`EnvManager.step_ready`,
tianshou's ``wait_num`` / ``timeout``): gymnasium's ``step_async`` / ``step_wait``
always step every env, so this sends each env's step to its worker process
through the vector env's own pipes and waits on them with
``multiprocessing.connection.wait``. A slow env then never holds the fast ones up.
"""

from __future__ import annotations

import logging
import time
from multiprocessing.connection import wait as wait_for_pipes
from typing import Any, Optional

import gymnasium as gym
import numpy as np
from easydict import EasyDict

from ..errors import ConfigError
from .defaults import VECTOR_MODES, EnvSection
from .masked import sub_env_wrappers
from .mujoco_messages import route_mujoco_messages, uses_mujoco
from .registrars import import_env_modules
from .steps import COMPACT_OBS_DTYPES, EnvStep, as_obs, frame_stack_of  # noqa: F401 (EnvStep: re-exported)
from .spaces import action_spec, check_observation_space

logger = logging.getLogger(__name__)


def env_kwargs_of(env_cfg: EasyDict, evaluating: bool = False) -> dict:
    """The kwargs the env section gives ``gymnasium.make_vec``: ``env.env_kwargs``, with ``env.eval_env_kwargs`` over
    them for an evaluator's envs (Atari: whole games, rewards unclipped). The one place they are merged: the
    videos (:mod:`.video`) read them here too."""
    kwargs = dict(env_cfg.get("env_kwargs") or {})
    if evaluating:
        kwargs.update(env_cfg.get("eval_env_kwargs") or {})
    return kwargs


class EnvManager:
    """``num_envs`` copies of one gymnasium env (Box observations; Discrete or Box actions, see :mod:`.spaces`)."""

    @classmethod
    def default_config(cls) -> EasyDict:
        """The ``env`` section's defaults (:class:`~.defaults.EnvSection`)."""
        return EnvSection.defaults()

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        seed: Optional[int] = None,
        vector_mode: str = "auto",
        env_kwargs: Optional[dict] = None,
        step_latency_ms: float = 0.0,
        mask_velocity=False,
    ):
        if num_envs <= 0:
            raise ConfigError(f"{num_envs=} must be > 0")
        if vector_mode not in VECTOR_MODES:
            raise ConfigError(f"env.vector_mode must be one of {VECTOR_MODES}, got {vector_mode!r}")
        try:
            spec = gym.spec(env_id)
        except gym.error.Error as exc:
            raise ConfigError(
                f"env.env_id {env_id!r} is not a registered gymnasium env: {exc} (envs of another "
                'package: name it in env.import_names, e.g. ["minatar"] for MinAtar/Breakout-v1, '
                '["ale_py"] for ALE/Pong-v5)'
            ) from exc
        if uses_mujoco(spec.entry_point):  # before its models compile: their warnings, its log file
            route_mujoco_messages()
        wrappers, vector_mode = sub_env_wrappers(env_id, vector_mode, step_latency_ms, mask_velocity)
        if vector_mode == "auto":
            vector_mode = "vector_entry_point" if spec.vector_entry_point else "sync"
        self.env_id = env_id
        self._seed = seed
        self._adopt(
            gym.make_vec(
                env_id,
                num_envs=num_envs,
                vectorization_mode=vector_mode,
                wrappers=wrappers or None,
                **(env_kwargs or {}),
            )
        )
        self.vector_mode = vector_mode
        self.life_loss = bool((env_kwargs or {}).get("life_loss_info")) and vector_mode == "vector_entry_point"

    @classmethod
    def from_env(cls, env: "gym.Env | gym.vector.VectorEnv", seed: Optional[int] = None) -> "EnvManager":
        """Wrap an env you built: a vector env as it is, a single ``gym.Env`` as a 1-env ``SyncVectorEnv``."""
        if not isinstance(env, gym.vector.VectorEnv):
            if not isinstance(env, gym.Env):
                raise ConfigError(f"EnvManager.from_env needs a gymnasium Env or VectorEnv, got {type(env).__name__}")
            single = env
            env = gym.vector.SyncVectorEnv([lambda: single])
        self = cls.__new__(cls)
        spec = getattr(env, "spec", None)
        self.env_id = spec.id if spec is not None else type(env).__name__
        self._seed = seed
        self._adopt(env)
        self.vector_mode = type(env).__name__
        return self

    def _adopt(self, vector_env: "gym.vector.VectorEnv") -> None:
        self._env = vector_env
        num_envs = vector_env.num_envs
        self.num_envs = num_envs
        try:
            self.obs_shape = check_observation_space(self._env.single_observation_space, self.env_id)
            self.action_spec = action_spec(self._env.single_action_space, self.env_id)
        except ConfigError:
            self._env.close()
            raise
        # number of discrete actions, or the size of a Box action
        self.action_num = self.action_spec.dim
        # Box actions are clipped to the space's bounds here, once (policies may sample outside them)
        self._action_bounds = (self.action_spec.low, self.action_spec.high) if self.action_spec.kind == "box" else None
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._lengths = np.zeros(num_envs, dtype=np.int64)
        self._needs_reset = np.zeros(num_envs, dtype=bool)
        # shared read-only arrays for the common step where no episode ends
        self._all_valid = np.ones(num_envs, dtype=bool)
        self._no_returns = np.full(num_envs, np.nan)
        self._no_lengths = np.zeros(num_envs, dtype=np.int64)
        for shared in (self._all_valid, self._no_returns, self._no_lengths):
            shared.flags.writeable = False
        self._obs: Optional[np.ndarray] = None
        # step_ready: envs whose step was sent and not yet received
        self._pending = np.zeros(num_envs, dtype=bool)
        base = getattr(vector_env, "unwrapped", vector_env)
        self._subset_env = (
            base
            if isinstance(base, gym.vector.AsyncVectorEnv) and base.autoreset_mode == gym.vector.AutoresetMode.NEXT_STEP
            else None
        )
        # ALE's vector env with life_loss_info=True ("episodic life", Mnih et al. 2015): a lost life is
        # ``terminated`` (no bootstrap across it) but the game goes on, no reset; the episode (its return and
        # length, the next step's validity) ends with the game: at lives == 0, or at truncation
        self.life_loss = False
        # frames stacked on the observation's first axis (ALE's vector env: 4); 0 when not a frame stack.
        # Chunks then hold each frame once (parallel_rl.data.frames)
        self.frame_stack = frame_stack_of(vector_env)
        # the dtype of the observations handed out (as_obs: uint8 and bool kept, anything else float32)
        obs_dtype = np.dtype(vector_env.single_observation_space.dtype)
        self.obs_dtype = obs_dtype if obs_dtype in COMPACT_OBS_DTYPES else np.dtype(np.float32)
        # the longest step_ready / reset / close waits for a sub-env's step (seconds)
        self.step_timeout = 60.0
        self.closed = False
        # keep_info=True keeps the last step's gymnasium info dict in ``info`` (off: the hot path skips it)
        self.keep_info = False
        self.info: dict = {}
        # reset_kwargs (gymnasium's reset keywords, seed / options): an env whose episode ends is reset at once
        # with them (tianshou's gym_reset_kwargs, applied to every reset during collect) instead of by
        # gymnasium's auto-reset on its next step, which passes no keywords. None: gymnasium's auto-reset
        self.reset_kwargs: Optional[dict] = None

    @property
    def action_space(self) -> gym.Space:
        """The batched action space (``sample()`` draws one action per env)."""
        return self._env.action_space

    @classmethod
    def from_cfg(
        cls,
        env_cfg: EasyDict,
        num_envs: int,
        seed: Optional[int] = None,
        evaluating: bool = False,
        spaces_only: bool = False,
    ) -> "EnvManager":
        """The envs every role steps, made one way (the spaces of :func:`parallel_rl.envs.fit.env_spaces` too).

        ``evaluating``: an evaluator's envs: ``env.eval_env_kwargs`` go over ``env.env_kwargs`` (Atari: whole
        games, rewards unclipped) and ``env.evaluator_vector_mode`` (when set) over ``env.vector_mode``.
        ``spaces_only``: made to read the spaces (in this process, no latency; the sub-envs are the same)."""
        import_env_modules(env_cfg.import_names)
        kwargs = env_kwargs_of(env_cfg, evaluating)
        vector_mode = env_cfg.vector_mode
        if evaluating:
            vector_mode = env_cfg.get("evaluator_vector_mode") or vector_mode
        latency = float(env_cfg.get("step_latency_ms", 0.0) or 0.0)
        if spaces_only:
            vector_mode, latency = ("sync" if vector_mode == "async" else vector_mode), 0.0
        return cls(
            env_cfg.env_id,
            num_envs,
            seed=seed,
            vector_mode=vector_mode,
            env_kwargs=kwargs,
            step_latency_ms=latency,
            mask_velocity=env_cfg.get("mask_velocity", False),
        )

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.obs_shape))

    @property
    def obs(self) -> np.ndarray:
        """The current observation of every env (after :meth:`reset`)."""
        if self._obs is None:
            raise RuntimeError(f"EnvManager({self.env_id}): call reset() before reading obs")
        return self._obs

    def reset(self, seed: Optional[int] = None, options: Optional[dict] = None) -> np.ndarray:
        """Reset every env; ``options`` goes to gymnasium's ``reset`` (tianshou's ``gym_reset_kwargs``).

        Steps still running from :meth:`step_ready` are waited for (and dropped) first."""
        self._drain()
        seed = self._seed if seed is None else seed
        obs, _ = self._env.reset(seed=seed, options=options)
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self._needs_reset[:] = False
        self._obs = as_obs(obs)
        return self._obs

    def step(self, actions: np.ndarray) -> EnvStep:
        if self._pending.any():
            raise RuntimeError(
                f"EnvManager({self.env_id}): envs {np.flatnonzero(self._pending).tolist()} are still "
                "stepping from step_ready(); keep using step_ready(), or reset() first"
            )
        if self._action_bounds is not None:
            actions = np.clip(actions, *self._action_bounds)
        obs, reward, terminated, truncated, info = self._env.step(actions)
        if self.keep_info:
            self.info = info
        obs = as_obs(obs)
        reward = np.asarray(reward, dtype=np.float32)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        game_on = terminated & ~truncated & (np.asarray(info["lives"]) > 0) if self.life_loss else None
        resetting = self._needs_reset
        if resetting.any():  # rows auto-reset in this step carry no transition
            valid = ~resetting
            reward = np.where(valid, reward, np.float32(0.0))
            terminated = terminated & valid
            truncated = truncated & valid
            self._returns[resetting] = 0.0
            self._lengths[resetting] = 0
            self._lengths += valid
            n_valid = int(valid.sum())
        else:
            n_valid = self.num_envs
            valid = self._all_valid
            self._lengths += 1
        self._returns += reward
        done = terminated | truncated
        if game_on is not None and game_on.any():  # a life lost: terminated for the learner, the game goes on
            done = done & ~game_on
        ended = bool(done.any())
        if ended:
            episode_return = np.where(done, self._returns, np.nan)
            episode_length = np.where(done, self._lengths, 0)
        else:
            episode_return, episode_length = self._no_returns, self._no_lengths
        self._needs_reset = done
        self._obs = obs
        step = EnvStep(obs, reward, terminated, truncated, valid, episode_return, episode_length, ended, n_valid)
        if ended and self.reset_kwargs is not None:
            self._reset_ended(step)
        return step

    # ---- resetting the envs whose episode ended, with reset_kwargs --------------------------------
    @property
    def can_reset_subset(self) -> bool:
        """Whether ``reset_kwargs`` work: the vector env resets single envs (gymnasium's ``SyncVectorEnv``, or
        an ``AsyncVectorEnv`` with shared memory; an env's own vector implementation, e.g. CartPole's, does not)."""
        if self._subset_env is not None:
            return bool(self._subset_env.shared_memory)  # without it gymnasium's worker auto-resets once more
        return isinstance(getattr(self._env, "unwrapped", self._env), gym.vector.SyncVectorEnv)

    def reset_done(self) -> np.ndarray:
        """Reset now, with ``reset_kwargs``, the idle envs whose episode has ended (gymnasium would auto-reset
        them, without keywords, at their next step); returns their ids. Call it before acting on ``obs``."""
        ended = self._needs_reset & ~self._pending
        if self.reset_kwargs is None or not ended.any():
            return np.zeros(0, dtype=np.int64)
        self._reset_envs(ended)
        return np.flatnonzero(ended)

    def _reset_ended(self, step: EnvStep) -> None:
        """Reset the envs whose episode ended in ``step`` with ``reset_kwargs``; mark them in ``step.reset``."""
        step.reset = step.episode_length > 0  # episodes that ended (a lost life does not reset the game)
        self._reset_envs(step.reset)

    def _reset_envs(self, ended: np.ndarray) -> None:
        if not self.can_reset_subset:
            raise ConfigError(
                f"EnvManager({self.env_id}): reset_kwargs need per-env resets, which "
                f"{type(self._env).__name__} cannot do; use vector_mode='sync' or 'async'"
            )
        kwargs = dict(self.reset_kwargs)
        seed, options = kwargs.pop("seed", None), dict(kwargs.pop("options", None) or {})
        if kwargs:
            raise ValueError(f"reset_kwargs {sorted(kwargs)}: gymnasium's reset takes seed and options only")
        ids = np.flatnonzero(ended)
        obs = self._obs.copy()  # step.obs keeps the final observations
        if self._subset_env is not None:  # one pipe per env, as step_ready: other envs may still be stepping
            seeds = seed + np.arange(self.num_envs) if isinstance(seed, (int, np.integer)) else [seed] * self.num_envs
            pipes = self._subset_env.parent_pipes
            for i in ids.tolist():
                pipes[i].send(("reset", {"seed": None if seeds[i] is None else int(seeds[i]), "options": options}))
            for i in ids.tolist():
                _result, success = pipes[i].recv()
                if not success:
                    _index, exctype, value, _trace = self._subset_env.error_queue.get(timeout=self.step_timeout)
                    raise RuntimeError(
                        f"EnvManager({self.env_id}): env {i} raised {exctype.__name__} in reset: {value}"
                    )
                obs[i] = self._subset_env.observations[i]
        else:
            new_obs, _ = self._env.reset(seed=seed, options={**options, "reset_mask": ended})
            obs[ids] = as_obs(new_obs)[ids]
        self._obs = obs
        self._needs_reset = self._needs_reset & ~ended
        self._returns[ids] = 0.0
        self._lengths[ids] = 0

    # ---- stepping a subset of envs (AsyncVectorEnv only) ------------------------------------------
    @property
    def can_step_subset(self) -> bool:
        """Whether :meth:`step_ready` works: the envs run in gymnasium ``AsyncVectorEnv`` worker processes."""
        return self._subset_env is not None

    @property
    def pending(self) -> np.ndarray:
        """Ids of the envs whose step (sent by :meth:`step_ready`) has not been received yet."""
        return np.flatnonzero(self._pending)

    def step_ready(
        self, actions: np.ndarray, env_ids: np.ndarray, wait_num: int = 1, timeout: Optional[float] = None
    ) -> EnvStep:
        """Step the idle envs ``env_ids`` with ``actions``; return once some stepping envs are done.

        tianshou's asynchronous step: waits until at least one env (of all those stepping, including
        earlier calls' envs) has finished, then for up to ``wait_num`` of them or until ``timeout``
        seconds have passed. The result is full-width: ``ready`` marks the envs whose step finished
        (their rows carry the step, ``valid`` where it is a real transition); the others keep
        stepping and are returned by a later call. Only those ready envs may be sent an action next.
        Needs an ``AsyncVectorEnv`` (``vector_mode="async"``); gives up after ``step_timeout`` s
        without any env finishing (``TimeoutError``). The envs' ``info`` is not kept (``keep_info``
        covers :meth:`step`).
        """
        if self._subset_env is None:
            raise ConfigError(
                f"EnvManager({self.env_id}).step_ready needs an AsyncVectorEnv with next-step autoreset "
                f"(env.vector_mode='async'), not {type(self._env).__name__}"
            )
        if self._obs is None:
            raise RuntimeError(f"EnvManager({self.env_id}): call reset() before step_ready()")
        if wait_num < 1:
            raise ValueError(f"{wait_num=} must be >= 1")
        env_ids = np.asarray(env_ids, dtype=np.int64).reshape(-1)
        if len(env_ids) != len(actions):
            raise ValueError(f"step_ready: {len(actions)} actions for {len(env_ids)} envs {env_ids.tolist()}")
        if self._pending[env_ids].any():
            raise RuntimeError(
                f"EnvManager({self.env_id}).step_ready: envs {env_ids[self._pending[env_ids]].tolist()} "
                "are still stepping; send actions only to the envs a step returned as ready"
            )
        if self._action_bounds is not None:
            actions = np.clip(actions, *self._action_bounds)
        pipes = self._subset_env.parent_pipes
        for env_id, action in zip(env_ids.tolist(), actions):
            pipes[env_id].send(("step", action))  # gymnasium's worker protocol, as step_async sends it
        self._pending[env_ids] = True
        ready = self._wait_ready(wait_num, timeout)
        return self._receive(ready)

    def _wait_ready(self, wait_num: int, timeout: Optional[float]) -> np.ndarray:
        """Ids of pending envs whose result is in their pipe: at least one, up to ``wait_num`` or ``timeout``."""
        pipes = self._subset_env.parent_pipes
        waiting = {pipes[i]: i for i in np.flatnonzero(self._pending).tolist()}
        if not waiting:
            raise RuntimeError(f"EnvManager({self.env_id}).step_ready: no env is stepping (pass at least one env id)")
        start = time.monotonic()
        ready = [waiting.pop(p) for p in wait_for_pipes(list(waiting), self.step_timeout)]
        if not ready:
            raise TimeoutError(
                f"EnvManager({self.env_id}): no env finished its step within {self.step_timeout=} s; "
                "raise step_timeout for envs this slow"
            )
        while waiting and len(ready) < wait_num:
            left = None if timeout is None else timeout - (time.monotonic() - start)
            if left is not None and left <= 0:
                break
            done = wait_for_pipes(list(waiting), self.step_timeout if left is None else left)
            if not done and left is None:
                raise TimeoutError(
                    f"EnvManager({self.env_id}): {wait_num=} envs did not finish within "
                    f"{self.step_timeout=} s; lower wait_num or pass a timeout"
                )
            ready.extend(waiting.pop(p) for p in done)
        return np.sort(np.asarray(ready, dtype=np.int64))

    def _receive(self, ready: np.ndarray) -> EnvStep:
        env = self._subset_env
        n = self.num_envs
        obs = self._obs.copy()
        reward = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        for env_id in ready.tolist():
            result, success = env.parent_pipes[env_id].recv()
            self._pending[env_id] = False
            if not success:  # the worker reported the error and exited: drop its pipe, as gymnasium does
                index, exctype, value, trace = env.error_queue.get(timeout=self.step_timeout)
                logger.error("EnvManager(%s): env %d failed in its worker process:\n%s", self.env_id, index, trace)
                env.parent_pipes[index].close()
                env.parent_pipes[index] = None
                raise RuntimeError(f"EnvManager({self.env_id}): env {index} raised {exctype.__name__}: {value}")
            env_obs, env_reward, env_terminated, env_truncated, _info = result
            obs[env_id] = env.observations[env_id] if env.shared_memory else env_obs
            reward[env_id], terminated[env_id], truncated[env_id] = env_reward, env_terminated, env_truncated
        self.info = {}  # keep_info covers step() only: the evaluator steps every env
        ready_mask = np.zeros(n, dtype=bool)
        ready_mask[ready] = True
        resetting = self._needs_reset & ready_mask  # these envs auto-reset: no transition
        valid = ready_mask & ~resetting
        self._returns[resetting] = 0.0
        self._lengths[resetting] = 0
        self._lengths += valid
        self._returns += reward
        done = terminated | truncated
        ended = bool(done.any())
        episode_return = np.where(done, self._returns, np.nan)
        episode_length = np.where(done, self._lengths, 0)
        self._needs_reset = np.where(ready_mask, done, self._needs_reset)
        self._obs = obs
        step = EnvStep(
            obs,
            reward,
            terminated,
            truncated,
            valid,
            episode_return,
            episode_length,
            ended,
            int(valid.sum()),
            ready_mask,
        )
        if ended and self.reset_kwargs is not None:
            self._reset_ended(step)
        return step

    def _drain(self) -> None:
        """Receive (and drop) the results of steps still running from :meth:`step_ready`."""
        if not self._pending.any():
            return
        pipes = self._subset_env.parent_pipes
        waiting = {pipes[i]: i for i in np.flatnonzero(self._pending).tolist()}
        deadline = time.monotonic() + self.step_timeout
        while waiting:
            done = wait_for_pipes(list(waiting), max(0.0, deadline - time.monotonic()))
            if not done:
                raise TimeoutError(
                    f"EnvManager({self.env_id}): envs {sorted(waiting.values())} did not finish their "
                    f"step within {self.step_timeout=} s"
                )
            for pipe in done:
                pipe.recv()
                self._pending[waiting.pop(pipe)] = False

    def env_info(self, env_id: int) -> dict:
        """Env ``env_id``'s entries of the last step's info (needs ``keep_info``); gymnasium's ``_key`` masks applied."""
        info = self.info
        return {
            k: (v[env_id] if isinstance(v, np.ndarray) else self.env_info_of(v, env_id))
            for k, v in info.items()
            if not k.startswith("_")
            and isinstance(v, (np.ndarray, dict))
            and (f"_{k}" not in info or info[f"_{k}"][env_id])
        }

    @staticmethod
    def env_info_of(nested: dict, env_id: int) -> dict:
        """Env ``env_id``'s entries of a nested info dict (e.g. ``RecordEpisodeStatistics``' ``episode``)."""
        return {k: v[env_id] for k, v in nested.items() if isinstance(v, np.ndarray) and not k.startswith("_")}

    def close(self) -> None:
        """Close the envs; sub-envs still stepping after ``step_timeout`` s have their processes terminated."""
        if not self.closed:
            terminate = False
            if self._pending.any():
                try:
                    self._drain()
                except TimeoutError:
                    logger.warning(
                        "EnvManager(%s): envs %s still stepping at close; terminating their processes",
                        self.env_id,
                        self.pending.tolist(),
                    )
                    terminate = True
            if terminate:
                self._env.close(terminate=True)
            else:
                self._env.close()
            self.closed = True

    def __enter__(self) -> "EnvManager":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
