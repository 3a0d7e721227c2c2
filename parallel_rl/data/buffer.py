"""Replay buffers that store columns (one numpy array per field), not rows.

A per-transition dict costs ~4 us to build here, more than an env step, so
everything moves in column batches: ``push({"obs": (n, 4), "action": (n,), ...})``
and ``sample(size)`` returns the same shape of dict plus bookkeeping columns:

- ``index``: buffer slot of each row, ``uid``: the slot's push id (a priority
  update for a slot that was overwritten since is ignored);
- ``weight`` (prioritized only): importance-sampling weights.

The coordinator uses the same classes with columns ``chunk_id`` and ``row``
(references into chunk files); ``on_evict`` tells it which rows left.
"""
from __future__ import annotations

import abc
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional

import numpy as np
from easydict import EasyDict

from ..errors import ConfigError
from ..registry import Registry, import_modules

Columns = Dict[str, np.ndarray]

BUFFER_REGISTRY = Registry("buffer")


@dataclass
class BufferStats:
    size: int
    capacity: int
    pushed: int
    sampled: int
    evicted: int
    mean_staleness: float  # mean (learner iter - collect iter) of sampled rows


class IBuffer(abc.ABC):
    """What every replay buffer offers."""

    @classmethod
    @abc.abstractmethod
    def default_config(cls) -> EasyDict: ...

    @abc.abstractmethod
    def push(self, data: Mapping[str, np.ndarray], cur_collector_envstep: int = -1) -> np.ndarray: ...

    @abc.abstractmethod
    def sample(self, size: int, cur_learner_iter: int = 0) -> Optional[Columns]: ...

    def _setup(self, cfg: Optional[Mapping], on_evict: Optional[Callable]) -> None:
        """What every buffer's constructor does first: config over defaults, capacity, lock, rng."""
        self.cfg = EasyDict({**type(self).default_config(), **(cfg or {})})
        self.capacity = int(self.cfg.replay_buffer_size)
        if self.capacity <= 0:
            raise ConfigError(f"replay_buffer_size must be > 0, got {self.capacity}")
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
    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None: ...

    def __len__(self) -> int:
        return self.count()

    def save_data(self, path: str) -> None:
        """Write the buffer to ``path`` (``.npz``; loads without pickle)."""
        from ..storage import atomic_save_npz

        atomic_save_npz(path, self.state_dict())

    def load_data(self, path: str) -> None:
        with np.load(path, allow_pickle=False) as npz:
            self.load_state_dict({k: npz[k] for k in npz.files})


class _SumTree:
    """Binary sum tree over ``capacity`` leaves; batched (vectorized) updates and searches."""

    SPAN = 4096  # leaves an update may span for its inner nodes to be recomputed by slices

    def __init__(self, capacity: int):
        self.size = 1 << max(0, int(capacity - 1).bit_length())
        self.tree = np.zeros(2 * self.size, dtype=np.float64)

    @property
    def leaves(self) -> np.ndarray:
        return self.tree[self.size:]

    def total(self) -> float:
        return float(self.tree[1])

    def update(self, index: np.ndarray, value: np.ndarray) -> None:
        if len(index) == 0:
            return
        pos = np.asarray(index, dtype=np.int64) + self.size
        self.tree[pos] = value
        lo, hi = int(pos.min()), int(pos.max())
        if hi - lo < self.SPAN:
            # leaves close together (a push or an eviction: a run of slots): recompute every inner node over
            # [lo, hi], level by level, with slices. Nodes over leaves that did not change get the sum they had.
            # ~6x cheaper than the index arrays below for a run of 8 (a metadata call's chunks)
            tree = self.tree
            while lo > 1:
                lo, hi = lo >> 1, hi >> 1
                np.add(tree[2 * lo:2 * hi + 2:2], tree[2 * lo + 1:2 * hi + 2:2], out=tree[lo:hi + 1])
            return
        # all leaves sit at one depth; duplicate parents just write the same sum twice
        pos = pos // 2
        while pos[0] >= 1:
            self.tree[pos] = self.tree[2 * pos] + self.tree[2 * pos + 1]
            pos = pos // 2

    def rebuild(self) -> None:
        """Recompute every inner node from the leaves (after a bulk leaf load)."""
        size = self.size
        while size > 1:
            half = size // 2
            self.tree[half:size] = self.tree[size:2 * size:2] + self.tree[size + 1:2 * size:2]
            size = half

    def find(self, prefix: np.ndarray) -> np.ndarray:
        """Leaf index whose cumulative range contains each prefix sum."""
        pos = np.ones(len(prefix), dtype=np.int64)
        prefix = prefix.copy()
        while pos[0] < self.size:
            left = 2 * pos
            left_sum = self.tree[left]
            go_right = prefix >= left_sum
            prefix = np.where(go_right, prefix - left_sum, prefix)
            pos = np.where(go_right, left + 1, left)
        return pos - self.size


