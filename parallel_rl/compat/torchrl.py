"""torchrl's collector surface over our one collection loop: :class:`DataCollectorBase` and
:class:`SyncDataCollector` (iterate over batches of ``frames_per_batch`` frames, ``start()`` to fill a replay
buffer in the background, ``pause()``, ``update_policy_weights_()``, ``async_shutdown()``).

:class:`SyncDataCollector` drives :class:`~parallel_rl.collector.serial.SampleSerialCollector` (the same env
manager, policy modes, n-step builder and buffers as the serial pipeline); it steps no env itself.
Differences from torchrl are listed in docs/api.md.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, Optional, Union

import gymnasium as gym
import numpy as np
import torch

from ..collector.serial import SampleSerialCollector
from ..data.buffer import IBuffer
from ..envs.env_manager import EnvManager
from .collectors import as_env_manager, as_policy_mode

logger = logging.getLogger(__name__)


class PolicyWeightUpdater:
    """Loads weights into the collector's acting policy (torchrl's local weight updater).

    ``init(*args, **kwargs)`` is what ``init_updater`` forwards to (kept in
    ``init_args`` / ``init_kwargs``: this updater needs nothing); ``weights``:
    a state dict, or an object with ``state_dict()`` (a policy, a mode, a module).
    """

    def __init__(self, policy_mode: Any):
        self.policy_mode = policy_mode
        self.init_args: tuple = ()
        self.init_kwargs: Dict[str, Any] = {}

    def init(self, *args: Any, **kwargs: Any) -> None:
        self.init_args = args
        self.init_kwargs.update(kwargs)

    def __call__(self, weights: Any) -> None:
        if not isinstance(weights, dict):
            source = getattr(weights, "collect_mode", weights)
            if not callable(getattr(source, "state_dict", None)):
                raise TypeError(f"update_policy_weights_ needs a state dict or a policy, got {type(weights).__name__}")
            weights = source.state_dict()
        self.policy_mode.load_state_dict(weights)


class DataCollectorBase(abc.ABC):
    """torchrl's collector interface: iterate over batches, or ``start()`` filling a replay buffer.

    A batch is a dict of columns (numpy arrays), not a TensorDict.
    """

    @abc.abstractmethod
    def __iter__(self) -> Iterator[Dict[str, np.ndarray]]: ...

    weight_updater: Optional[PolicyWeightUpdater] = None
    # torchrl's attributes: batches hold exactly what was asked (requested_frames_per_batch is frames_per_batch,
    # set by the constructor); the policy is called as given, never compiled or wrapped in CUDA graphs
    trust_policy, compiled_policy, cudagraphed_policy, verbose = True, False, False, False

    def iterator(self) -> Iterator[Dict[str, np.ndarray]]:
        """torchrl's name for ``iter(collector)``."""
        return iter(self)

    def next(self) -> Optional[Dict[str, np.ndarray]]:
        """One batch (the iterator's next); ``None`` once ``total_frames`` have been delivered."""
        if self._iterator is None:
            self._iterator = iter(self)
        try:
            return next(self._iterator)
        except StopIteration:
            self._iterator = None
            return None

    def __len__(self) -> int:
        """The number of batches up to ``total_frames``."""
        if self.total_frames > 0:
            return -(self.total_frames // -self.frames_per_batch)
        raise RuntimeError("a collector without total_frames (total_frames=-1) has no length")

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def async_shutdown(self, timeout: Optional[float] = None, close_env: bool = True) -> None: ...

    @abc.abstractmethod
    def shutdown(self, timeout: Optional[float] = None, close_env: bool = True) -> None: ...

    @abc.abstractmethod
    def pause(self) -> contextlib.AbstractContextManager: ...

    @abc.abstractmethod
    def update_policy_weights_(
        self, policy_or_weights: Any = None, *, worker_ids: Any = None, **kwargs: Any
    ) -> None: ...

    def init_updater(self, *args: Any, **kwargs: Any) -> None:
        """Pass arguments to the weight updater's ``init``; without a weight updater, nothing to do."""
        if self.weight_updater is not None:
            self.weight_updater.init(*args, **kwargs)

    @abc.abstractmethod
    def set_seed(self, seed: int, static_seed: bool = False) -> int: ...

    @abc.abstractmethod
    def state_dict(self) -> Dict[str, Any]: ...

    @abc.abstractmethod
    def load_state_dict(self, state_dict: Dict[str, Any]) -> None: ...


class SyncDataCollector(DataCollectorBase):
    """torchrl-style collector over :class:`SampleSerialCollector`.

    ``for batch in collector`` yields batches of ``frames_per_batch``
    transitions until ``total_frames`` (-1: forever). ``start()`` returns at
    once and pushes batches into ``replay_buffer`` from a background thread
    until ``async_shutdown``. ``policy``: one of our policies (its
    ``collect_mode``) or anything with ``forward(obs)``, ``state_dict()`` and
    ``load_state_dict()``; ``create_env_fn``: an :class:`EnvManager`, a
    gymnasium env, or a callable returning one.
    """

    def __init__(
        self,
        create_env_fn: Union[EnvManager, gym.Env, "gym.vector.VectorEnv", Callable[[], Any]],
        policy: Any,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        replay_buffer: Optional[IBuffer] = None,
        policy_kwargs: Optional[dict] = None,
        nstep: int = 1,
        discount_factor: float = 0.99,
    ):
        if frames_per_batch <= 0:
            raise ValueError(f"{frames_per_batch=} must be > 0")
        if total_frames == 0 or total_frames < -1:
            raise ValueError(f"{total_frames=} must be > 0, or -1 for no end")
        env = (
            create_env_fn if isinstance(create_env_fn, (EnvManager, gym.Env, gym.vector.VectorEnv)) else create_env_fn()
        )
        self.env = as_env_manager(env)
        self.policy = policy
        self.frames_per_batch = self.requested_frames_per_batch = frames_per_batch
        self.total_frames = total_frames
        self.replay_buffer = replay_buffer
        self.policy_kwargs = dict(policy_kwargs or {})
        self._mode = as_policy_mode(policy)
        self._core = SampleSerialCollector(None, self.env, self._mode, nstep=nstep, discount_factor=discount_factor)
        self.weight_updater = PolicyWeightUpdater(self._mode)
        self._lock = threading.Lock()  # one of: a piece of collection, a weight update
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        self._iterator: Optional[Iterator] = None
        self.frames = 0  # transitions delivered (iteration) or pushed (background)
        self.batches = 0

    # ---- iteration -------------------------------------------------------------------
    def _collect(self, n: int, push: bool = False) -> Dict[str, np.ndarray]:
        with self._lock, torch.no_grad():  # a piece is collected and pushed whole: pause() waits for it
            # keep_extra: a batch's surplus starts the next batch (no env step is wasted)
            data = self._core.collect(
                n_sample=n, train_iter=self.batches, policy_kwargs=self.policy_kwargs, keep_extra=True
            )
            self.frames += n
            if push:
                self.replay_buffer.push(data, cur_collector_envstep=self._core.envstep)
        return data

    def __iter__(self) -> Iterator[Dict[str, np.ndarray]]:
        if self._thread is not None:
            raise RuntimeError(
                "SyncDataCollector: iterating while start() collects in the background; call async_shutdown() first"
            )
        while self.total_frames == -1 or self.frames < self.total_frames:
            batch = self._collect(self.frames_per_batch)
            self.batches += 1
            yield batch

    # ---- background collection -------------------------------------------------------
    def start(self) -> None:
        """Collect into ``replay_buffer`` from a background thread; returns at once."""
        if self.replay_buffer is None:
            raise RuntimeError("SyncDataCollector.start() needs replay_buffer=... at construction")
        if self._thread is not None:
            raise RuntimeError("SyncDataCollector.start(): already started")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="sync-data-collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # a vector step at a time, so that a shutdown waits for one step, not one batch
        piece = min(self.frames_per_batch, self.env.num_envs)
        try:
            while not self._stop.is_set() and (self.total_frames == -1 or self.frames < self.total_frames):
                self._collect(piece, push=True)
                if self.frames // self.frames_per_batch > self.batches:
                    self.batches += 1
        except BaseException as exc:  # surfaced by async_shutdown
            logger.exception("SyncDataCollector(%s): background collection failed", self.env.env_id)
            self._error = exc

    def async_shutdown(self, timeout: Optional[float] = None, close_env: bool = True) -> None:
        """Stop background collection; returns within ``timeout`` (raises ``TimeoutError`` past it)."""
        thread = self._thread
        self._stop.set()
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError(f"SyncDataCollector: background collection still running after {timeout=} s")
            self._thread = None
        if close_env:
            self.env.close()
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"SyncDataCollector: background collection failed: {error!r}") from error

    def shutdown(self, timeout: Optional[float] = None, close_env: bool = True) -> None:
        """Stop background collection (if any, within ``timeout``) and close the env (unless ``close_env=False``)."""
        self.async_shutdown(timeout, close_env)

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        """Within the block, background collection waits (after the vector step it is in)."""
        with self._lock:
            yield

    # ---- weights, seeds, state ------------------------------------------------------
    def update_policy_weights_(self, policy_or_weights: Any = None, *, worker_ids: Any = None, **kwargs: Any) -> None:
        """Load new weights; every batch started after this returns acts with them.

        ``None``: the policy the collector was built with is the one it acts
        with, so it is already current. ``worker_ids`` must be None (one worker).
        ``policy_weights=``: torchrl's deprecated name of ``policy_or_weights``.
        """
        if "policy_weights" in kwargs:
            warnings.warn(
                "update_policy_weights_(policy_weights=...) is deprecated; pass policy_or_weights",
                DeprecationWarning,
                stacklevel=2,
            )
            policy_or_weights = kwargs.pop("policy_weights")
        if kwargs:
            raise TypeError(f"update_policy_weights_ got unexpected keyword arguments {sorted(kwargs)}")
        if worker_ids is not None:
            raise ValueError(f"{worker_ids=}: SyncDataCollector has one worker; pass worker_ids=None")
        with self._lock:
            if policy_or_weights is not None:
                self.weight_updater(policy_or_weights)
            self._core.discard_surplus()  # transitions made by the old weights

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Reseed the envs (env i gets ``seed + i``) and the action space; returns the next unused seed."""
        with self._lock:
            self._core.reset_env(gym_reset_kwargs={"seed": seed})
            self.env.action_space.seed(seed)
        return seed if static_seed else seed + self.env.num_envs

    def state_dict(self) -> Dict[str, Any]:
        return {"policy_state_dict": self._mode.state_dict(), "frames": self.frames, "batches": self.batches}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        with self._lock:
            self.weight_updater(state_dict["policy_state_dict"])
            self.frames = int(state_dict.get("frames", 0))
            self.batches = int(state_dict.get("batches", 0))
