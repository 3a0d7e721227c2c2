"""What every replay buffer offers (:class:`IBuffer`), and the uniform ring of columns the others build on
(:class:`NaiveReplayBuffer`). See :mod:`.buffer` for the bookkeeping columns ``sample`` adds."""

from __future__ import annotations

import abc
import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, Mapping, Optional, Type

import numpy as np
from easydict import EasyDict

from ..config.section import Section, setting
from .columns import Columns

# where the replay buffer's section sits in the config tree
BUFFER_PATH = "policy.other.replay_buffer"


@dataclasses.dataclass(frozen=True)
class NaiveBufferSection(Section):
    """Uniform replay over a ring of rows (the coordinator keeps references into chunk files, not the rows)."""

    path = BUFFER_PATH
    title = "Replay buffer (type='naive')"

    type: str = setting(
        "naive",
        doc="""the buffer (parallel_rl/data/: naive, advanced, episode, segment, rollout, sequence, or one
        registered in BUFFER_REGISTRY); left out, the policy's data flow picks it (advanced for off-policy,
        segment for synchronous and rollout for asynchronous on-policy data)""",
    )
    replay_buffer_size: int = setting(20000, lo=1, doc="rows the buffer holds; a full buffer drops its oldest")
    seed: int = setting(0, lo=0, doc="the seed of the buffer's sampling")


@dataclass
class BufferStats:
    size: int
    capacity: int
    pushed: int
    sampled: int
    evicted: int
    mean_staleness: float  # mean (learner iter - collect iter) of sampled rows
    dropped_stale: int = 0  # on-policy buffers: rows dropped unused, too old for the learner


class IBuffer(abc.ABC):
    """What every replay buffer offers."""

    # the buffer type's section of the config (None: a registered buffer that brings only default_config())
    section: ClassVar[Optional[Type[Section]]] = None

    @classmethod
    def default_config(cls) -> EasyDict:
        """DI-engine's seed name for the defaults of this buffer type's section (``policy.other.replay_buffer``)."""
        if cls.section is None:
            raise NotImplementedError(f"{cls.__name__} needs a section or its own default_config()")
        return cls.section.defaults()

    @abc.abstractmethod
    def push(self, data: Mapping[str, np.ndarray], cur_collector_envstep: int = -1) -> np.ndarray: ...

    @abc.abstractmethod
    def sample(self, size: int, cur_learner_iter: int = 0) -> Optional[Columns]: ...

    def _setup(
        self,
        cfg: Optional[Mapping],
        on_evict: Optional[Callable],
        tb_logger: Any = None,
        exp_name: str = "default_experiment",
        instance_name: str = "buffer",
    ) -> None:
        """What every buffer's constructor does first: config over defaults, capacity, lock, rng.

        ``tb_logger``, ``exp_name``, ``instance_name``: DI-engine's constructor arguments, kept as attributes
        (the buffer writes nothing to ``tb_logger``: its numbers are in :meth:`stats`)."""
        self.tb_logger, self.exp_name, self.instance_name = tb_logger, exp_name, instance_name
        self.cfg = EasyDict({**type(self).default_config(), **(cfg or {})})
        if type(self).section is not None:  # a buffer built without compile_config is checked the same
            type(self).section.check(self.cfg)
        self.capacity = int(self.cfg.replay_buffer_size)
        self.on_evict = on_evict
        self._lock = threading.RLock()
        self._rng = np.random.default_rng(self.cfg.seed)

    def update(self, info: Mapping[str, np.ndarray]) -> None:
        """Priority feedback; buffers without priorities ignore it."""

    def _draw(self, pool_size: int, size: int, replace: bool) -> np.ndarray:
        """``size`` positions in ``[0, pool_size)``; distinct unless ``replace`` (redraw the repeats: cheap
        while ``size`` is small next to ``pool_size``, as for training batches)."""
        picks = self._rng.integers(0, pool_size, size)
        if replace:
            return picks
        distinct = np.unique(picks)
        if len(distinct) == size:
            return picks
        while len(distinct) < size:
            distinct = np.unique(np.concatenate([distinct, self._rng.integers(0, pool_size, size - len(distinct))]))
        return self._rng.permutation(distinct)

    # ---- DI-engine's names -----------------------------------------------------------
    @property
    def replay_buffer_size(self) -> int:
        return self.capacity

    @property
    def push_count(self) -> int:
        """Rows (episodes, for the episode buffer) pushed since creation."""
        return self.pushed

    def start(self) -> "IBuffer":
        """Nothing to start (no background threads); there for DI-engine's call sequence."""
        return self

    def close(self) -> None:
        """Empty the buffer (DI-engine's ``close``); it stays usable."""
        self.clear()

    @abc.abstractmethod
    def count(self) -> int: ...

    @abc.abstractmethod
    def clear(self) -> None: ...

    @abc.abstractmethod
    def stats(self) -> BufferStats: ...

    @abc.abstractmethod
    def state_dict(self) -> Dict[str, np.ndarray]: ...

    @abc.abstractmethod
    def load_state_dict(self, _state_dict: Mapping[str, np.ndarray]) -> None: ...

    def __len__(self) -> int:
        return self.count()

    def save_data(self, file_name: str) -> None:
        """Write the buffer to ``file_name`` (``.npz``; loads without pickle)."""
        from ..storage import atomic_save_npz

        atomic_save_npz(file_name, self.state_dict())

    def load_data(self, file_name: str) -> None:
        with np.load(file_name, allow_pickle=False) as npz:
            self.load_state_dict({k: npz[k] for k in npz.files})


