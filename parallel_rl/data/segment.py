"""On-policy data, handed out and dropped: whole segments from recent policy versions (synchronous), or the
queued rollouts within a staleness bound, oldest first (asynchronous)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Mapping, Optional

import numpy as np

from ..config.section import setting
from .base import BufferStats, NaiveBufferSection, NaiveReplayBuffer
from .columns import Columns


@dataclasses.dataclass(frozen=True)
class SegmentBufferSection(NaiveBufferSection):
    """Synchronous on-policy data (PPO): whole segments of recent policy versions, handed out and dropped."""

    title = "Replay buffer (type='segment')"

    type: str = setting("segment", doc="synchronous on-policy segments (see naive's type for the others)")
    max_use: int = setting(1, lo=1, doc="hand a segment to the learner this many times, then drop it")
    max_staleness: int = setting(
        0, lo=0, doc="accept rows collected at most this many learner iterations (= policy versions) ago"
    )


@dataclasses.dataclass(frozen=True)
class RolloutBufferSection(SegmentBufferSection):
    """Asynchronous on-policy data (IMPALA, APPO): the queued rollouts within a staleness bound, oldest first."""

    title = "Replay buffer (type='rollout')"

    type: str = setting("rollout", doc="asynchronous on-policy rollouts (see naive's type for the others)")
    replay_buffer_size: int = setting(
        20000,
        lo=1,
        doc="rows waiting for the learner, at most (full: the oldest unused rows are dropped, counted stale)",
    )
    max_use: int = setting(1, lo=1, hi=1, doc="hand a row to the learner at most once")
    max_staleness: int = setting(
        8,
        lo=0,
        doc="""accept rows collected at most this many policy versions (= learner iterations) before the one
        the learner trains them at. The pipeline alone accounts for ~3 (two batches held by the learner, one chunk
        in flight), the queue (parallel.commander.rollout_queue_batches) for ~3; the rest is room for a chunk's
        collection and announcement (flush_interval)""",
    )


class SegmentReplayBuffer(NaiveReplayBuffer):
    """On-policy data: whole segments of rows from recent policy versions, handed out and dropped.

    ``sample(size, cur_learner_iter)`` returns *every* stored row collected by a policy version
    within ``max_staleness`` of ``cur_learner_iter`` (``cur_learner_iter - collect_iter <=
    max_staleness``), in push order, once at least ``size`` such rows exist (else None). A row is
    removed after it was handed out ``max_use`` times, and a row older than ``max_staleness`` is
    removed unused (DI-engine's buffer keys; counted in ``dropped_stale``). PPO runs its
    ``epoch_per_collect`` epochs over one hand-out; with the defaults (``max_staleness=0``,
    ``max_use=1``) a learner at iteration T trains only on rows of policy version T, once.
    """

    section = SegmentBufferSection

    def __init__(
        self,
        cfg: Optional[Mapping] = None,
        tb_logger=None,
        exp_name: str = "default_experiment",
        instance_name: str = "buffer",
        on_evict: Optional[Callable[[Columns], None]] = None,
    ):
        super().__init__(cfg, tb_logger, exp_name, instance_name, on_evict)
        self._use_count = np.zeros(self.capacity, dtype=np.int64)
        self.dropped_stale = 0  # rows dropped unused: fell more than max_staleness versions behind

    def _on_slots_pushed(self, slots: np.ndarray) -> None:
        self._use_count[slots] = 0

    def _fresh(self, cur_learner_iter: int) -> np.ndarray:
        return self._valid & (cur_learner_iter - self._collect_iter <= self.cfg.max_staleness)

    def fresh_count(self, cur_learner_iter: int) -> int:
        """Rows a learner at ``cur_learner_iter`` may train on."""
        with self._lock:
            return int(self._fresh(cur_learner_iter).sum())

    def _fresh_slots(self, cur_learner_iter: int) -> np.ndarray:
        """The stored rows' slots in push order (time order within a chunk), after dropping the stale ones."""
        stale = np.flatnonzero(self._valid & ~self._fresh(cur_learner_iter))
        self.dropped_stale += len(stale)
        self._evict(stale)
        slots = np.flatnonzero(self._valid)
        return slots[np.argsort(self._uid[slots], kind="stable")]

    def _hand_out(self, slots: np.ndarray, cur_learner_iter: int) -> Columns:
        out = self._gather(slots, cur_learner_iter)
        self._use_count[slots] += 1
        self._evict(slots[self._use_count[slots] >= self.cfg.max_use])
        return out

    def sample(self, size: int, cur_learner_iter: int = 0) -> Optional[Columns]:
        with self._lock:
            slots = self._fresh_slots(cur_learner_iter)
            if len(slots) < size or size <= 0:
                return None
            return self._hand_out(slots, cur_learner_iter)

    def stats(self) -> BufferStats:
        with self._lock:
            return dataclasses.replace(super().stats(), dropped_stale=self.dropped_stale)

    def state_dict(self) -> Dict[str, np.ndarray]:
        with self._lock:
            state = super().state_dict()
            state["segment/use_count"] = self._use_count.copy()
            state["segment/dropped_stale"] = np.array(self.dropped_stale)
            return state

    def load_state_dict(self, _state_dict: Mapping[str, np.ndarray]) -> None:
        with self._lock:
            super().load_state_dict(_state_dict)
            self._use_count = np.array(_state_dict["segment/use_count"])
            # snapshots from before stale rows were counted have none
            self.dropped_stale = int(_state_dict.get("segment/dropped_stale", 0))


class RolloutReplayBuffer(SegmentReplayBuffer):
    """Asynchronous on-policy data: a queue of rows, each handed out once, oldest first, within ``max_staleness``.

    ``sample(size, cur_learner_iter)`` drops the rows collected more than ``max_staleness`` policy versions
    before ``cur_learner_iter`` (the iteration the learner will train them at) and returns the oldest ``size``
    of the rest, in push order (time order within a chunk), or None while fewer are stored. A row is handed
    out once (``max_use`` is 1: the async flow trains on every row at most once). Rows dropped unused are
    counted in ``dropped_stale``: those that fell behind, and the oldest unused rows a full buffer overwrites
    (memory stays bounded by ``replay_buffer_size``).

    Oldest first, as IMPALA's queue: the coordinator bounds the rows waiting (``rollout_queue_batches``), so a
    row waits about that many updates and none need age out; newest first would leave the rows a batch did
    not take standing behind every newer one until they are dropped (with a queue of two batches, one in
    nine).
    """

    section = RolloutBufferSection

    def push(self, data: Mapping[str, np.ndarray], cur_collector_envstep: int = -1) -> np.ndarray:
        with self._lock:
            n = len(next(iter(data.values())))
            overwritten = (self._next + np.arange(min(n, self.capacity))) % self.capacity
            self.dropped_stale += int(self._valid[overwritten].sum()) + max(0, n - self.capacity)
            return super().push(data, cur_collector_envstep)

    def sample(self, size: int, cur_learner_iter: int = 0) -> Optional[Columns]:
        with self._lock:
            slots = self._fresh_slots(cur_learner_iter)
            if len(slots) < size or size <= 0:
                return None
            return self._hand_out(slots[:size], cur_learner_iter)
