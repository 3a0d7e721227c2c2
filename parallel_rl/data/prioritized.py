"""Prioritized replay (Schaul et al. 2016): a sum tree over the naive ring's slots."""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Mapping, Optional

import numpy as np

from ..config.section import setting
from .base import NaiveBufferSection, NaiveReplayBuffer
from .columns import Columns


@dataclasses.dataclass(frozen=True)
class AdvancedBufferSection(NaiveBufferSection):
    """Prioritized replay (Schaul et al. 2016): P(i) = p_i^alpha / sum_k p_k^alpha, importance weights
    (p_i / p_min)^-beta; new rows get the largest priority seen."""

    title = "Replay buffer (type='advanced')"

    type: str = setting("advanced", doc="prioritized replay (see naive's type for the others)")
    alpha: float = setting(0.6, lo=0, hi=1, doc="how much the priorities count (0: uniform)")
    beta: float = setting(0.4, lo=0, doc="the importance weights' exponent (1: full correction)")
    anneal_step: int = setting(0, lo=0, doc="anneal beta linearly to 1 over this many samples (0: constant beta)")
    max_use: int = setting(0, lo=0, doc="remove a row after it was sampled this many times (0: never)")
    max_staleness: int = setting(
        0, lo=0, doc="drop rows collected more than this many learner iterations ago (0: never)"
    )


class _SumTree:
    """Binary sum tree over ``capacity`` leaves; batched (vectorized) updates and searches."""

    SPAN = 4096  # leaves an update may span for its inner nodes to be recomputed by slices

    def __init__(self, capacity: int):
        self.size = 1 << max(0, int(capacity - 1).bit_length())
        self.tree = np.zeros(2 * self.size, dtype=np.float64)

    @property
    def leaves(self) -> np.ndarray:
        return self.tree[self.size :]

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
                np.add(tree[2 * lo : 2 * hi + 2 : 2], tree[2 * lo + 1 : 2 * hi + 2 : 2], out=tree[lo : hi + 1])
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
            self.tree[half:size] = self.tree[size : 2 * size : 2] + self.tree[size + 1 : 2 * size : 2]
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


class AdvancedReplayBuffer(NaiveReplayBuffer):
    """Prioritized replay (sum tree) with importance weights, ``max_use`` and ``max_staleness``.

    Priorities follow Schaul et al. 2016: P(i) = p_i^alpha / sum_k p_k^alpha,
    weight_i = (N P(i))^-beta normalised by the largest weight, so
    weight_i = (p_i / p_min)^-beta; new rows get the largest priority seen.
    """

    section = AdvancedBufferSection

    def __init__(
        self,
        cfg: Optional[Mapping] = None,
        tb_logger=None,
        exp_name: str = "default_experiment",
        instance_name: str = "buffer",
        on_evict: Optional[Callable[[Columns], None]] = None,
    ):
        super().__init__(cfg, tb_logger, exp_name, instance_name, on_evict)
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

    @beta.setter
    def beta(self, beta: float) -> None:
        """DI-engine's setter: ``beta`` from now on; annealing (``anneal_step``) restarts from it."""
        if beta < 0:
            raise ValueError(f"{beta=} must be >= 0")
        with self._lock:
            self.cfg.beta, self._sample_calls = float(beta), 0

    def _on_slots_pushed(self, slots: np.ndarray) -> None:
        self._use_count[slots] = 0
        self._tree.update(slots, np.full(len(slots), self._max_priority**self.cfg.alpha))

    def _on_slots_removed(self, slots: np.ndarray) -> None:
        self._tree.update(slots, np.zeros(len(slots)))

    def _remove_stale(self, cur_learner_iter: int) -> None:
        if self.cfg.max_staleness > 0:
            stale = self._valid & (cur_learner_iter - self._collect_iter > self.cfg.max_staleness)
            if stale.any():
                self._evict(np.flatnonzero(stale))

    def sample(
        self, size: int, cur_learner_iter: int = 0, sample_range: Optional[slice] = None, replace: bool = False
    ) -> Optional[Columns]:
        """``size`` rows drawn by priority (stratified: one draw per slice of the total priority mass,
        so repeats are rare but possible, as in DI-engine); ``weight`` (also ``IS``) are the importance
        weights. ``sample_range`` is not supported here; ``replace`` is accepted for DI-engine's calls."""
        if sample_range is not None:
            raise ValueError(
                f"{sample_range=}: prioritized sampling draws from the whole buffer; "
                "use a NaiveReplayBuffer to sample a range"
            )
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
                self._tree.update(index, priority**self.cfg.alpha)

    def state_dict(self) -> Dict[str, np.ndarray]:
        with self._lock:
            state = super().state_dict()
            state["prio/leaves"] = self._tree.leaves[: self.capacity].copy()
            state["prio/use_count"] = self._use_count.copy()
            state["prio/scalars"] = np.array([self._max_priority, self._sample_calls], dtype=np.float64)
            return state

    def load_state_dict(self, _state_dict: Mapping[str, np.ndarray], deepcopy: bool = False) -> None:
        """``deepcopy`` is DI-engine's; the arrays are always copied here."""
        with self._lock:
            super().load_state_dict(_state_dict)
            self._tree.leaves[: self.capacity] = _state_dict["prio/leaves"]
            self._tree.rebuild()
            self._use_count = np.array(_state_dict["prio/use_count"])
            self._max_priority = float(_state_dict["prio/scalars"][0])
            self._sample_calls = int(_state_dict["prio/scalars"][1])