class NaiveReplayBuffer(IBuffer):
    """Uniform replay over a ring of columns."""

    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(type="naive", replay_buffer_size=20000, seed=0)

    def __init__(self, cfg: Optional[Mapping] = None, on_evict: Optional[Callable[[Columns], None]] = None):
        self._setup(cfg, on_evict)
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

    # ---- storage ---------------------------------------------------------------
    def _ensure_columns(self, data: Mapping[str, np.ndarray]) -> None:
        if not self._columns:
            for name, col in data.items():
                col = np.asarray(col)
                self._columns[name] = np.zeros((self.capacity,) + col.shape[1:], dtype=col.dtype)
        elif set(data) != set(self._columns):
            raise ValueError(
                f"push: columns {sorted(data)} differ from the buffer's columns {sorted(self._columns)}"
            )

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
            self._ensure_columns(data)
            dropped: Optional[Columns] = None
            if n > self.capacity:  # only the newest rows fit
                data = {k: np.asarray(v) for k, v in data.items()}
                dropped = {k: v[:n - self.capacity] for k, v in data.items()}
                data = {k: v[n - self.capacity:] for k, v in data.items()}
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
        out["index"] = out["replay_buffer_idx"] = slots  # DI-engine's key, the same array
        out["uid"] = out["replay_unique_id"] = self._uid[slots]
        self.sampled += len(slots)
        self._staleness_sum += float(np.sum(cur_learner_iter - self._collect_iter[slots]))
        return out

    def sample(self, size: int, cur_learner_iter: int = 0, sample_range: Optional[slice] = None,
               replace: bool = False) -> Optional[Columns]:
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
            return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        with self._lock:
            if len(state["meta/uid"]) != self.capacity:
                raise ValueError(
                    f"state has capacity {len(state['meta/uid'])}, buffer has {self.capacity}"
                )
            self._columns = {k[4:]: np.array(v) for k, v in state.items() if k.startswith("col/")}
            self._uid = np.array(state["meta/uid"])
            self._valid = np.array(state["meta/valid"])
            self._push_time = np.array(state["meta/push_time"])
            self._collect_iter = np.array(state["meta/collect_iter"])
            self._next, self._count, self.pushed, self.sampled, self.evicted = (
                int(x) for x in state["counters"]
            )
            self._staleness_sum = float(state["staleness_sum"])


