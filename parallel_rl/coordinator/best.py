"""The run's best evaluated policy: the coordinator holds each version it hands an evaluator (so the learner's
``keep_checkpoints`` cannot prune it before the evaluation ends) and keeps the one that scored best, named on
the shared store (``policy/best.json``, :meth:`~parallel_rl.storage.checkpoints.PolicyCheckpoints.keep_best`),
where ``eval``, ``export`` and ``load_policy`` find it. Its record is in the coordinator's snapshots, so a
resumed run compares later evaluations with it."""

from __future__ import annotations

import logging
import threading
from typing import Any, Dict, Optional

from ..errors import StorageError
from ..storage.checkpoints import BestRecord

logger = logging.getLogger(__name__)


class BestPolicy:
    def __init__(self, storage, keep_checkpoints: int):
        self.storage = storage
        self.keep_checkpoints = keep_checkpoints
        self.record: Optional[BestRecord] = None
        # one evaluation result at a time: two kept at once could leave the store naming the lesser one
        self._lock = threading.Lock()

    def evaluating(self, version: Any) -> None:
        """An evaluator is handed ``version``: hold it until :meth:`evaluated` or :meth:`abandoned`."""
        if not isinstance(version, int):
            return
        try:
            self.storage.policies.hold(version)
        except StorageError as exc:  # the evaluation goes on; its version may be pruned before it ends
            logger.error("coordinator: cannot hold policy %d for its evaluation: %s", version, exc)

    def evaluated(
        self, version: int, eval_return: float, env_steps: int, train_iter: int, handed: Optional[int] = None
    ) -> bool:
        """``version`` scored ``eval_return`` (``handed``: the version the evaluator was handed, when it had to
        evaluate another: the one handed was gone); True when it is the best so far and is kept."""
        with self._lock:
            try:
                if self.record is not None and eval_return <= self.record.eval_return:
                    return False
                record = BestRecord(int(version), float(eval_return), int(env_steps), int(train_iter))
                try:
                    self.storage.policies.keep_best(record)
                except FileNotFoundError:
                    logger.warning(
                        "coordinator: policy %d scored the best eval return so far (%.1f) but its "
                        "checkpoint was pruned before it was held; the best kept stays %s (raise "
                        "parallel.learner.keep_checkpoints, %d)",
                        version,
                        eval_return,
                        self.record.describe() if self.record else "none",
                        self.keep_checkpoints,
                    )
                    return False
                except StorageError as exc:
                    logger.error("coordinator: cannot keep policy %d as the best: %s", version, exc)
                    return False
                self.record = record
                logger.info("coordinator: best: %s", record.describe())
                return True
            finally:
                for other in {version, handed} - {None}:
                    self._release(other)

    def abandoned(self, version: Any) -> None:
        """The evaluation of ``version`` ended without a result: release it (unless it is the best)."""
        if isinstance(version, int):
            with self._lock:
                self._release(version)

    def _release(self, version: int) -> None:
        if self.record is not None and version == self.record.version:
            return
        try:
            self.storage.policies.release(version)
        except StorageError as exc:  # it stays held: kept on the disk, never deleted by pruning
            logger.error("coordinator: cannot release policy %d after its evaluation: %s", version, exc)

    # ---- snapshots --------------------------------------------------------------------------
    def state_dict(self) -> Optional[Dict[str, Any]]:
        return None if self.record is None else self.record.to_json()

    def load_state_dict(self, state: Optional[Dict[str, Any]]) -> None:
        """Restore :meth:`state_dict`; the store's record wins when it is better (kept after the snapshot)."""
        saved = None if state is None else BestRecord.from_json(state, "the snapshot's best policy")
        try:
            stored = self.storage.policies.best_record()
        except StorageError as exc:
            logger.warning("coordinator: %s", exc)
            stored = None
        candidates = [r for r in (saved, stored) if r is not None]
        self.record = max(candidates, key=lambda r: r.eval_return, default=None)
