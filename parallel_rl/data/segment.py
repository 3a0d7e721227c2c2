"""On-policy data: whole segments from recent policy versions, handed out and dropped."""
from __future__ import annotations

from typing import Callable, Dict, Mapping, Optional

import numpy as np
from easydict import EasyDict

from ..errors import ConfigError
from .base import NaiveReplayBuffer
from .columns import Columns


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

    def __init__(self, cfg: Optional[Mapping] = None, tb_logger=None, exp_name: str = "default_experiment",
                 instance_name: str = "buffer", on_evict: Optional[Callable[[Columns], None]] = None):
        super().__init__(cfg, tb_logger, exp_name, instance_name, on_evict)
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