class AdvancedReplayBuffer(NaiveReplayBuffer):
    """Prioritized replay (sum tree) with importance weights, ``max_use`` and ``max_staleness``.

    Priorities follow Schaul et al. 2016: P(i) = p_i^alpha / sum_k p_k^alpha,
    weight_i = (N P(i))^-beta normalised by the largest weight, so
    weight_i = (p_i / p_min)^-beta; new rows get the largest priority seen.
    """

    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(
            type="advanced",
            replay_buffer_size=20000,
            seed=0,
            alpha=0.6,
            beta=0.4,
            # anneal beta linearly to 1 over this many samples (0: constant beta)
            anneal_step=0,
            # remove a row after it was sampled this many times (0: never)
            max_use=0,
            # drop rows collected more than this many learner iterations ago (0: never)
            max_staleness=0,
        )

    def __init__(self, cfg: Optional[Mapping] = None, on_evict: Optional[Callable[[Columns], None]] = None):
        super().__init__(cfg, on_evict)
        if not 0.0 <= self.cfg.alpha <= 1.0 or self.cfg.beta < 0:
            raise ConfigError(f"replay buffer needs 0 <= alpha <= 1 and beta >= 0, got {self.cfg.alpha=} {self.cfg.beta=}")
        self._tree = _SumTree(self.capacity)
        self._use_count = np.zeros(self.capacity, dtype=np.int64)
        self._max_priority = 1.0
        self._sample_calls = 0

    @property
    def beta(self) -> float:
        if self.cfg.anneal_step <= 0:
            return float(self.cfg.beta)
        frac = min(1.0, self._sample_calls / self.cfg.anneal_step)
        return float(self.cfg.beta + (1.0 - self.cfg.beta) * frac)

    def _on_slots_pushed(self, slots: np.ndarray) -> None:
        self._use_count[slots] = 0
        self._tree.update(slots, np.full(len(slots), self._max_priority ** self.cfg.alpha))

    def _on_slots_removed(self, slots: np.ndarray) -> None:
        self._tree.update(slots, np.zeros(len(slots)))

    def _remove_stale(self, cur_learner_iter: int) -> None:
        if self.cfg.max_staleness > 0:
            stale = self._valid & (cur_learner_iter - self._collect_iter > self.cfg.max_staleness)
            if stale.any():
                self._evict(np.flatnonzero(stale))

    def sample(self, size: int, cur_learner_iter: int = 0, sample_range: Optional[slice] = None,
               replace: bool = False) -> Optional[Columns]:
        """``size`` rows drawn by priority (stratified: one draw per slice of the total priority mass,
        so repeats are rare but possible, as in DI-engine); ``weight`` (also ``IS``) are the importance
        weights. ``sample_range`` is not supported here; ``replace`` is accepted for DI-engine's calls."""
        if sample_range is not None:
            raise ValueError(f"{sample_range=}: prioritized sampling draws from the whole buffer; "
                             "use a NaiveReplayBuffer to sample a range")
        with self._lock:
            self._remove_stale(cur_learner_iter)
            if self._count < size or size <= 0:
                return None
            total = self._tree.total()
            # stratified: one draw in each of `size` equal slices of the total mass
            prefix = (np.arange(size) + self._rng.random(size)) * (total / size)
            slots = np.minimum(self._tree.find(np.minimum(prefix, total * (1 - 1e-12))), self.capacity - 1)
            bad = ~self._valid[slots]
            if bad.any():  # float round-off landed on an empty leaf: draw uniformly instead
                slots[bad] = self._rng.choice(np.flatnonzero(self._valid), int(bad.sum()))
            leaves = self._tree.leaves[: self.capacity]
            p_min = float(leaves[self._valid].min())
            out = self._gather(slots, cur_learner_iter)
            out["weight"] = out["IS"] = np.power(leaves[slots] / p_min, -self.beta).astype(np.float32)
            self._sample_calls += 1
            if self.cfg.max_use > 0:
                np.add.at(self._use_count, slots, 1)
                used_up = np.unique(slots[self._use_count[slots] >= self.cfg.max_use])
                self._evict(used_up)
            return out

    def update(self, info: Mapping[str, np.ndarray]) -> None:
        """Set priorities: ``info`` has ``index``, ``uid`` (or DI-engine's ``replay_buffer_idx``,
        ``replay_unique_id``) and ``priority`` arrays."""
        index = np.asarray(info["index"] if "index" in info else info["replay_buffer_idx"], dtype=np.int64)
        uid = np.asarray(info["uid"] if "uid" in info else info["replay_unique_id"], dtype=np.int64)
        priority = np.asarray(info["priority"], dtype=np.float64)
        with self._lock:
            keep = (index >= 0) & (index < self.capacity)
            index, uid, priority = index[keep], uid[keep], priority[keep]
            keep = self._valid[index] & (self._uid[index] == uid)
            index, priority = index[keep], np.abs(priority[keep]) + 1e-6
            if len(index):
                self._max_priority = max(self._max_priority, float(priority.max()))
                self._tree.update(index, priority ** self.cfg.alpha)

    def state_dict(self) -> Dict[str, np.ndarray]:
        with self._lock:
            state = super().state_dict()
            state["prio/leaves"] = self._tree.leaves[: self.capacity].copy()
            state["prio/use_count"] = self._use_count.copy()
            state["prio/scalars"] = np.array([self._max_priority, self._sample_calls], dtype=np.float64)
            return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        with self._lock:
            super().load_state_dict(state)
            self._tree.leaves[: self.capacity] = state["prio/leaves"]
            self._tree.rebuild()
            self._use_count = np.array(state["prio/use_count"])
            self._max_priority = float(state["prio/scalars"][0])
            self._sample_calls = int(state["prio/scalars"][1])


