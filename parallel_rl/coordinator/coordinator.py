"""The coordinator (master): worker registry, task table, replay index, commander.

Slaves talk to it through ``coordinator_app`` (HTTP); every method here is
plain Python so tests can drive it directly. Locking: ``self._lock`` guards
registry/task/counter updates; HTTP calls to slaves are made outside it.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import hmac
import logging
import math
import secrets
import threading
import time
from typing import Any, Dict, List, Optional
from urllib.parse import urlparse

from easydict import EasyDict

from ..errors import ParallelRLError, PeerUnavailableError, ProtocolError, RemoteError, StorageError
from ..protocol import LONG_POLL_RETRY_AFTER, MAX_COUNTER
from ..storage import SharedStorage, StorageHealth
from ..transport import TOKEN_ENV, ApiError, HttpClient, slave_proof
from .commander import create_parallel_commander
from .messages import MessageTable
from .replay import ReplayIndex
from .tasks import Task, TaskKind, TaskState, TaskTable
from .workers import Worker, WorkerRegistry, WorkerState

logger = logging.getLogger(__name__)

# a temp file on the shared disk untouched this long was left by a writer killed mid-write
TEMP_FILE_MAX_AGE = 600.0
TEMP_SWEEP_INTERVAL = 60.0

KINDS = ("collector", "learner")
# metadata requests served at once (body read, checked, applied, answered; a long-poll's wait not counted):
# more threads at once only take turns on the GIL, each holding the coordinator's and the replay index's
# locks longer, and every other request (GET /api/v1/cluster) waited behind all of them
ADMITTED = 2
# workers let go at once when the coordinator stops (release_workers)
RELEASE_THREADS = 32
ADMISSION_TIMEOUT = 10.0
# a worker that refuses this many tasks in a row is marked lost
MAX_REFUSALS = 3


class CoordinatorState:
    RUNNING = "running"
    SOLVED = "solved"
    STOPPED = "stopped"  # a budget ran out
    FAILED = "failed"
    CLOSED = "closed"


def check_address(address: Any) -> str:
    if not isinstance(address, str):
        raise ApiError(400, "bad_request", f"field 'address' must be a string, got {type(address).__name__}")
    parsed = urlparse(address)
    if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.port is None:
        raise ApiError(400, "bad_request", f"address must look like http://HOST:PORT, got {address!r}")
    return address.rstrip("/")


class Coordinator:
    def __init__(self, cfg: EasyDict, storage: SharedStorage, token: Optional[str] = None, commander=None):
        self.cfg = cfg
        self.storage = storage
        self.storage.health.name = "coordinator"  # its own snapshots; the workers report theirs
        self.token = token
        self.advertise_url: Optional[str] = cfg.parallel.coordinator.advertise or None
        self.tasks = TaskTable()
        self.workers = WorkerRegistry(retention=cfg.parallel.coordinator.worker_retention,
                                      max_ended=cfg.parallel.coordinator.max_ended_workers)
        self.replay = ReplayIndex(cfg.policy.other.replay_buffer, storage,
                                  grace_seconds=cfg.parallel.coordinator.chunk_grace_seconds)
        # the data flow the policy asks for: on-policy data is used as whole segments of recent versions
        self.on_policy = bool(cfg.policy.on_policy)
        self.random_collect_size = int(cfg.policy.get("random_collect_size", 0) or 0)  # only off-policy types have it
        # on-policy: env steps each collector sent per policy version (its share of the next segment)
        self._segment_steps: Dict[int, Dict[str, int]] = {}
        # on-policy: a new learner task starts a new round of segments (its predecessor may have taken the
        # current version's segment with it); collectors count what they sent per (version, round)
        self.segment_round = 0
        self.commander = commander or create_parallel_commander(cfg)
        self.commander.coordinator = self
        self._lock = threading.RLock()
        self._wake = threading.Event()
        # notified when the learner advances (collectors waiting for their allowance wake up)
        self._progress = threading.Condition()
        self._closing = threading.Event()
        # notified on every kick (task ends, workers joining and leaving): wind_down waits on it
        self._changed = threading.Condition()
        # long-polls each hold a server thread: at most long_poll_slots wait at once (the server has that
        # many threads beyond the ones for short calls, so heartbeats are always answered)
        self._long_polls = threading.BoundedSemaphore(int(cfg.parallel.coordinator.long_poll_slots))
        self.long_polls_refused = 0
        self.admission = Admission(ADMITTED, ADMISSION_TIMEOUT)
        self.messages = MessageTable(self)
        # the store as the message checks see it: unhealthy from a fault while checking a message (the message
        # is answered `unavailable` and sent again) until a chunk check reads the store again; the snapshots'
        # writes (storage.health) may work meanwhile, and must not hide that reads fail
        self.check_health = StorageHealth(None)  # its faults are logged by storage.health (_store_op), once
        self.done_event = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.state = CoordinatorState.RUNNING
        self.reason = ""
        self.started_at = time.time()
        self._t0 = time.monotonic()
        self.env_steps = 0
        self.episodes = 0
        self.train_iter = 0
        self.policy_version = -1
        self.policy_published_at: Dict[int, float] = {}
        # seconds from a policy's announcement to the first chunk stamped with it
        self.policy_propagation: List[float] = []
        self.learn_info: Dict[str, Any] = {}
        self.last_eval_return = math.nan
        self.best_eval_return = math.nan
        self.eval_history: List[Dict[str, Any]] = []
        self.throughput_history: List[Dict[str, Any]] = []
        # persistence: snapshots of this state on the shared disk (see save_state / resume)
        self._save_lock = threading.Lock()
        self._state_seq = 0
        self._snapshot_thread: Optional[threading.Thread] = None
        self.state_saved_at: Optional[float] = None
        self.resumed_from: Optional[int] = None
        # after a resume: worker id -> the tasks the snapshot says it runs, until its first heartbeat says
        # which it really runs (a task it ended after the snapshot reported its end to the old process)
        self._unconfirmed: Dict[str, List[str]] = {}

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> "Coordinator":
        self._thread = threading.Thread(target=self._control_loop, name="coordinator-control", daemon=True)
        self._thread.start()
        self._snapshot_thread = threading.Thread(target=self._snapshot_loop, name="coordinator-snapshot",
                                                 daemon=True)
        self._snapshot_thread.start()
        return self

    @property
    def system_shutdown_flag(self) -> bool:
        return self.state != CoordinatorState.RUNNING

    def kick(self) -> None:
        """Wake the commander (something changed)."""
        self._wake.set()
        with self._changed:
            self._changed.notify_all()
        if self.on_policy:  # the collectors may have changed: their shares of a segment too
            self._notify_progress()

    def finish(self, state: str, reason: str) -> None:
        """Training is over (solved, budget, failure): stop handing out work."""
        with self._lock:
            if self.state != CoordinatorState.RUNNING:
                return
            self.state, self.reason = state, reason
        logger.info("coordinator: %s: %s", state, reason)
        self.done_event.set()
        self.replay.wake_waiters()
        self._notify_progress()
        self.kick()

    def close(self, notify_workers: bool = True) -> None:
        """Stop the control loop and tell every active worker to disconnect (best effort)."""
        if self._closing.is_set():
            return
        self.finish(CoordinatorState.CLOSED, "coordinator closed")
        self._closing.set()
        self.kick()
        if self._thread is not None:
            self._thread.join(5.0)
        if self._snapshot_thread is not None:
            self._snapshot_thread.join(5.0)
            self.save_state()  # the final state: a resume starts exactly here
        if notify_workers:
            for worker in self.workers.list(active_only=True):
                try:
                    worker.client.post("/slave/v1/disconnect", {"reason": self.reason}, timeout=1.0, retries=0)
                except ParallelRLError as exc:
                    logger.debug("coordinator: %s did not take the disconnect: %s", worker.worker_id, exc)

    def wind_down(self, timeout: float) -> bool:
        """Stop handing out work, let every worker go, and wait up to ``timeout`` s until none is active: their
        running tasks wrap up and the final reports (last chunks, learn info, task ends) arrive while the
        server still serves. Call before closing the server; True when every worker left in time."""
        self.finish(CoordinatorState.CLOSED, "coordinator closing")
        self.release_workers()
        with self._changed:
            left = self._changed.wait_for(lambda: not self.workers.list(active_only=True), timeout=timeout)
        if not left:
            logger.warning("coordinator: %s still active %gs after being let go; closing without their final "
                           "reports (parallel.coordinator.final_report_timeout)",
                           [w.worker_id for w in self.workers.list(active_only=True)], timeout)
        return left

    def release_workers(self) -> None:
        """Training is over and this coordinator serves on: remove every active worker as
        ``DELETE /collectors/<id>`` does (running tasks wrap up and report, then the worker is let go and is
        ``gone``); slaves that registered themselves exit. The workers are let go side by side: each call waits
        for its slave (or retries once after a refusal), and one after the other 256 unreachable collectors
        held a stopping coordinator for 26 s."""
        workers = self.workers.list(active_only=True)
        if workers:
            with concurrent.futures.ThreadPoolExecutor(min(RELEASE_THREADS, len(workers)),
                                                       thread_name_prefix="release") as pool:
                list(pool.map(self._release, workers))

    def _release(self, worker: Worker) -> None:
        try:
            self.remove_worker(worker.worker_id, reason=f"training is over: {self.reason}")
        except ApiError as exc:  # it left on its own meanwhile
            logger.debug("coordinator: %s needs no release: %s", worker.worker_id, exc)

    def _control_loop(self) -> None:
        ttl = float(self.cfg.parallel.coordinator.heartbeat_ttl)
        tick = max(0.05, min(0.5, ttl / 4))
        next_sweep = 0.0
        while not self._closing.is_set():
            try:
                self._reap(ttl)
                self._check_budgets()
                self.commander.step()
                self.replay.collect_garbage()
                self._sample_throughput()
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + TEMP_SWEEP_INTERVAL
                    removed = self.storage.remove_stale_temp_files(TEMP_FILE_MAX_AGE)
                    if removed:
                        logger.info("coordinator: removed %d temp file(s) left by killed writers", removed)
                    orphans = self.replay.remove_orphans(float(self.cfg.parallel.coordinator.orphan_chunk_max_age))
                    if orphans:
                        logger.info("coordinator: removed %d chunk file(s) no replay index knew, written over "
                                    "%gs ago (by killed collectors, or announced after the last snapshot of a "
                                    "killed coordinator)", orphans,
                                    float(self.cfg.parallel.coordinator.orphan_chunk_max_age))
            except Exception:  # the control loop must survive any single bad step
                logger.exception("coordinator: control loop step failed")
            self._wake.wait(tick)
            self._wake.clear()

    def _reap(self, ttl: float) -> None:
        for worker in self.workers.expired(ttl):
            self.mark_lost(worker, f"no heartbeat for {ttl:g}s")
        for worker in self.workers.forget_ended():
            self.messages.forget_worker(worker.worker_id)
            logger.debug("coordinator: forgot %s (%s)", worker.worker_id, worker.state.value)

    def _check_budgets(self) -> None:
        b = self.cfg.parallel.commander
        if b.max_env_step and self.env_steps >= b.max_env_step:
            self.finish(CoordinatorState.STOPPED, f"env step budget {b.max_env_step} used up")
        elif b.max_train_iter and self.train_iter >= b.max_train_iter:
            self.finish(CoordinatorState.STOPPED, f"train iteration budget {b.max_train_iter} used up")
        elif b.max_seconds and self.uptime >= b.max_seconds:
            self.finish(CoordinatorState.STOPPED, f"time budget {b.max_seconds:g}s used up")

    def _sample_throughput(self) -> None:
        now = self.uptime
        if self.throughput_history and now - self.throughput_history[-1]["t"] < 1.0:
            return
        self.throughput_history.append({"t": round(now, 3), "env_steps": self.env_steps, "train_iter": self.train_iter})
        del self.throughput_history[:-600]

    @property
    def uptime(self) -> float:
        return time.monotonic() - self._t0

    # ---- membership --------------------------------------------------------------------
    def add_worker(self, kind: str, address: Any, preferred_id: Optional[str] = None) -> Worker:
        """Connect to a running slave at ``address`` and register it (409 if already registered), named
        ``preferred_id`` when that id is free."""
        if kind not in KINDS:
            raise ApiError(404, "not_found", f"unknown worker kind {kind!r}")
        address = check_address(address)
        wcfg = self.cfg.parallel.worker
        health = self._prove_slave(kind, address)
        client = HttpClient(address, self.token, timeout=wcfg.request_timeout, max_retries=1)
        worker = self.workers.register(kind, address, client, preferred_id)
        worker.pid = health.get("pid") if isinstance(health.get("pid"), int) else None
        try:
            client.post("/slave/v1/connect", {
                "worker_id": worker.worker_id,
                "coordinator": self.advertise_url,
                "config": self.cfg,
                "shared_dir": self.storage.root,
                "heartbeat_interval": float(wcfg.heartbeat_interval),
                "heartbeat_ttl": float(self.cfg.parallel.coordinator.heartbeat_ttl),
                "lease": worker.lease,
            })
        except ParallelRLError as exc:
            with self._lock:
                worker.state = WorkerState.GONE
            self.kick()
            raise ApiError(422, "unreachable", f"{kind} at {address} refused to connect: {exc}") from None
        with self._lock:
            if worker.state == WorkerState.CONNECTING:
                worker.state = WorkerState.IDLE
                worker.last_heartbeat = time.monotonic()  # the lease starts now, not when connecting began
        logger.info("coordinator: registered %s at %s", worker.worker_id, address)
        if self.system_shutdown_flag:  # joined after the run ended (a coordinator serving on): let it go now
            self._release(worker)
        self.kick()
        return worker

    def _prove_slave(self, kind: str, address: str) -> Dict[str, Any]:
        """The health answer of the ``kind`` slave at ``address``, once it proved it holds the cluster token;
        ApiError 400/422 otherwise.

        Nothing is sent to an address before it proves it is one of ours: the health call carries no token
        but a random challenge, and only a slave holding the token, advertising ``address``, can answer it
        (:func:`~parallel_rl.interaction.http.slave_proof`). Errors say what happened in our words; what a
        stranger answered is never echoed."""
        wcfg = self.cfg.parallel.worker
        probe = HttpClient(address, None, timeout=wcfg.request_timeout, max_retries=1)
        challenge = secrets.token_urlsafe(24)
        try:
            health = probe.get("/slave/v1/health", params={"challenge": challenge})
        except PeerUnavailableError:
            raise ApiError(422, "unreachable", f"cannot reach a {kind} at {address} (no connection, or no answer "
                                               f"within {float(wcfg.request_timeout):g}s)") from None
        except ProtocolError as exc:  # it answered, but not as a slave of ours
            answered = f"HTTP {exc.status}" if exc.status else "something"
            raise ApiError(422, "unreachable", f"{address} is not a parallel_rl {kind}: its health endpoint "
                                               f"answered {answered} with a body that is not a slave's (non-JSON, "
                                               f"or another schema); is this a parallel_rl server?") from None
        finally:
            probe.close()
        if not isinstance(health, dict) or health.get("kind") not in KINDS:
            raise ApiError(422, "unreachable", f"{address} is not a parallel_rl {kind}: its health answer is not "
                                               f"a slave's (is this a parallel_rl server?)")
        if health["kind"] != kind:
            raise ApiError(400, "bad_request", f"{address} is a {health['kind']}, not a {kind}")
        if self.token:
            if health.get("address") != address:
                raise ApiError(422, "unproven", f"the {kind} at {address} advertises another address: add it by "
                                                f"the address it prints (`serving on URL`), or start it with "
                                                f"--advertise {address}")
            proof = health.get("proof")
            if not isinstance(proof, str) or not hmac.compare_digest(
                    proof.encode(), slave_proof(self.token, challenge, address).encode()):
                raise ApiError(422, "unproven", f"the {kind} at {address} did not prove it holds the cluster token "
                                                f"(start it with this coordinator's {TOKEN_ENV}); nothing was "
                                                f"sent to it")
        return health

    def increase_collector(self, address: Any) -> Worker:
        """Add a running collector slave (DI-engine's ``deal_with_increase_collector``): what
        ``POST /api/v1/collectors`` does."""
        return self.add_worker("collector", address)

    def decrease_collector(self, worker_id: str) -> Worker:
        """Remove a collector (DI-engine's ``deal_with_decrease_collector``): what
        ``DELETE /api/v1/collectors/<worker_id>`` does."""
        return self.remove_worker(worker_id, "collector")

    def heartbeat(self, worker_id: str, lease: Optional[str], problems: Optional[List[str]] = None,
                  tasks: Optional[List[str]] = None, ranks: Optional[List[Dict[str, Any]]] = None,
                  storage: Optional[Dict[str, Any]] = None) -> Worker:
        """Renew ``worker_id``'s lease; 404 when it is not registered with that lease (it registers again).

        ``tasks``: the ids of the tasks the worker holds (queued, running, or with an end report not yet
        delivered). After a resume they settle what the snapshot could not know: a task the snapshot has
        running on this worker that the worker no longer holds ended while the coordinator was down (its
        report went to the old process), so it fails and is issued again; a task the worker runs that this
        coordinator never issued (issued after the snapshot) is cancelled through the control block.

        ``storage``: the worker's report on the shared store (checked by ``check_health_report``): shown under
        the worker and in the cluster summary; a healthy one ends the worker's backoff."""
        worker = self.workers.heartbeat(worker_id, lease)
        if worker is None:
            removed = self.workers.with_lease(worker_id, lease)
            if removed is not None and removed.state == WorkerState.GONE:
                # removed (DELETE, training over) and about to be let go: its last reports still count, and
                # a 404 would make it register again before the disconnect reaches it
                return removed
            raise ApiError(404, "not_found", f"worker {worker_id!r:.60} is not registered with this lease "
                                             f"(register again)")
        if problems is not None and problems[-20:] != worker.problems:  # unchanged (the usual case): no lock
            with self._lock:
                if problems and problems != worker.problems:
                    logger.error("coordinator: %s reports: %s", worker_id, "; ".join(problems[-3:]))
                worker.problems = problems[-20:]
        if ranks is not None:  # a LearnerAggregator's ranks (rank, pid, state)
            worker.ranks = ranks
        if tasks is not None:
            self._reconcile_tasks(worker, set(tasks))
        if storage is not None:
            self._storage_report(worker, storage)
        return worker

    def _storage_report(self, worker: Worker, report: Dict[str, Any]) -> None:
        was = worker.storage.healthy
        if worker.storage.update_from(report) and was != worker.storage.healthy:
            if was:
                logger.error("coordinator: %s reports the shared store failing: %s", worker.worker_id,
                             worker.storage.error)
            else:
                logger.info("coordinator: %s reports the shared store working again", worker.worker_id)

    def storage_summary(self) -> Dict[str, Any]:
        """The shared store's health as the workers (and the coordinator's own snapshots) see it: unhealthy
        while any active worker reports it failing; ``since`` the earliest fault of those, ``error`` its."""
        failing = [("coordinator", h) for h in (self.storage.health, self.check_health) if not h.healthy][:1]
        failing += [(w.worker_id, w.storage) for w in self.workers.list(active_only=True) if not w.storage.healthy]
        first = min(failing, key=lambda f: f[1].since or 0.0, default=None)
        return {"healthy": not failing, "error": first[1].error if first else None,
                "since": first[1].since if first else None, "workers": [name for name, _ in failing]}

    def _reconcile_tasks(self, worker: Worker, held: set) -> None:
        with self._lock:
            lost = [t for t in self._unconfirmed.pop(worker.worker_id, []) if t not in held]
            known = {t: self.tasks.get(t) for t in held}
            worker.stale_tasks = sorted(t for t, task in known.items()
                                        if task is None or task.worker_id != worker.worker_id)
        for task_id in lost:
            self._end_task(task_id, TaskState.FAILED, error=f"{worker.worker_id} no longer runs it (it ended while "
                                                             f"the coordinator was restarting)")
        if worker.stale_tasks:
            logger.info("coordinator: asking %s to stop %s (issued by the coordinator before its restart)",
                        worker.worker_id, worker.stale_tasks)

    def get_worker(self, worker_id: str, kind: Optional[str] = None) -> Worker:
        """The worker (of ``kind``, when given), or 404."""
        worker = self.workers.get(worker_id)
        if worker is None or (kind is not None and worker.kind != kind):
            raise ApiError(404, "not_found", f"no {kind or 'worker'} {worker_id!r}")
        return worker

    def remove_worker(self, worker_id: str, kind: Optional[str] = None, reason: str = "removed") -> Worker:
        """Deregister: no new tasks; a running task is asked to wrap up (its data stays)."""
        worker = self.get_worker(worker_id, kind)
        if not worker.state.active:
            raise ApiError(409, "conflict", f"{worker_id} is already {worker.state.value}")
        with self._lock:
            running = worker.running_tasks
            worker.state = WorkerState.LEAVING if running else WorkerState.GONE
        logger.info("coordinator: removing %s (%s); running tasks: %s", worker_id, reason, running or "none")
        for task_id in running:
            try:
                worker.client.delete(f"/slave/v1/tasks/{task_id}", timeout=2.0, retries=0)
            except ParallelRLError as exc:
                if isinstance(exc, RemoteError) and exc.status == 404:
                    # it ended the task just now: its end report (with the task's result) is on its way
                    logger.debug("coordinator: %s already ended %s; awaiting its report", worker_id, task_id)
                    continue
                logger.warning("coordinator: %s did not take the stop for %s: %s", worker_id, task_id, exc)
                self._end_task(task_id, TaskState.CANCELLED, error=f"{worker_id} removed: {exc}")
        if not running:
            self._disconnect(worker, reason)
        self.kick()
        return worker

    def deregister(self, worker_id: str, kind: Optional[str] = None, lease: Optional[str] = None) -> Worker:
        """A slave leaving on its own (SIGTERM): it reported its tasks already. Needs the worker's lease."""
        worker = self.get_worker(worker_id, kind)
        if self.workers.heartbeat(worker_id, lease) is None:
            raise ApiError(404, "not_found", f"{worker_id} is not registered with this lease")
        with self._lock:
            running = worker.running_tasks
            worker.state = WorkerState.GONE
        for task_id in running:
            self._end_task(task_id, TaskState.CANCELLED, error=f"{worker_id} left")
        logger.info("coordinator: %s deregistered", worker_id)
        self.kick()
        return worker

    def _disconnect(self, worker: Worker, reason: str) -> None:
        with self._lock:
            worker.state = WorkerState.GONE
        try:
            # a slave that misses this call hears it from its next heartbeat's answer (state "gone"), as long
            # as this coordinator serves; a stopping one does not wait for that, so the call is retried once
            worker.client.post("/slave/v1/disconnect", {"reason": reason}, timeout=3.0, retries=1)
        except ParallelRLError as exc:
            logger.debug("coordinator: %s disconnect not acknowledged: %s", worker.worker_id, exc)

    def mark_lost(self, worker: Worker, reason: str) -> None:
        with self._lock:
            if not worker.state.active:
                return
            worker.state = WorkerState.LOST
            running = worker.running_tasks
        logger.warning("coordinator: %s at %s lost (%s); failing %s", worker.worker_id, worker.address, reason,
                       running or "no task")
        for task_id in running:
            self._end_task(task_id, TaskState.FAILED, error=f"{worker.worker_id} lost: {reason}")
        self.kick()

    def process_exited(self, pid: int, reason: str) -> Optional[Worker]:
        """A launcher saw the worker process ``pid`` (on this host) die: mark it lost now, not at lease expiry."""
        worker = next((w for w in self.workers.list(active_only=True) if w.pid == pid), None)
        if worker is not None:
            self.mark_lost(worker, reason)
        return worker

    # ---- tasks ----------------------------------------------------------------------------
    def assign(self, task: Task, worker: Worker) -> bool:
        """Hand ``task`` to ``worker`` over HTTP. Refused (4xx): the task fails, the worker stays (lost after
        ``MAX_REFUSALS`` refusals in a row); unreachable or 5xx: the task fails and the worker is lost."""
        with self._lock:
            if not worker.assignable:
                return False
            self.tasks.start(task, worker.worker_id)
            if task.kind == TaskKind.EVALUATOR:
                worker.eval_task = task.task_id
            else:
                worker.current_task = task.task_id
                worker.state = WorkerState.BUSY
            if self.on_policy and task.kind == TaskKind.LEARNER:
                self.segment_round += 1
                self._segment_steps.clear()
        payload = {"task_id": task.task_id, "kind": task.kind.value, "spec": task.spec}
        try:  # a retried POST is safe: slaves acknowledge a task id they have seen without running it again
            worker.client.post("/slave/v1/tasks", payload, retries=1)
        except RemoteError as exc:
            if exc.status >= 500:
                self.mark_lost(worker, f"failed on task {task.task_id}: {exc}")
                return False
            # the slave is alive and answered: it refused this task. Fail the task, keep the worker,
            # unless it refuses every task (then it is of no use, and retrying would spin)
            worker.refusals += 1
            logger.error("coordinator: %s at %s refused %s: %s", worker.worker_id, worker.address, task.task_id, exc)
            self._end_task(task.task_id, TaskState.FAILED, error=f"{worker.worker_id} refused it: {exc}")
            if worker.refusals >= MAX_REFUSALS:
                self.mark_lost(worker, f"refused {worker.refusals} tasks in a row, the last: {exc}")
            return False
        except ParallelRLError as exc:
            logger.error("coordinator: %s at %s unreachable for %s: %s", worker.worker_id, worker.address,
                         task.task_id, exc)
            self.mark_lost(worker, f"refused task {task.task_id}: {exc}")  # unreachable
            return False
        worker.refusals = 0
        logger.debug("coordinator: %s -> %s %s", task.task_id, worker.worker_id, task.spec)
        return True

    def _end_task(self, task_id: str, state: TaskState, result: Optional[dict] = None,
                  error: Optional[str] = None, store_fault: bool = False) -> Optional[Task]:
        with self._lock:
            task = self.tasks.end(task_id, state, result=result, error=error)
            if task is None:
                return None
            worker = self.workers.get(task.worker_id) if task.worker_id else None
            if worker is not None:
                if worker.eval_task == task_id:
                    worker.eval_task = None
                if worker.current_task == task_id:
                    worker.current_task = None
                    if worker.state == WorkerState.BUSY:
                        worker.state = WorkerState.IDLE
                worker.tasks_done += 1
                leaving_done = worker.state == WorkerState.LEAVING and not worker.running_tasks
            else:
                leaving_done = False
        log = logger.info if state != TaskState.FINISHED or task.kind == TaskKind.LEARNER else logger.debug
        log("coordinator: %s %s%s", task_id, state.value, f" ({error})" if error else "")
        if state == TaskState.FAILED:
            self.commander.on_task_failed(task, store_fault=store_fault)
        if task.kind == TaskKind.EVALUATOR and state == TaskState.FINISHED and result:
            self._on_eval_result(task, result)
        if state == TaskState.FINISHED and hasattr(self.commander, "on_task_finished"):
            self.commander.on_task_finished(task)
        if leaving_done:
            self._disconnect(worker, "removed")
        self.kick()
        return task

    def _on_eval_result(self, task: Task, result: dict) -> None:
        mean = result.get("eval_episode_return_mean")
        if mean is None:  # checked by _check_eval_result: no episode finished (NaN goes as null)
            logger.warning("coordinator: eval of policy %s (%s) has no mean return (%s episode(s)); not counted",
                           task.spec.get("policy_version"), task.task_id, result.get("episodes", 0))
            return
        mean = float(mean)
        with self._lock:
            self.last_eval_return = mean
            if math.isnan(self.best_eval_return) or mean > self.best_eval_return:
                self.best_eval_return = mean
            self.eval_history.append({"t": round(self.uptime, 3), "policy_version": task.spec.get("policy_version"),
                                      "env_steps": self.env_steps, "train_iter": self.train_iter,
                                      "eval_return": mean})
            del self.eval_history[:-10_000]
        stop_value = float(self.cfg.env.stop_value)
        logger.info("coordinator: eval of policy %s: mean return %.1f (stop value %g)",
                    task.spec.get("policy_version"), mean, stop_value)
        # a battle evaluation says itself whether its stop rule (win rate and per-side bounds) holds
        if (result.get("episodes", 0) >= task.spec.get("n_episode", 0) and mean >= stop_value
                and result.get("stop", True) is not False):
            self.finish(CoordinatorState.SOLVED, f"eval return {mean:.1f} >= stop value {stop_value:g} "
                                                 f"(policy version {task.spec.get('policy_version')})")

    def control_for(self, worker: Worker) -> Dict[str, Any]:
        allowed = None if self.on_policy else self.allowed_env_steps()
        return {
            "policy_version": self.policy_version,
            "epsilon": self.commander.epsilon(self.env_steps),
            # off-policy warm-up: collectors act with random actions until the cluster has this many env steps
            "random_collect": self.env_steps < self.random_collect_size,
            "stop": self.system_shutdown_flag,
            "state": worker.state.value,
            "env_steps": self.env_steps,
            "allowed_env_steps": None if allowed is None else int(allowed),
            # on-policy: env steps this collector may collect in all with policy `policy_version`
            "segment_env_steps": self.segment_steps_allowed(worker) if self.on_policy else None,
            "segment_round": self.segment_round,
            # tasks this coordinator does not know (issued before a restart, after the snapshot it resumed)
            "cancel_tasks": list(worker.stale_tasks),
        }

    # ---- replay ratio -------------------------------------------------------------------------
    def allowed_env_steps(self) -> Optional[float]:
        """How far collectors may run ahead of the learner (None: no limit).

        ``max(warmup_env_steps, policy.random_collect_size) + max_env_steps_per_update * train_iter``: collectors
        that outrun the learner only steal its CPU and fill the buffer with data
        it never trains on.
        """
        ratio = float(self.cfg.parallel.commander.max_env_steps_per_update)
        if ratio <= 0:
            return None
        warmup = max(float(self.cfg.parallel.commander.warmup_env_steps), float(self.random_collect_size))
        return warmup + ratio * self.train_iter

    def wait_for_allowance(self, timeout: float, policy_version: Optional[int] = None,
                           worker: Optional[Worker] = None, loaded_version: Optional[int] = None) -> bool:
        """Block a collector until it may collect ``allowance_grant`` steps again (the learner advanced), a
        policy newer than its ``policy_version`` is out (its first batch need not wait), or ``timeout``.

        Waking collectors for every few steps of allowance would cost a round trip per tiny chunk.
        On-policy: until a policy newer than ``policy_version`` is out, or the collector acts with the
        current one (``loaded_version``) and its share of the segment is not collected yet."""
        grant = int(self.cfg.parallel.commander.allowance_grant)

        def may_collect() -> bool:
            newer = policy_version is not None and self.policy_version > policy_version
            if self.on_policy:
                return (self.system_shutdown_flag or newer or (
                    worker is not None and loaded_version == self.policy_version
                    and self.segment_steps_allowed(worker) > self._segment_done(worker)[0]))
            allowed = self.allowed_env_steps()
            return (self.system_shutdown_flag or allowed is None or allowed - self.env_steps >= grant
                    or newer)

        with self._progress:
            return self._progress.wait_for(may_collect, timeout=max(0.0, min(timeout, 10.0)))

    def _notify_progress(self) -> None:
        with self._progress:
            self._progress.notify_all()

    # ---- on-policy segments ------------------------------------------------------------------
    def segment_share(self) -> int:
        """Env steps each active collector contributes to one segment: ``policy.collect.n_sample`` split
        among them, rounded up to whole vector steps (a collector that leaves raises the others' share)."""
        collectors = sum(1 for w in self.workers.list("collector", active_only=True))
        envs = int(self.cfg.env.collector_env_num)
        per_collector = math.ceil(int(self.cfg.policy.collect.n_sample) / max(1, collectors))
        return math.ceil(per_collector / envs) * envs

    def _segment_done(self, worker: Worker) -> tuple:
        """(env steps of ``worker``, of all collectors) announced with the current policy version."""
        with self._lock:
            per_worker = self._segment_steps.get(self.policy_version, {})
            return per_worker.get(worker.worker_id, 0), sum(per_worker.values())

    def segment_steps_allowed(self, worker: Worker) -> int:
        """On-policy: the env steps ``worker`` may collect in all with the current policy version: its share,
        and no more than the segment still misses (a segment larger than ``n_sample`` would be taken before
        the rest arrives, and the rest thrown away). 0 before the learner published a first policy."""
        if self.policy_version < 0:
            return 0
        mine, total = self._segment_done(worker)
        missing = max(0, int(self.cfg.policy.collect.n_sample) - total)
        return min(self.segment_share(), mine + missing)

    def _count_segment_steps(self, worker: Worker, version: int, steps: int) -> None:
        with self._lock:
            per_worker = self._segment_steps.setdefault(version, {})
            per_worker[worker.worker_id] = per_worker.get(worker.worker_id, 0) + steps
            for old in [v for v in self._segment_steps if v < self.policy_version]:
                del self._segment_steps[old]

    # ---- metadata from slaves --------------------------------------------------------------
    def handle_metadata(self, worker_id: str, messages: List[Dict[str, Any]], **kw: Any) -> Dict[str, Any]:
        """Check a batch of messages from a slave, then apply the ones that passed (see MessageTable)."""
        return self.messages.handle_metadata(worker_id, messages, **kw)

    @contextlib.contextmanager
    def long_poll(self):
        """A long-poll slot (True), or False when all are taken: the caller answers at once. A request that
        waits gives up its turn (:class:`Admission`) first."""
        self.admission.leave()
        slot = self._long_polls.acquire(blocking=False)
        if not slot:
            with self._lock:
                self.long_polls_refused += 1
        try:
            yield slot
        finally:
            if slot:
                self._long_polls.release()

    # ---- learner data ---------------------------------------------------------------------
    def sample(self, worker_id: str, batch_size: int, batches: int, train_iter: int,
               priorities: Optional[Dict[str, Any]] = None, wait: float = 1.0,
               encoding: str = "json", lease: Optional[str] = None) -> Dict[str, Any]:
        """Batches of references for a learner, ``{"chunks", "batches"}`` (numbers as JSON lists, or packed
        with ``encoding="base64"``); waits up to ``wait`` s for enough data."""
        worker = self.heartbeat(worker_id, lease)
        if worker.kind != "learner":
            raise ApiError(409, "conflict", f"{worker_id} is a {worker.kind}; only learners sample batches")
        if not 0 <= train_iter <= MAX_COUNTER:
            raise ApiError(400, "bad_request", f"train_iter must be in [0, {MAX_COUNTER}], got {train_iter}")
        if priorities:
            try:
                self.replay.update_priorities(priorities["index"], priorities["uid"], priorities["priority"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ApiError(400, "bad_request", f"bad priorities: {exc}") from None
        with self._lock:
            worker.train_iter = max(worker.train_iter, train_iter)
            advanced = train_iter > self.train_iter
            self.train_iter = max(self.train_iter, train_iter)
        if advanced:
            self._notify_progress()
        if self.on_policy:
            return self._sample_segment(batch_size, train_iter, wait, encoding)
        lcfg = self.cfg.parallel.learner
        # the learner starts once the random warm-up is in the buffer (RL Zoo's learning_starts)
        min_size = max(batch_size, int(lcfg.min_buffer_size), self.random_collect_size)
        ratio = float(lcfg.max_updates_per_transition)

        def allowed() -> int:
            if self.system_shutdown_flag or self.replay.count() < min_size:
                return 0
            if ratio > 0:
                return max(0, int(ratio * self.replay.buffer.pushed) - self.replay.batches_served)
            return batches

        if wait > 0 and allowed() <= 0:
            with self.long_poll() as slot:
                if not slot:
                    return {"chunks": [], "batches": [], "retry_after": LONG_POLL_RETRY_AFTER}
                self.replay.wait_for(lambda: allowed() > 0 or self.system_shutdown_flag,
                                     timeout=max(0.0, min(wait, 10.0)))
        n = min(batches, allowed())
        return self.replay.sample(batch_size, n, train_iter, encoding) if n > 0 else {"chunks": [], "batches": []}

    def _sample_segment(self, size: int, train_iter: int, wait: float, encoding: str) -> Dict[str, Any]:
        """On-policy: one batch holding every row of the policy versions within ``max_staleness`` of the
        learner's ``train_iter``, once there are at least ``size`` of them (waits up to ``wait`` s)."""
        buffer = self.replay.buffer
        self.replay.wait_for(lambda: self.system_shutdown_flag or buffer.fresh_count(train_iter) >= size,
                             timeout=max(0.0, min(wait, 10.0)))
        if self.system_shutdown_flag:
            return {"chunks": [], "batches": []}
        return self.replay.sample(size, 1, train_iter, encoding)

    # ---- inspection ---------------------------------------------------------------------------
    def summary(self) -> Dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "workers": self.workers.counts(),
            "tasks": self.tasks.counts(),
            "tasks_forgotten": self.tasks.forgotten,
            "workers_forgotten": self.workers.forgotten,
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "train_iter": self.train_iter,
            "policy_version": self.policy_version,
            "last_eval_return": _num(self.last_eval_return),
            "best_eval_return": _num(self.best_eval_return),
            "stop_value": float(self.cfg.env.stop_value),
            "policy_propagation_ms": self._propagation_stats(),
            "learn_info": dict(self.learn_info),
            "uptime": round(self.uptime, 3),
            "started_at": self.started_at,
            "state_saved_at": self.state_saved_at,
            "resumed_from": self.resumed_from,
            "storage": self.storage_summary(),
            "exp_name": self.cfg.exp_name,
            "env_id": self.cfg.env.env_id,
        }

    def _propagation_stats(self) -> Dict[str, Any]:
        with self._lock:
            delays = sorted(self.policy_propagation)
        if not delays:
            return {"count": 0, "p50": None, "p95": None, "max": None}
        pick = lambda q: round(1000 * delays[min(len(delays) - 1, int(q * len(delays)))], 1)  # noqa: E731
        return {"count": len(delays), "p50": pick(0.5), "p95": pick(0.95), "max": round(1000 * delays[-1], 1)}

    # ---- persistence ---------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """Everything a restarted coordinator needs, as JSON values; the replay index (numpy arrays) under
        ``replay``."""
        with self._lock:
            return {
                "exp_name": self.cfg.exp_name,
                "saved_at": time.time(),
                "tasks": self.tasks.state_dict(),
                "tasks_forgotten": self.tasks.forgotten,
                "workers": self.workers.state_dict(),
                "counters": {"env_steps": self.env_steps, "episodes": self.episodes, "train_iter": self.train_iter,
                             "policy_version": self.policy_version,
                             "last_eval_return": _num(self.last_eval_return),
                             "best_eval_return": _num(self.best_eval_return),
                             "last_eval_version": self.commander.last_eval_version,
                             "uptime": self.uptime, "started_at": self.started_at},
                "learn_info": dict(self.learn_info),
                "eval_history": list(self.eval_history),
                "throughput_history": list(self.throughput_history),
                "commander": self.commander.state_dict(),
                "replay": self.replay.state_dict(),
            }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; saved workers that were active get a fresh lease (re-adopted when they
        heartbeat again, lost when they do not)."""
        wcfg = self.cfg.parallel.worker
        with self._lock:
            self.tasks.load_state_dict(state["tasks"])
            self.tasks.forgotten = int(state.get("tasks_forgotten", 0))
            if "workers" in state:
                self.workers.load_state_dict(state["workers"], lambda address: HttpClient(
                    address, self.token, timeout=wcfg.request_timeout, max_retries=1))
            c = state["counters"]
            self.env_steps, self.episodes = int(c["env_steps"]), int(c["episodes"])
            self.train_iter, self.policy_version = int(c["train_iter"]), int(c["policy_version"])
            self.best_eval_return = math.nan if c["best_eval_return"] is None else float(c["best_eval_return"])
            self.last_eval_return = math.nan if c.get("last_eval_return") is None else float(c["last_eval_return"])
            self.commander.last_eval_version = c.get("last_eval_version")
            if "uptime" in c:  # the clock goes on from where the saved run stopped
                self._t0 = time.monotonic() - float(c["uptime"])
                self.started_at = float(c["started_at"])
            self.learn_info = dict(state.get("learn_info") or {})
            self.eval_history = list(state.get("eval_history", []))
            self.throughput_history = list(state.get("throughput_history", []))
            self.replay.load_state_dict(state["replay"])
            self.commander.load_state_dict(state.get("commander") or {})
            self._unconfirmed = {}
            for task in self.tasks.list():
                if task.state == TaskState.RUNNING and task.worker_id:
                    self._unconfirmed.setdefault(task.worker_id, []).append(task.task_id)

    def save_state(self) -> Optional[str]:
        """Write a snapshot to the shared directory (the arrays are copied under the lock, written outside it);
        returns its path, None when the write failed (logged; the previous snapshot stays)."""
        with self._save_lock:
            state = self.state_dict()
            arrays = state.pop("replay")
            self._state_seq += 1
            try:
                path = self.storage.save_coordinator_state(self._state_seq, state, arrays)
            except (OSError, StorageError, ValueError) as exc:
                logger.error("coordinator: saving state %d failed (the previous snapshot stays): %s",
                             self._state_seq, exc)
                return None
            self.state_saved_at = time.time()
            return path

    def resume(self) -> bool:
        """Load the newest saved state from the shared directory; False when there is none.

        A damaged newest snapshot falls back to the one before; StorageError when none loads."""
        saved = self.storage.latest_coordinator_state()
        if saved is None:
            return False
        meta, arrays = saved
        try:
            self.load_state_dict({**meta, "replay": arrays})
        except (KeyError, TypeError, ValueError) as exc:
            raise StorageError(f"{self.storage.state_paths(meta.get('seq', 0))[0]}: cannot be restored with this "
                               f"config ({type(exc).__name__}: {exc}); resume with the config that wrote it, or "
                               f"start over with --fresh") from exc
        self._state_seq = int(meta["seq"])
        self.resumed_from = int(meta["seq"])
        logger.info("coordinator: resumed state %d from %s: env_steps=%d train_iter=%d policy_version=%d "
                    "buffer=%d tasks=%d workers=%d", self._state_seq, self.storage.state_dir, self.env_steps,
                    self.train_iter, self.policy_version, self.replay.count(), len(self.tasks.list()),
                    len(self.workers.list()))
        return True

    def forget_workers(self, reason: str) -> None:
        """Every active worker is known dead (a whole-run resume): mark them lost and cancel their tasks, so
        replacements start at once instead of after a lease (a cancelled task uses up no attempt)."""
        for worker in self.workers.list(active_only=True):
            with self._lock:
                worker.state = WorkerState.LOST
                running = worker.running_tasks
            for task_id in running:
                self._end_task(task_id, TaskState.CANCELLED, error=f"{worker.worker_id}: {reason}")
        self.kick()

    def _snapshot_loop(self) -> None:
        interval = float(self.cfg.parallel.coordinator.snapshot_interval)
        while not self._closing.wait(interval):
            self.save_state()


class Admission:
    """At most ``size`` requests hold a turn at once; :meth:`enter` waits ``timeout`` s for one, then raises
    ApiError 503 (the slave sends its batch again later). The coordinator's HTTP app makes each metadata
    request take a turn before its body is read and give it back once its answer is built; a request that
    is about to wait (a long-poll) gives it back early (:meth:`leave` from the same thread)."""

    def __init__(self, size: int, timeout: float):
        self.timeout = timeout
        self._turns = threading.BoundedSemaphore(size)
        self._held = threading.local()

    def enter(self) -> None:
        if not self._turns.acquire(timeout=self.timeout):
            raise ApiError(503, "unavailable", f"the coordinator is overloaded: no metadata batch was admitted "
                                               f"within {self.timeout:g}s; send it again later")
        self._held.turn = True

    def leave(self) -> None:
        """Give back this thread's turn, if it holds one."""
        if getattr(self._held, "turn", False):
            self._held.turn = False
            self._turns.release()


def _num(x: float) -> Optional[float]:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x
