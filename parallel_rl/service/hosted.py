"""One run of the service: a :class:`~parallel_rl.entry.launcher.LocalCluster` in the service's process (its
coordinator on its own OS-picked port, its own run directory), whose workers the service's pool starts and
retires instead of a fixed count: each worker is a fresh fork of the service's fork server, pointed at this run's
coordinator (it builds its envs and model for this run)."""

from __future__ import annotations

import logging
import os
from typing import Callable, List, Optional

from ..config import load_cluster_config
from ..coordinator import CoordinatorState
from ..entry.launcher import LocalCluster
from .runs import RunRecord, run_dir

logger = logging.getLogger(__name__)


def run_overrides(record: RunRecord, service_dir: str) -> List[str]:
    """The submitted overrides and the run's own experiment directory (last: it wins)."""
    return [*record.overrides, f"exp_name={run_dir(service_dir, record.run_id)}"]


class HostedCluster(LocalCluster):
    hosted = True

    def __init__(
        self, record: RunRecord, service_dir: str, add_worker: Callable[[str], dict], resume: bool = False
    ) -> None:
        overrides = run_overrides(record, service_dir)
        cfg = load_cluster_config(record.config, overrides)
        shared = os.path.join(run_dir(service_dir, record.run_id), "shared")
        super().__init__(
            cfg,
            1,
            "127.0.0.1",
            0,
            shared,
            config_path=record.config,
            overrides=overrides,
            resume=shared if resume else None,
            add_worker=add_worker,
        )
        self.progress_name = record.run_id
        self.run_id = record.run_id
        self.granted = {"learner": 0, "collector": 0}  # workers the pool gave this run, less those it took back

    def grant(self, role: str) -> None:
        """One more ``role`` worker from the pool: a fork for this run, started by its launcher's loop."""
        self.granted[role] += 1
        self.start_worker(role)

    def keeping(self) -> int:
        """Collectors granted and not given back (a crashed one is restarted by the launcher: still kept)."""
        return self.granted["collector"]

    def held(self, role: str) -> int:
        """Slots of ``role`` this run holds: those granted, and those given back whose process has not exited."""
        leaving = 0
        for child in list(self.children):
            if child.role == role and child.proc.poll() is None:
                worker = self._worker_of(child)
                leaving += worker is not None and worker.removed
        return self.granted[role] + leaving

    def alive(self) -> int:
        """Its worker processes that run now (the pool's busy fraction counts these)."""
        return sum(c.proc.poll() is None for c in list(self.children))

    def retire_collector(self) -> bool:
        """Give one collector back to the pool: a start not made yet is cancelled; else the newest registered
        collector is removed as ``DELETE /api/v1/collectors/<id>`` removes one (its task wraps up, its data
        stays, it is not replaced) and its slot is free once its process exited. False: none to retire now (one
        forked and not registered yet: the next tick tries again)."""
        with self._pending_lock:
            starts = [item for item in self._pending if item[1] == "collector"]
            if starts:
                self._pending.remove(starts[-1])
                self.granted["collector"] -= 1
                return True
        for child in reversed(list(self.children)):
            if child.role != "collector" or child.proc.poll() is not None:
                continue
            worker = self._worker_of(child)
            if worker is not None and worker.state.active and not worker.removed:
                self.remove_collector(worker.worker_id, "pool: share moved")
                logger.info("service: %s gives %s back to the pool", self.run_id, worker.worker_id)
                return True
        return False

    def remove_collector(self, worker_id: str, reason: str = "removed"):
        """Remove collector ``worker_id`` of this run (NotFoundError, ConflictError) and its grant."""
        worker = self.coordinator.membership.remove_worker(worker_id, "collector", reason=reason)
        self.granted["collector"] -= 1
        return worker

    def stop_training(self, reason: str) -> None:
        """End the training (``DELETE /api/v1/runs/<id>``): its workers stop, its state and data stay."""
        self.coordinator.finish(CoordinatorState.STOPPED, reason)

    def workers_of(self, kind: Optional[str] = None) -> list:
        return self.coordinator.workers.list(kind, active_only=True)