class SegmentReplayBuffer(NaiveReplayBuffer):
    """On-policy data: whole segments of rows from recent policy versions, handed out and dropped.

    ``sample(size, cur_learner_iter)`` returns *every* stored row collected by a policy version
    within ``max_staleness`` of ``cur_learner_iter`` (``cur_learner_iter - collect_iter <=
    max_staleness``), in push order, once at least ``size`` such rows exist (else None). A row is
    removed after it was handed out ``max_use`` times, and a row older than ``max_staleness`` is
    removed unused (DI-engine's buffer keys). PPO runs its ``epoch_per_collect`` epochs over one
    hand-out; with the defaults (``max_staleness=0``, ``max_use=1``) a learner at iteration T
    trains only on rows of policy version T, once.
    """

    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(
            type="segment",
            replay_buffer_size=20000,
            seed=0,
            # hand a segment to the learner this many times, then drop it
            max_use=1,
            # accept rows collected at most this many learner iterations (= policy versions) ago
            max_staleness=0,
        )

    def __init__(self, cfg: Optional[Mapping] = None, on_evict: Optional[Callable[[Columns], None]] = None):
        super().__init__(cfg, on_evict)
        if self.cfg.max_use < 1 or self.cfg.max_staleness < 0:
            raise ConfigError(f"a segment buffer needs max_use >= 1 and max_staleness >= 0, got "
                              f"{self.cfg.max_use=} {self.cfg.max_staleness=}")
        self._use_count = np.zeros(self.capacity, dtype=np.int64)

    def _on_slots_pushed(self, slots: np.ndarray) -> None:
        self._use_count[slots] = 0

    def _fresh(self, cur_learner_iter: int) -> np.ndarray:
        return self._valid & (cur_learner_iter - self._collect_iter <= self.cfg.max_staleness)

    def fresh_count(self, cur_learner_iter: int) -> int:
        """Rows a learner at ``cur_learner_iter`` may train on."""
        with self._lock:
            return int(self._fresh(cur_learner_iter).sum())

    def sample(self, size: int, cur_learner_iter: int = 0) -> Optional[Columns]:
        with self._lock:
            stale = self._valid & ~self._fresh(cur_learner_iter)
            if stale.any():
                self._evict(np.flatnonzero(stale))
            slots = np.flatnonzero(self._valid)
            if len(slots) < size or size <= 0:
                return None
            slots = slots[np.argsort(self._uid[slots], kind="stable")]  # push order: time order within a chunk
            out = self._gather(slots, cur_learner_iter)
            self._use_count[slots] += 1
            self._evict(slots[self._use_count[slots] >= self.cfg.max_use])
            return out

    def state_dict(self) -> Dict[str, np.ndarray]:
        with self._lock:
            state = super().state_dict()
            state["segment/use_count"] = self._use_count.copy()
            return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        with self._lock:
            super().load_state_dict(state)
            self._use_count = np.array(state["segment/use_count"])


