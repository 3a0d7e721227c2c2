"""The process shell shared by collectors and learners (slaves).

A slave serves a small HTTP API the coordinator (master) calls (:mod:`.slave_app`) and talks back through the
coordinator's REST API: registration, heartbeats (a lease) and batched metadata (:class:`Outbox`, in
:mod:`.slave_mail` with the :class:`TaskInbox`). ``run()`` is the worker loop: one ``try`` whose ``finally``
deregisters.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
from typing import Any, Deque, Dict, List, Optional, Set

from easydict import EasyDict

from ..errors import ConfigError, ParallelRLError, StorageError, StorageFaultError
from ..runtime import guarded_thread, set_torch_threads
from ..storage import SharedStorage
from ..transport import (
    TOKEN_ENV,
    WILDCARD_HOSTS,
    ApiError,
    HttpClient,
    ServerThread,
    http_url,
    route_address,
    slave_proof,
)
from .app import create_slave_app
from .link import REREGISTER_SECONDS, CoordinatorLink
from .mail import Outbox, SlaveTask, TaskInbox
from .readiness import Readiness

__all__ = ["REREGISTER_SECONDS", "CoordinatorLink", "Outbox", "Slave", "SlaveTask", "TaskInbox", "default_advertise"]

logger = logging.getLogger(__name__)

# how long a slave let go (or forgotten) waits for its stopped tasks to end before it forgets its worker id
RELEASE_TASK_SECONDS = 10.0
# how long a slave that stops waits for a set-up under way to end before it tears down
SETUP_JOIN_SECONDS = 10.0


def default_advertise(host: str, port: int, coordinator_url: Optional[str] = None) -> str:
    """The URL others reach us at. Bound to one address: that address. Bound to all interfaces (a container, a
    pod): our address on the route to the coordinator (the one it sees us come from), else our host name's
    address, which on many hosts is a loopback one (127.0.1.1 on Debian; 127.0.0.1 in a network namespace)."""
    if host in WILDCARD_HOSTS:
        host = route_address(coordinator_url) or socket.gethostbyname(socket.gethostname())
    return http_url(host, port)


class Slave(CoordinatorLink):
    """Base of :class:`CollectorSlave` and :class:`LearnerSlave`: the worker loop, the
    tasks and the adoption by a coordinator; registration, heartbeats and metadata are :class:`CoordinatorLink`'s."""

    kind = "slave"

    def __init__(
        self,
        coordinator_url: Optional[str] = None,
        host: str = "127.0.0.1",
        port: int = 0,
        advertise: Optional[str] = None,
        token: Optional[str] = None,
        shared_dir: Optional[str] = None,
        max_tasks: int = 0,
        request_timeout: float = 5.0,
        max_retries: int = 3,
        worker_id: Optional[str] = None,
        insecure_no_token: bool = False,
        storage: Optional[SharedStorage] = None,
    ):
        """``storage``: the store at ``shared_dir``, opened already (the CLI opens it to fail fast); kept when the
        coordinator's config opens the same store with the same options."""
        if not token and not insecure_no_token:
            raise ConfigError(
                f"a {self.kind} needs the cluster token: without one anybody who reaches its port "
                f"could connect it and choose what it imports and runs; set {TOKEN_ENV} (the "
                f"coordinator's token), or pass --insecure-no-token for a local experiment"
            )
        if not token:
            logger.warning(
                "%s: STARTED WITHOUT A CLUSTER TOKEN (--insecure-no-token): anybody who reaches this "
                "port can make it import modules and write files; use only on a trusted machine",
                self.kind,
            )
        self.token = token
        # the id asked for when registering: the launcher's name, later the id the coordinator gave us
        self.preferred_id = worker_id
        self.coordinator_url = coordinator_url.rstrip("/") if coordinator_url else None
        # started with --coordinator: registers itself, and exits when the coordinator lets it go
        self.self_registering = coordinator_url is not None
        self.shared_dir_override = shared_dir
        self.max_tasks = max_tasks
        self.request_timeout, self.max_retries = request_timeout, max_retries
        self.worker_id: Optional[str] = None
        self.cfg: Optional[EasyDict] = None
        self.storage: Optional[SharedStorage] = storage
        self.coordinator: Optional[HttpClient] = None
        self.outbox: Optional[Outbox] = None
        self.inbox = TaskInbox()
        self.tasks_done = 0
        self.control: Dict[str, Any] = {}
        self.connected = threading.Event()
        # set from the coordinator's disconnect until the next adoption: a 404 meanwhile (the coordinator
        # already forgot the entry) is the end it asked for, not a reason to register again
        self._let_go = threading.Event()
        # set once the coordinator answered a registration: adopted us (connect) or let us go (release)
        self._answered = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._tasks_changed = threading.Condition(self._lock)  # notified when a task ends
        self._running: Dict[str, SlaveTask] = {}
        self._heartbeat_thread: Optional[threading.Thread] = None
        # wakes the heartbeat thread before its interval: a set-up that ended (the coordinator hears at once), a stop
        self._beat_now = threading.Event()
        # the envs and model built for the current adoption, after connect answered: tasks are taken only then
        self.readiness = Readiness(self.kind, self.setup, self.report_problem, self._beat_now.set)
        self._lease: Optional[str] = None  # the lease of the current adoption
        self.adoption_tasks: Set[str] = set()  # the tasks it gave us (messages about others are not sent)
        self._heartbeat_interval = 1.0
        self._heartbeat_ttl = 10.0
        self.fatal_error: Optional[str] = None
        # what went wrong in this process's threads (health and heartbeats say so)
        self.problems: Deque[str] = collections.deque(maxlen=20)
        self._storage_backoff = 0.0  # seconds to wait before the next task (a task failed on the shared store)
        # task ids accepted lately: a retried assignment is acknowledged, not run twice
        self._seen_tasks: "collections.OrderedDict[str, None]" = collections.OrderedDict()
        self.app = create_slave_app(self)
        self.server = ServerThread(self.app, host, port, threads=4, name=self.kind, token=self.token)
        self.address = (advertise or default_advertise(host, self.server.port, self.coordinator_url)).rstrip("/")

    # ---- what the HTTP API asks (slave_app) ------------------------------------------------------
    def health(self, challenge: Optional[str] = None) -> Dict[str, Any]:
        """Liveness and identity; with a coordinator's ``challenge``, the proof that we hold the token."""
        storage = self.storage_health()
        degraded = self.problems or (storage is not None and not storage["healthy"])
        out = {
            "status": "degraded" if degraded else "ok",
            "kind": self.kind,
            "worker_id": self.worker_id,
            "pid": os.getpid(),
            "running": sorted(self._running),
            "tasks_done": self.tasks_done,
            "problems": list(self.problems),
            "storage": storage,
        }
        if challenge is not None:
            out["address"] = self.address
            out["proof"] = slave_proof(self.token, challenge, self.address) if self.token else None
        return out

    def assign(self, task: SlaveTask) -> bool:
        """A task the coordinator assigns: accepted (True), or False when it was assigned before (a retried
        assignment is acknowledged, never run twice)."""
        with self._lock:
            if task.task_id in self._seen_tasks:
                return False
            self.accept_task(task)
            self.adoption_tasks.add(task.task_id)
            self._seen_tasks[task.task_id] = None
            while len(self._seen_tasks) > 1000:
                self._seen_tasks.popitem(last=False)
        return True

    def accept_task(self, task: SlaveTask) -> None:
        """Check and queue a task (raise ApiError 400/409 to refuse it)."""
        self.validate_task(task)
        self.inbox.put(task)

    def validate_task(self, task: SlaveTask) -> None:
        raise NotImplementedError

    def stop_task(self, task_id: str) -> bool:
        with self._lock:
            task = self._running.get(task_id)
        if task is None:
            task = self.inbox.take(lambda t: t.task_id == task_id)
            if task is not None:
                self.report_end(task, "task_cancelled", {}, error="stopped before it started")
            return task is not None
        task.stop.set()
        return True

    def _stop_running_tasks(self) -> List[SlaveTask]:
        """Ask every running task to wrap up; returns them."""
        with self._lock:
            running = list(self._running.values())
        for task in running:
            task.stop.set()
        return running

    def report_problem(self, problem: str) -> None:
        """Something went wrong in this process: health and the next heartbeats say so."""
        logger.error("%s %s: %s", self.kind, self.worker_id, problem)
        self.problems.append(problem)

    def _thread_died(self, problem: str) -> None:
        """A thread the slave cannot work without died: report it and exit (the coordinator fails our tasks)."""
        self.report_problem(problem)
        self.fatal_error = problem
        self.request_stop()

    def on_connect(
        self,
        worker_id: str,
        config: dict,
        coordinator: Optional[str],
        shared_dir: Optional[str],
        heartbeat_interval: float,
        heartbeat_ttl: float,
        lease: Optional[str] = None,
    ) -> None:
        from ..config import compile_config

        try:
            cfg = compile_config(config, mode="cluster")
        except ConfigError as exc:
            raise ApiError(400, "bad_request", f"config from the coordinator is invalid: {exc}") from None
        root = self.shared_dir_override or shared_dir
        if not root:
            raise ApiError(400, "bad_request", "no shared_dir: start the slave with --shared-dir")
        with self._lock:
            # the same adoption connected again (a registration repeated while the coordinator was connecting)
            again = self.worker_id == worker_id and self._lease == lease
            if coordinator and not self.coordinator_url:
                self.coordinator_url = coordinator.rstrip("/")
            if not self.coordinator_url:
                raise ApiError(400, "bad_request", "no coordinator URL: start the slave with --coordinator")
            self.cfg = cfg
            self._heartbeat_interval, self._heartbeat_ttl = heartbeat_interval, heartbeat_ttl
            if self.storage is None or self.storage.opened_as != (root, dict(cfg.parallel.storage_options or {})):
                try:
                    self.storage = SharedStorage(root, cfg.parallel.storage_options)
                except StorageError as exc:
                    raise ApiError(400, "bad_request", f"{self.kind}: {exc}") from None
            self.storage.health.name = f"{self.kind} {worker_id}"
            client = HttpClient(
                self.coordinator_url, self.token, timeout=self.request_timeout, max_retries=self.max_retries
            )
            client.set_lease(lease)
            if self.coordinator is not None:  # adopted again: the last adoption's connections go
                self.coordinator.close()
            if not again:  # first: a message about an earlier adoption's task never leaves with the new id
                self.adoption_tasks = set()
            # the client with the new lease first, then the id: a heartbeat never sends one with the other's lease
            self.coordinator = client
            self.worker_id = self.preferred_id = worker_id
            self._lease = lease
            if self.outbox is None:
                self.outbox = Outbox(
                    self._send_metadata,
                    self.on_control,
                    flush_interval=self.flush_interval(cfg),
                    name=f"{self.kind}-outbox",
                    on_death=self._thread_died,
                )
            if not again:
                self.readiness.start(cfg)
            if self._heartbeat_thread is None:
                self._heartbeat_thread = guarded_thread(
                    self._heartbeat_loop, f"{self.kind}-heartbeat", self._thread_died
                )
                self._heartbeat_thread.start()
        self._let_go.clear()
        self.connected.set()
        self._answered.set()
        if self.outbox is not None:  # what it kept while we registered again leaves now, not after its backoff
            self.outbox.flush(timeout=0)
        logger.info("%s: connected as %s to %s", self.kind, worker_id, self.coordinator_url)

    def on_disconnect(self, reason: str) -> None:
        """``POST /slave/v1/disconnect``: the coordinator lets us go."""
        self.leave(reason)

    def leave(self, reason: str) -> None:
        """Let go by the coordinator: stop tasks, let them report, then forget our id (in the background).
        Once per adoption: the disconnect call and a heartbeat's answer may both say it."""
        with self._lock:
            if self._let_go.is_set():
                return
            self._let_go.set()
        logger.info("%s %s: coordinator let us go (%s)", self.kind, self.worker_id, reason or "no reason")
        guarded_thread(lambda: self._release(reason), f"{self.kind}-release", self._thread_died).start()

    def _release(self, reason: str) -> None:
        running = self._stop_running_tasks()
        # let the running tasks end (and, unless the coordinator forgot us, report how) before we forget our
        # worker id: registering again while a task still wound down (a learner saving its last checkpoint)
        # got the coordinator's replacement refused as "already running" three times within milliseconds, and
        # that ended the run
        with self._tasks_changed:
            if not self._tasks_changed.wait_for(
                lambda: not any(t.task_id in self._running for t in running), timeout=RELEASE_TASK_SECONDS
            ):
                logger.warning(
                    "%s: tasks %s still running %gs after being stopped",
                    self.kind,
                    sorted(t.task_id for t in running),
                    RELEASE_TASK_SECONDS,
                )
        if reason != "re-register" and self.outbox is not None:
            self.outbox.flush(timeout=2.0)
        with self._lock:
            self.worker_id = None
        self.connected.clear()
        self._answered.set()
        for task in self.inbox.drain():
            logger.info("%s: dropping queued %s", self.kind, task.task_id)
        self.on_released(reason)

    def on_released(self, reason: str) -> None:
        """Hook: the coordinator disconnected us. Slaves started with --coordinator exit (with an error when it let
        us go because our set-up failed)."""
        if self.self_registering and reason != "re-register":
            if self.readiness.error:
                self.fatal_error = self.readiness.error
            self.request_stop()

    # ---- hooks for subclasses --------------------------------------------------------------
    def flush_interval(self, cfg: EasyDict) -> float:
        return 0.05

    def setup(self, cfg: EasyDict) -> None:
        """Build the algorithm objects from the coordinator's config (in a thread of its own, after connect
        answered: :class:`~.readiness.Readiness`; no task arrives before it returns)."""

    def execute(self, task: SlaveTask) -> Dict[str, Any]:
        """Run one task; return its result. Raise to fail it."""
        raise NotImplementedError

    def on_control(self, control: Dict[str, Any]) -> None:
        self.control = control
        if control.get("stop"):
            self._stop_running_tasks()
        for task_id in control.get("cancel_tasks") or []:  # issued by a coordinator process that is gone
            if self.stop_task(task_id):
                logger.info(
                    "%s %s: stopped %s (the restarted coordinator does not know it)", self.kind, self.worker_id, task_id
                )

    def teardown(self) -> None:
        """Free the algorithm objects (envs, models)."""

    # ---- worker loop ------------------------------------------------------------------------
    def start(self) -> "Slave":
        """Serve the slave API and, with a coordinator URL, register."""
        self.server.start()
        logger.info("%s: serving on %s", self.kind, self.address)
        if self.coordinator_url:
            self.register()
        return self

    def request_stop(self) -> None:
        """Finish the running task early, deregister and return from :meth:`run`."""
        self._stop.set()
        self._beat_now.set()
        self._stop_running_tasks()
        self.inbox.close()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> int:
        """Take tasks until stopped (or ``max_tasks`` taken and done); deregisters on the way out.

        ``max_tasks`` counts the tasks this loop takes; evaluations a collector runs between
        two chunks of a task are part of that task."""
        taken = 0
        try:
            while not self._stop.is_set():
                task = self.inbox.get()
                if task is None:
                    continue
                taken += 1
                self._run_task(task)
                if self.max_tasks and taken >= self.max_tasks:
                    logger.info("%s: done %d task(s), exiting", self.kind, taken)
                    break
                if self._storage_backoff:  # the store failed the task: the next one would fail alike at once
                    self._stop.wait(self._storage_backoff)
                    self._storage_backoff = 0.0
        finally:
            self.close()
        return 1 if self.fatal_error else 0

    def _run_task(self, task: SlaveTask) -> None:
        # torch's thread count is per thread: set it here, where tasks run, from the coordinator's config
        set_torch_threads(self.cfg.system.torch_num_threads)
        with self._lock:
            self._running[task.task_id] = task
        (logger.info if task.kind == "learner" else logger.debug)(
            "%s %s: starting %s %s", self.kind, self.worker_id, task.task_id, task.spec
        )
        try:
            result = self.execute(task)
        except Exception as exc:  # any failure of a task is reported, not swallowed
            health = self.storage.health if self.storage is not None else None
            # failed on the shared store (also when another thread of the task, e.g. the learner's data thread,
            # met the fault): not a bug of the task, and the next task would fail alike, so back off
            if health is not None and (isinstance(exc, StorageFaultError) or not health.healthy):
                wcfg = self.cfg.parallel.worker
                self._storage_backoff = health.back_off(wcfg.storage_backoff, wcfg.storage_max_backoff)
                logger.error(
                    "%s %s: %s failed on the shared store (%d in a row), next task in %.1fs: %s",
                    self.kind,
                    self.worker_id,
                    task.task_id,
                    health.failures,
                    self._storage_backoff,
                    exc,
                )
                self.report_end(task, "task_failed", {}, error=f"{type(exc).__name__}: {exc}", storage=health.to_dict())
            else:
                logger.exception("%s %s: %s failed", self.kind, self.worker_id, task.task_id)
                self.report_end(task, "task_failed", {}, error=f"{type(exc).__name__}: {exc}")
        else:
            completed = bool(result.pop("completed", False))
            stopped = task.stop.is_set() and not completed
            self.report_end(
                task, "task_cancelled" if stopped else "task_done", result, error="stopped early" if stopped else None
            )
        finally:
            with self._tasks_changed:
                self._running.pop(task.task_id, None)
                self.tasks_done += 1
                self._tasks_changed.notify_all()

    def close(self) -> None:
        """Stop tasks, flush metadata, deregister, stop serving. Safe to call twice, from any thread."""
        self.request_stop()
        with self._tasks_changed:  # a task running in another thread ends before we tear down
            if not self._tasks_changed.wait_for(lambda: not self._running, timeout=10.0):
                logger.warning("%s: tasks %s did not stop within 10s", self.kind, sorted(self._running))
        if self.outbox is not None:
            self.outbox.close(timeout=5.0)
        worker_id = self.worker_id
        if worker_id and self.coordinator is not None:
            try:
                self.coordinator.request(
                    "DELETE", f"/api/v1/{self.kind}s/{worker_id}", json={"self": True}, retries=1, timeout=2.0
                )
                logger.info("%s %s: deregistered", self.kind, worker_id)
            except ParallelRLError as exc:
                logger.warning("%s %s: could not deregister: %s", self.kind, worker_id, exc)
            self.worker_id = None
        # a set-up still building (stopped while it set up) ends first: teardown would meet half-built objects
        if self.readiness.join(SETUP_JOIN_SECONDS):
            self.teardown()
        else:
            logger.warning(
                "%s: set-up still running %gs after the stop; its envs and model are left to the exit",
                self.kind,
                SETUP_JOIN_SECONDS,
            )
        self.server.close(timeout=2.0)