class NaiveReplayBuffer(IBuffer):
    """Uniform replay over a ring of columns."""

    section = NaiveBufferSection

    def __init__(
        self,
        cfg: Optional[Mapping] = None,
        tb_logger=None,
        exp_name: str = "default_experiment",
        instance_name: str = "buffer",
        on_evict: Optional[Callable[[Columns], None]] = None,
    ):
        self._setup(cfg, on_evict, tb_logger, exp_name, instance_name)
        self._columns: Columns = {}
        self._uid = np.full(self.capacity, -1, dtype=np.int64)
        self._valid = np.zeros(self.capacity, dtype=bool)
        self._push_time = np.zeros(self.capacity, dtype=np.float64)
        self._collect_iter = np.zeros(self.capacity, dtype=np.int64)
        self._next = 0
        self._count = 0
        self.pushed = 0
        self.sampled = 0
        self.evicted = 0
        self._staleness_sum = 0.0
        self._frames = None  # a FrameRing once store_frames_once() was called

    def store_frames_once(self, extra: float = 0.5) -> None:
        """Keep frame stacks (``obs`` / ``next_obs`` of shape (n, k, H, W): ALE's) as single frames, rebuilt
        on sample (:class:`parallel_rl.data.frames.FrameRing` of ``capacity * (1 + extra)`` frames plus a
        margin of up to 8,192): ~1 frame a transition instead of 2k. Call it before the first push."""
        from .frames import FrameRing

        with self._lock:
            if self._columns:
                raise RuntimeError("store_frames_once() must come before the first push")
            size = int(self.capacity * (1 + extra)) + min(8192, self.capacity)
            self._frames = FrameRing(size, recent=min(4096, size // 4))

    # ---- storage ---------------------------------------------------------------
    def _ensure_columns(self, data: Mapping[str, np.ndarray]) -> None:
        if not self._columns:
            for name, col in data.items():
                col = np.asarray(col)
                self._columns[name] = np.zeros((self.capacity,) + col.shape[1:], dtype=col.dtype)
        elif set(data) != set(self._columns):
            raise ValueError(f"push: columns {sorted(data)} differ from the buffer's columns {sorted(self._columns)}")

    def _evict(self, slots: np.ndarray) -> None:
        """Drop valid rows at ``slots`` (overwritten or removed)."""
        slots = slots[self._valid[slots]]
        if len(slots) == 0:
            return
        self._valid[slots] = False
        self._count -= len(slots)
        self.evicted += len(slots)
        self._on_slots_removed(slots)
        if self.on_evict is not None:
            self.on_evict({name: col[slots] for name, col in self._columns.items()})

    def _on_slots_removed(self, slots: np.ndarray) -> None:
        """Hook for subclasses (priorities)."""

    def push(self, data: Mapping[str, np.ndarray], cur_collector_envstep: int = -1) -> np.ndarray:
        """Append a batch of rows; returns the slots they went to.

        A batch larger than the buffer keeps its newest ``capacity`` rows; the older ones count as pushed
        and evicted at once, and go to ``on_evict`` like any evicted row (the coordinator deletes their
        chunk files)."""
        lengths = {len(col) for col in data.values()}
        if len(lengths) != 1:
            raise ValueError(f"push: columns have different lengths {sorted(lengths)}")
        n = lengths.pop()
        with self._lock:
            if self._frames is not None:
                data = self._frames.pack(data)
                if (data["frame_floor"] < self._frames.floor).any():
                    raise ValueError(
                        f"push: {n} rows bring more new frames than the replay's frame ring holds "
                        f"({self._frames.size}); push fewer rows at a time"
                    )
                if self._columns:  # rows whose frames the ring has written over cannot be rebuilt: gone
                    self._evict(np.flatnonzero(self._valid & (self._columns["frame_floor"] < self._frames.floor)))
            self._ensure_columns(data)
            dropped: Optional[Columns] = None
            if n > self.capacity:  # only the newest rows fit
                data = {k: np.asarray(v) for k, v in data.items()}
                dropped = {k: v[: n - self.capacity] for k, v in data.items()}
                data = {k: v[n - self.capacity :] for k, v in data.items()}
                self.pushed += n - self.capacity
                self.evicted += n - self.capacity
                n = self.capacity
            slots = (self._next + np.arange(n)) % self.capacity
            self._evict(slots)
            if dropped is not None and self.on_evict is not None:
                self.on_evict(dropped)
            for name, col in data.items():
                self._columns[name][slots] = col
            self._uid[slots] = self.pushed + np.arange(n)
            self._valid[slots] = True
            self._push_time[slots] = time.time()
            if "collect_iter" in data:
                self._collect_iter[slots] = data["collect_iter"]
            self._next = int((self._next + n) % self.capacity)
            self._count += n
            self.pushed += n
            self._on_slots_pushed(slots)
            return slots

    def _on_slots_pushed(self, slots: np.ndarray) -> None:
        """Hook for subclasses (priorities)."""

    def _gather(self, slots: np.ndarray, cur_learner_iter: int) -> Columns:
        out = {name: col[slots] for name, col in self._columns.items()}
        if self._frames is not None:
            out = self._frames.rebuild(out)
        out["index"] = out["replay_buffer_idx"] = slots  # DI-engine's key, the same array
        out["uid"] = out["replay_unique_id"] = self._uid[slots]
        self.sampled += len(slots)
        self._staleness_sum += float(np.sum(cur_learner_iter - self._collect_iter[slots]))
        return out

    def sample(
        self, size: int, cur_learner_iter: int = 0, sample_range: Optional[slice] = None, replace: bool = False
    ) -> Optional[Columns]:
        """``size`` rows drawn uniformly; None while fewer are stored.

        Without replacement by default (DI-engine's default); ``replace=True`` allows repeats.
        ``sample_range``: a slice over the stored rows oldest first, e.g. ``slice(-1000, None)``
        draws from the newest 1000 only.
        """
        with self._lock:
            if self._count < size or size <= 0:
                return None
            if sample_range is None and (self._count == self.capacity or self.pushed == self._count):
                # every slot holds a row, or the rows fill slots [0, count) (nothing wrapped or left yet): no
                # scan of the valid mask (1M slots of a MuJoCo replay: ~1 ms per batch)
                return self._gather(self._draw(self._count, size, replace), cur_learner_iter)
            pool = np.flatnonzero(self._valid)
            if sample_range is not None:
                pool = pool[np.argsort(self._uid[pool], kind="stable")][sample_range]
                if len(pool) == 0 or (not replace and len(pool) < size):
                    return None
            return self._gather(pool[self._draw(len(pool), size, replace)], cur_learner_iter)

    def count(self) -> int:
        return self._count

    def discard(self, column: str, values) -> int:
        """Evict every stored row whose ``column`` holds one of ``values`` (e.g. the rows of a chunk found
        damaged); ``on_evict`` hears of them as of any evicted row. Returns how many rows left."""
        with self._lock:
            if column not in self._columns:
                return 0
            slots = np.flatnonzero(self._valid & np.isin(self._columns[column], np.asarray(values)))
            self._evict(slots)
            return len(slots)

    def clear(self) -> None:
        with self._lock:
            self._evict(np.flatnonzero(self._valid))
            self._next = 0

    def stats(self) -> BufferStats:
        with self._lock:
            return BufferStats(
                size=self._count,
                capacity=self.capacity,
                pushed=self.pushed,
                sampled=self.sampled,
                evicted=self.evicted,
                mean_staleness=self._staleness_sum / self.sampled if self.sampled else 0.0,
            )

    # ---- state -------------------------------------------------------------------
    def state_dict(self) -> Dict[str, np.ndarray]:
        with self._lock:
            state = {f"col/{name}": col.copy() for name, col in self._columns.items()}
            state.update(
                {
                    "meta/uid": self._uid.copy(),
                    "meta/valid": self._valid.copy(),
                    "meta/push_time": self._push_time.copy(),
                    "meta/collect_iter": self._collect_iter.copy(),
                    "counters": np.array(
                        [self._next, self._count, self.pushed, self.sampled, self.evicted], dtype=np.int64
                    ),
                    "staleness_sum": np.array(self._staleness_sum),
                }
            )
            if self._frames is not None:
                state.update(self._frames.state_dict())
            return state

    def load_state_dict(self, _state_dict: Mapping[str, np.ndarray]) -> None:
        with self._lock:
            if len(_state_dict["meta/uid"]) != self.capacity:
                raise ValueError(f"state has capacity {len(_state_dict['meta/uid'])}, buffer has {self.capacity}")
            self._columns = {k[4:]: np.array(v) for k, v in _state_dict.items() if k.startswith("col/")}
            self._uid = np.array(_state_dict["meta/uid"])
            self._valid = np.array(_state_dict["meta/valid"])
            self._push_time = np.array(_state_dict["meta/push_time"])
            self._collect_iter = np.array(_state_dict["meta/collect_iter"])
            self._next, self._count, self.pushed, self.sampled, self.evicted = (int(x) for x in _state_dict["counters"])
            self._staleness_sum = float(_state_dict["staleness_sum"])
            if self._frames is not None and "frames/data" in _state_dict:
                self._frames.load_state_dict(_state_dict)