class SequenceReplayBuffer(NaiveReplayBuffer):
    """DI-engine's ``SequenceReplayBuffer``: samples contiguous, same-episode sequences of rows.

    The rows live in the naive buffer's ring; the buffer also keeps which episode each row belongs
    to. ``push`` takes rows of one env in time order (a dict of columns) or a list of whole
    episodes (dicts of columns, e.g. from ``EpisodeSerialCollector``). In a dict of rows, an
    ``episode_id`` column, when there is one, names each row's episode; otherwise an episode ends
    after a row whose ``done`` (or ``end``, where present) is true, and the first rows of a push
    continue the episode the previous push left open. (``done`` is false on a time-limit
    truncation: push a list of episodes, or an ``end`` column, to split those.)
    """

    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(type="sequence", replay_buffer_size=20000, seed=0)

    def __init__(self, cfg: Optional[Mapping] = None, on_evict: Optional[Callable[[Columns], None]] = None):
        super().__init__(cfg, on_evict)
        self._episode = np.full(self.capacity, -1, dtype=np.int64)
        self._episodes_begun = 0  # episode ids handed out
        self._open = False  # the last pushed row's episode has not ended

    def _episode_ids(self, data: Mapping[str, np.ndarray], n: int) -> np.ndarray:
        if "episode_id" in data:  # the caller's ids, renumbered in order of appearance
            raw = np.asarray(data["episode_id"])
            starts = np.concatenate([[True], raw[1:] != raw[:-1]])
            continues = False
        else:
            ends = np.asarray(data["done"], dtype=bool) if "done" in data else np.zeros(n, dtype=bool)
            if "end" in data:
                ends = ends | np.asarray(data["end"], dtype=bool)
            starts = np.concatenate([[True], ends[:-1]])
            continues = self._open
            self._open = not bool(ends[-1])
        ids = self._episodes_begun + np.cumsum(starts) - 1
        if continues:
            ids -= 1
        self._episodes_begun = int(ids[-1]) + 1
        return ids

    def push(self, data, cur_collector_envstep: int = -1) -> np.ndarray:
        """Push rows of one env in time order (dict of columns) or a list of whole episodes."""
        if not isinstance(data, Mapping):  # a list of episodes: each its own episode
            episodes = [{k: np.asarray(v) for k, v in e.items()} for e in data if columns_len(e)]
            if not episodes:
                return np.zeros(0, dtype=np.int64)
            with self._lock:
                ids = np.concatenate([np.full(columns_len(e), self._episodes_begun + i, dtype=np.int64)
                                      for i, e in enumerate(episodes)])
                self._episodes_begun += len(episodes)
                self._open = False
                return self._push_rows({k: np.concatenate([e[k] for e in episodes]) for k in episodes[0]}, ids,
                                       cur_collector_envstep)
        n = columns_len(data)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        with self._lock:
            ids = self._episode_ids(data, n)
            return self._push_rows({k: v for k, v in data.items() if k != "episode_id"}, ids, cur_collector_envstep)

    def _push_rows(self, data: Mapping[str, np.ndarray], ids: np.ndarray, cur_collector_envstep: int) -> np.ndarray:
        slots = super().push(data, cur_collector_envstep)
        self._episode[slots] = ids[len(ids) - len(slots):]
        return slots

    def sample(self, batch: int, sequence: int, cur_learner_iter: int = 0, sample_range: Optional[slice] = None,
               replace: bool = False, cross_episode: bool = False) -> Optional[Columns]:
        """``batch`` sequences of ``sequence`` consecutive rows; None while fewer can be drawn.

        Every column comes back shaped ``(batch, sequence, ...)`` (``index`` / ``uid`` too), rows of
        a sequence in time order. A sequence never crosses an episode boundary unless
        ``cross_episode=True`` (then any ``sequence`` consecutive stored rows). ``replace=False``
        (DI-engine's default): distinct start rows (sequences may overlap). ``sample_range``: a
        slice over the stored rows oldest first; sequences lie inside it.
        """
        if batch <= 0 or sequence <= 0:
            raise ValueError(f"{batch=} and {sequence=} must be > 0")
        with self._lock:
            pool = np.flatnonzero(self._valid)
            pool = pool[np.argsort(self._uid[pool], kind="stable")]  # oldest first
            if sample_range is not None:
                pool = pool[sample_range]
            if len(pool) < sequence:
                return None
            last = len(pool) - sequence  # start positions 0..last
            uid, episode = self._uid[pool], self._episode[pool]
            ok = uid[sequence - 1:] - uid[: last + 1] == sequence - 1  # no gap in push order
            if not cross_episode:  # an episode's rows are consecutive: same id at both ends, same id inside
                ok &= episode[sequence - 1:] == episode[: last + 1]
            starts = np.flatnonzero(ok)
            if len(starts) == 0 or (not replace and len(starts) < batch):
                return None
            picks = starts[self._draw(len(starts), batch, replace)]
            slots = pool[picks[:, None] + np.arange(sequence)]
            out = self._gather(slots.reshape(-1), cur_learner_iter)
            out.pop("replay_buffer_idx"), out.pop("replay_unique_id")
            out = {k: v.reshape((batch, sequence) + v.shape[1:]) for k, v in out.items()}
            out["replay_buffer_idx"], out["replay_unique_id"] = out["index"], out["uid"]
            return out

    def state_dict(self) -> Dict[str, np.ndarray]:
        with self._lock:
            state = super().state_dict()
            state["sequence/episode"] = self._episode.copy()
            state["sequence/scalars"] = np.array([self._episodes_begun, self._open], dtype=np.int64)
            return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        with self._lock:
            super().load_state_dict(state)
            self._episode = np.array(state["sequence/episode"])
            self._episodes_begun, self._open = int(state["sequence/scalars"][0]), bool(state["sequence/scalars"][1])


def columns_len(columns: Mapping[str, np.ndarray]) -> int:
    """Rows in a dict of columns."""
    return len(next(iter(columns.values()))) if columns else 0


