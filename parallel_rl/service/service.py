"""The service (``parallel-rl serve --dir DIR``): several trainings (runs) on one pool of workers.

The pool is a number of learner slots and collector slots. A run that starts takes a learner slot and its fair
share of the collector slots (:mod:`.share`); one that cannot start yet waits queued. The service's loop (every
:data:`TICK` seconds, and at once when something changed) starts queued runs, takes collectors back from runs
above their share (each finishes its task and leaves) and gives free slots to runs below theirs: a worker for a
run is a fresh fork of the one fork server (:mod:`~parallel_rl.entry.forkserver`), started by the run's
:class:`~.hosted.HostedCluster`. When a run ends (solved, budget, ``DELETE``) its workers stop and its slots go
to the others at the next tick. Every change is written to ``DIR/service.json``; a service started again on the
same directory resumes each run that had not ended (from its saved coordinator state).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Dict, List, Optional

from ..errors import ConfigError, ConflictError, NotFoundError, ParallelRLError, RequestRefused
from ..entry.launcher import MAX_LEARNER_GRACE
from ..storage import lock_directory
from ..config import load_cluster_config
from .hosted import HostedCluster, run_overrides
from .runs import RunRecord, RunState, load_records, run_dir, save_records
from .share import Claim, fair_share

logger = logging.getLogger(__name__)
TICK = 0.1  # seconds between the pool's looks at its runs (a finished worker's slot is given on within this)
# a queued run starts once no submission is being compiled and none came for SETTLE seconds (at most SETTLE_MAX
# after the first of a burst): a sweep's trials arrive one request after another, and the first one started alone
# would take every collector slot only to give most back a moment later (forked, set up and retired for nothing)
SETTLE, SETTLE_MAX = 0.5, 2.0
MIN_COLLECTORS = 1
LOCK_NAME = "service.lock"


class Service:
    def __init__(self, service_dir: str, learners: int, collectors: int, min_collectors: int = MIN_COLLECTORS):
        if learners < 1 or collectors < min_collectors:
            raise ConfigError(
                f"the pool needs --learners >= 1 and --collectors >= {min_collectors}, got {learners=} {collectors=}"
            )
        self.dir = os.path.abspath(service_dir)
        os.makedirs(self.dir, exist_ok=True)
        # held for the service's life: a second service on DIR would start the same runs on the same directories
        self.dir_lock = lock_directory(
            self.dir,
            "parallel-rl serve",
            LOCK_NAME,
            f"the service directory {self.dir}",
            "stop that service first, or give this one another --dir",
            "the service directory's filesystem must support flock (a local disk, NFS)",
        )
        self.learners, self.collectors, self.min_collectors = learners, collectors, min_collectors
        self.records, self._next = load_records(self.dir)
        self.clusters: Dict[str, HostedCluster] = {}
        self._threads: Dict[str, threading.Thread] = {}
        self._stop_asked: Dict[str, str] = {}
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._loop: Optional[threading.Thread] = None
        self.busy_seconds = self.available_seconds = 0.0
        # submissions not settled yet: (the first's arrival, the latest's arrival or end), and how many are being
        # compiled now
        self._burst: Optional[tuple] = None
        self._in_flight = 0
        self._counting = threading.Lock()
        for record in self.records:
            if not record.state.ended:  # the runs of the service's last life: queued again, resumed when started
                record.state = RunState.QUEUED
        self._save()

    # ---- runs -----------------------------------------------------------------------------------------------
    def submit(
        self,
        config: Optional[str],
        config_text: Optional[str],
        overrides: List[str],
        weight: float = 1.0,
        name: Optional[str] = None,
    ) -> RunRecord:
        """A new run, queued; its config compiled first (RequestRefused: the ConfigError's one line)."""
        with self._counting:  # in flight from its arrival: no queued run starts while one is being compiled
            self._in_flight += 1
            arrived = time.monotonic()
            self._burst = (self._burst[0] if self._burst else arrived, arrived)
        try:
            return self._submit(config, config_text, overrides, weight, name)
        finally:
            with self._counting:
                self._in_flight -= 1
                if self._burst:
                    self._burst = (self._burst[0], time.monotonic())
            self._wake.set()

    def _submit(
        self,
        config: Optional[str],
        config_text: Optional[str],
        overrides: List[str],
        weight: float,
        name: Optional[str],
    ) -> RunRecord:
        with self._lock:
            run_id = f"run-{self._next}"
            record = RunRecord(run_id, name or "", "", list(overrides), weight)
            if config_text is not None:
                os.makedirs(run_dir(self.dir, run_id), exist_ok=True)
                config = os.path.join(run_dir(self.dir, run_id), "config.py")
                with open(config, "w") as f:
                    f.write(config_text)
            record.config = os.path.abspath(str(config))
            try:
                cfg = load_cluster_config(record.config, run_overrides(record, self.dir))
            except ParallelRLError as exc:
                raise RequestRefused(f"run not submitted: {exc}", code="bad_config") from None
            record.auth_read = bool(cfg.parallel.coordinator.auth_read)
            record.name = record.name or os.path.splitext(os.path.basename(record.config))[0]
            self._next += 1
            self.records.append(record)
            self._save()
        logger.info("service: %s (%s) submitted, weight %g", run_id, record.name, weight)
        return record

    def record(self, run_id: str) -> RunRecord:
        for record in self.records:
            if record.run_id == run_id:
                return record
        raise NotFoundError(f"no run {run_id!r:.60}: `parallel-rl runs list` shows the service's runs")

    def directory(self, run_id: str) -> str:
        """The run's experiment directory (its shared store is ``shared/`` in it)."""
        return run_dir(self.dir, self.record(run_id).run_id)

    def stop(self, run_id: str) -> RunRecord:
        """``DELETE /api/v1/runs/<id>``: a queued run ends at once, a running one stops (saved, its data kept)."""
        with self._lock:
            record = self.record(run_id)
            if record.state == RunState.QUEUED:
                self._end(record, RunState.STOPPED, "stopped before it started (DELETE)")
            elif record.state == RunState.RUNNING:
                self._stop_asked[run_id] = "stopped by DELETE /api/v1/runs/" + run_id
                self.clusters[run_id].stop_training(self._stop_asked[run_id])
        self._wake.set()
        return record

    def row(self, record: RunRecord) -> Dict[str, Any]:
        """A run as ``GET /api/v1/runs`` lists it."""
        cluster = self.clusters.get(record.run_id)
        numbers = dict(record.last)
        if cluster is not None:
            c = cluster.coordinator
            numbers = _numbers(c.summary())
        held = {"learners": 0, "collectors": 0}
        if cluster is not None and record.state == RunState.RUNNING:
            held = {"learners": cluster.held("learner"), "collectors": cluster.held("collector")}
        return {
            "id": record.run_id,
            "name": record.name,
            "state": record.state.value,
            "reason": record.reason,
            "weight": record.weight,
            "env_steps": numbers.get("env_steps", 0),
            "last_eval_return": numbers.get("last_eval_return"),
            "best_eval_return": numbers.get("best_eval_return"),
            "workers": held,
            "url": cluster.url if cluster is not None and record.state == RunState.RUNNING else None,
            "dir": run_dir(self.dir, record.run_id),
            "config": record.config,
            "overrides": record.overrides,
            "created_at": record.created_at,
        }

    def detail(self, run_id: str) -> Dict[str, Any]:
        """``GET /api/v1/runs/<id>``: its row, its coordinator's summary, eval curve and newest tasks."""
        record = self.record(run_id)
        cluster = self.clusters.get(run_id)
        out: Dict[str, Any] = {**self.row(record), "summary": dict(record.last), "curve": [], "tasks": []}
        if cluster is not None:
            c = cluster.coordinator
            out["summary"] = c.summary()
            out["curve"] = list(c.eval_history)
            out["tasks"] = [t.to_dict() for t in c.tasks.list()[-100:]]
        elif record.started:  # a run of an earlier life of the service: its curve from its last saved state
            out["curve"] = saved_curve(run_dir(self.dir, run_id))
        return out

    # ---- the pool -------------------------------------------------------------------------------------------
    def add_slot(self, kind: str) -> dict:
        """``POST /api/v1/collectors`` (or learners) without an address: one more slot in the pool."""
        with self._lock:
            if kind == "learner":
                self.learners += 1
            else:
                self.collectors += 1
            slots = self.learners if kind == "learner" else self.collectors
        logger.info("service: the pool has %d %s slot(s) now", slots, kind)
        self._wake.set()
        return {"kind": kind, "state": "slot added", "slots": slots}

    def remove_collector(self, ref: str) -> Dict[str, Any]:
        """``DELETE /api/v1/collectors/<run>:<worker>``: that collector leaves its run and the pool one slot less."""
        run_id, _, worker_id = ref.partition(":")
        with self._lock:
            cluster = self.clusters.get(run_id)
            if cluster is None or self.record(run_id).state != RunState.RUNNING:
                raise NotFoundError(
                    f"no running run {run_id!r:.40}: name a collector RUN:WORKER as GET /api/v1/collectors lists it"
                )
            if self.collectors <= self.min_collectors:
                raise ConflictError(f"the pool keeps at least {self.min_collectors} collector slot(s)")
            worker = cluster.remove_collector(worker_id)
            self.collectors -= 1
        self._wake.set()
        return {**worker.to_dict(), "worker_id": f"{run_id}:{worker.worker_id}", "run": run_id}

    def workers(self, kind: str) -> List[Dict[str, Any]]:
        with self._lock:
            clusters = dict(self.clusters)
        return [
            {**w.to_dict(), "worker_id": f"{run_id}:{w.worker_id}", "run": run_id}
            for run_id, cluster in clusters.items()
            for w in cluster.workers_of(kind)
        ]

    def pool(self) -> Dict[str, Any]:
        with self._lock:
            running = [self.clusters[r.run_id] for r in self.records if r.state == RunState.RUNNING]
            return {
                "learners": self.learners,
                "collectors": self.collectors,
                "min_collectors": self.min_collectors,
                "held": {
                    "learners": sum(c.held("learner") for c in running),
                    "collectors": sum(c.held("collector") for c in running),
                },
                "runs": {s.value: sum(r.state == s for r in self.records) for s in RunState},
                "busy_seconds": round(self.busy_seconds, 3),
                "available_seconds": round(self.available_seconds, 3),
                "busy_fraction": self.busy_seconds / self.available_seconds if self.available_seconds else None,
            }

    # ---- the loop -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._loop = threading.Thread(target=self._run_loop, name="service-pool", daemon=True)
        self._loop.start()

    def _run_loop(self) -> None:
        last = time.monotonic()
        while not self._closing.is_set():
            self._wake.wait(TICK)
            self._wake.clear()
            now = time.monotonic()
            try:
                with self._lock:
                    if self._closing.is_set():
                        break
                    self._schedule()
                    self._count(now - last)
            except Exception:  # a bug must not stop the pool for every run: logged whole, the next tick tries again
                logger.exception("service: the pool's loop failed a tick")
            last = now

    def _count(self, seconds: float) -> None:
        """Slot-seconds available and held by a running worker, while any run runs or waits."""
        if not any(r.state in (RunState.RUNNING, RunState.QUEUED) for r in self.records):
            return
        running = [self.clusters[r.run_id] for r in self.records if r.state == RunState.RUNNING]
        self.available_seconds += (self.learners + self.collectors) * seconds
        self.busy_seconds += min(self.learners + self.collectors, sum(c.alive() for c in running)) * seconds

    def _schedule(self) -> None:
        running = [r for r in self.records if r.state == RunState.RUNNING]
        queued = [r for r in self.records if r.state == RunState.QUEUED]
        claims = [Claim(r.run_id, r.weight, True) for r in running] + [Claim(r.run_id, r.weight, False) for r in queued]
        shares = fair_share(claims, self.learners, self.collectors, self.min_collectors)
        for record in running:  # above its share: give one back per tick and run
            cluster = self.clusters[record.run_id]
            if cluster.keeping() > shares.get(record.run_id, 0):
                cluster.retire_collector()
        held = lambda role: sum(self.clusters[r.run_id].held(role) for r in running)  # noqa: E731
        free_learners, free = self.learners - held("learner"), self.collectors - held("collector")
        with self._counting:
            if self._burst is not None:
                now, (first, latest) = time.monotonic(), self._burst
                if (self._in_flight or now - latest < SETTLE) and now - first < SETTLE_MAX:
                    queued = []  # one is being compiled, or more may follow at once: start none of them yet
                elif not self._in_flight:
                    self._burst = None
        for record in queued:
            if record.run_id not in shares or free_learners < 1 or free < self.min_collectors:
                continue
            wanted = min(shares[record.run_id], free)
            if self._start(record, wanted):
                free_learners, free = free_learners - 1, free - wanted
                running.append(record)
        for record in running:  # below its share: free slots first to the runs furthest below
            cluster = self.clusters[record.run_id]
            want = shares.get(record.run_id, 0) - cluster.keeping()
            for _ in range(max(0, min(want, free))):
                cluster.grant("collector")
                free -= 1

    def _start(self, record: RunRecord, collectors: int) -> bool:
        """Start ``record``'s training with a learner and ``collectors`` collectors; False: it failed to start."""
        try:
            try:
                cluster = HostedCluster(record, self.dir, self.add_slot, resume=record.started)
            except ConfigError as exc:
                if not record.started or "no saved coordinator state" not in str(exc):
                    raise
                logger.warning("service: %s: nothing saved to resume; starting it afresh", record.run_id)
                cluster = HostedCluster(record, self.dir, self.add_slot, resume=False)
        except (ParallelRLError, OSError) as exc:  # a config changed on disk since, a store it cannot use
            self._end(record, RunState.FAILED, f"did not start: {exc}")
            return False
        for role in ["learner"] + ["collector"] * collectors:
            cluster.grant(role)
        self.clusters[record.run_id] = cluster
        record.state, record.started = RunState.RUNNING, True
        thread = threading.Thread(target=self._train, args=(record, cluster), name=record.run_id, daemon=True)
        self._threads[record.run_id] = thread
        thread.start()
        logger.info("service: %s started with %d collector(s) at %s", record.run_id, collectors, cluster.url)
        self._save()
        return True

    def _train(self, record: RunRecord, cluster: HostedCluster) -> None:
        """The run's thread: its launcher's loop until the training ends, then the run's end in the record."""
        try:
            code: Optional[int] = cluster.run()
            failure = ""
        except Exception as exc:  # one run's fault must not take the service (and the other runs) down
            logger.exception("service: %s failed", record.run_id)
            code, failure = None, f"{type(exc).__name__}: {exc}"
        c = cluster.coordinator
        with self._lock:
            record.last = _numbers(c.summary())
            if self._closing.is_set() and record.run_id not in self._stop_asked and not failure:
                self._save()  # the service stops: the run stays running in the record, resumed next time
            elif failure or c.state == "failed":
                self._end(record, RunState.FAILED, failure or c.reason)
            elif c.state == "solved":  # solved first, stopped after: it solved
                self._end(record, RunState.SOLVED, c.reason)
            else:
                self._end(record, RunState.STOPPED, self._stop_asked.get(record.run_id, c.reason))
        logger.info("service: %s ended %s (exit code %s)", record.run_id, record.state.value, code)
        self._wake.set()

    def _end(self, record: RunRecord, state: RunState, reason: str) -> None:
        record.state, record.reason = state, reason
        self._save()

    def _save(self) -> None:
        save_records(self.dir, self.records, self._next)

    def close(self) -> None:
        """SIGINT/SIGTERM: every running run saves its state and stops (resumed when the service starts again)."""
        with self._lock:
            self._closing.set()
            clusters = list(self.clusters.values())
        self._wake.set()
        for cluster in clusters:
            cluster.request_stop("SIGTERM")
        for thread in list(self._threads.values()):  # each run's shutdown has deadlines of its own (the launcher's)
            thread.join(MAX_LEARNER_GRACE + 30.0)
            if thread.is_alive():
                logger.error("service: %s did not stop within %.0fs; leaving it", thread.name, MAX_LEARNER_GRACE + 30)
        if self._loop is not None:
            self._loop.join(5.0)
        self.dir_lock.release()


def saved_curve(directory: str) -> List[Dict[str, Any]]:
    """The eval history of the newest coordinator state a run saved in its store (``directory``/shared), read
    through the store's validating loader; [] when it has none or it cannot be read (logged)."""
    from ..storage import newest_state

    try:
        state = newest_state(os.path.join(directory, "shared"))
    except (ParallelRLError, OSError) as exc:
        logger.warning("service: no curve from %s: %s", directory, exc)
        return []
    history = state.get("eval_history") if state is not None else None
    return [p for p in history if isinstance(p, dict)] if isinstance(history, list) else []


def _numbers(summary: Dict[str, Any]) -> Dict[str, Any]:
    keys = ("env_steps", "train_iter", "last_eval_return", "best_eval_return", "state", "reason")
    return {k: summary.get(k) for k in keys}