class EpisodeReplayBuffer(IBuffer):
    """Whole episodes (dicts of columns), sampled uniformly; capacity counts episodes."""

    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(type="episode", replay_buffer_size=1000, seed=0)

    def __init__(self, cfg: Optional[Mapping] = None, on_evict: Optional[Callable[[Columns], None]] = None):
        self._setup(cfg, on_evict)
        self._episodes: List[Columns] = []
        self._next = 0
        self.pushed = self.sampled = self.evicted = 0

    def push(self, data, cur_collector_envstep: int = -1) -> np.ndarray:
        """Push one episode (dict of columns) or a list of them."""
        episodes = [data] if isinstance(data, Mapping) else list(data)
        slots = []
        with self._lock:
            for episode in episodes:
                episode = {k: np.asarray(v) for k, v in episode.items()}
                if len(self._episodes) < self.capacity:
                    self._episodes.append(episode)
                    slots.append(len(self._episodes) - 1)
                else:
                    old = self._episodes[self._next]
                    self._episodes[self._next] = episode
                    self.evicted += 1
                    if self.on_evict is not None:
                        self.on_evict(old)
                    slots.append(self._next)
                    self._next = (self._next + 1) % self.capacity
                self.pushed += 1
        return np.asarray(slots, dtype=np.int64)

    def sample(self, size: int, cur_learner_iter: int = 0, sample_range: Optional[slice] = None,
               replace: bool = False) -> Optional[List[Columns]]:
        """``size`` whole episodes, distinct unless ``replace``; ``sample_range`` is not supported here."""
        if sample_range is not None:
            raise ValueError(f"{sample_range=}: the episode buffer samples from all its episodes")
        with self._lock:
            if len(self._episodes) < size or size <= 0:
                return None
            picks = self._draw(len(self._episodes), size, replace)
            self.sampled += size
            return [self._episodes[i] for i in picks]

    def count(self) -> int:
        return len(self._episodes)

    def clear(self) -> None:
        with self._lock:
            self.evicted += len(self._episodes)
            self._episodes, self._next = [], 0

    def stats(self) -> BufferStats:
        return BufferStats(len(self._episodes), self.capacity, self.pushed, self.sampled, self.evicted, 0.0)

    def state_dict(self) -> Dict[str, np.ndarray]:
        with self._lock:
            state: Dict[str, np.ndarray] = {
                "counters": np.array([self._next, self.pushed, self.sampled, self.evicted], dtype=np.int64),
                "lengths": np.array([len(next(iter(e.values()))) if e else 0 for e in self._episodes], dtype=np.int64),
            }
            if self._episodes:
                for name in self._episodes[0]:
                    state[f"col/{name}"] = np.concatenate([e[name] for e in self._episodes])
            return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        with self._lock:
            self._next, self.pushed, self.sampled, self.evicted = (int(x) for x in state["counters"])
            bounds = np.cumsum(np.concatenate([[0], state["lengths"]]))
            names = [k[4:] for k in state if k.startswith("col/")]
            self._episodes = [
                {name: np.array(state[f"col/{name}"][a:b]) for name in names}
                for a, b in zip(bounds[:-1], bounds[1:])
            ]


BUFFER_REGISTRY.register("naive", NaiveReplayBuffer)
BUFFER_REGISTRY.register("advanced", AdvancedReplayBuffer)
BUFFER_REGISTRY.register("episode", EpisodeReplayBuffer)
BUFFER_REGISTRY.register("segment", SegmentReplayBuffer)
BUFFER_REGISTRY.register("sequence", SequenceReplayBuffer)


def buffer_default_config(buffer_type: str) -> EasyDict:
    return BUFFER_REGISTRY.get(buffer_type).default_config()


def get_buffer_cls(cfg: Mapping) -> type:
    """The buffer class ``cfg.type`` names (DI-engine's ``get_buffer_cls``), after importing ``cfg.import_names``."""
    import_modules(cfg.get("import_names", []), "buffer import_names")
    return BUFFER_REGISTRY.get(cfg.get("type", "advanced"))


def create_buffer(cfg: Mapping, on_evict: Optional[Callable[[Columns], None]] = None) -> IBuffer:
    """Build the buffer named by ``cfg.type`` (``naive``, ``advanced``, ``episode`` or a registered one)."""
    return get_buffer_cls(cfg)(cfg, on_evict=on_evict)

