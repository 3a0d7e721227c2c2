"""The process shell shared by collectors and learners (slaves).

A slave serves a small HTTP API the coordinator (master) calls::

    GET    /slave/v1/health            liveness and identity (open)
    POST   /slave/v1/connect           the master adopts this slave: worker id, config, shared dir
    POST   /slave/v1/tasks             start a task (202)
    DELETE /slave/v1/tasks/<task_id>   wrap a task up early
    POST   /slave/v1/disconnect        the master lets this slave go

and talks back through the coordinator's REST API: registration, heartbeats
(a lease) and batched metadata (:class:`Outbox`). ``run()`` is the worker
loop: one ``try`` whose ``finally`` deregisters.
"""
from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional

from easydict import EasyDict
from flask import Flask, jsonify, request

from ..errors import ConfigError, ParallelRLError, PeerUnavailableError, RemoteError, StorageError, StorageFaultError
from ..runtime import guarded_thread, set_torch_threads
from ..storage import SharedStorage
from ..transport import (TOKEN_ENV, ApiError, HttpClient, ServerThread, check_token, field as body_field,
                         install_json_errors, json_body, number_field, slave_proof)

logger = logging.getLogger(__name__)


@dataclass
class SlaveTask:
    task_id: str
    kind: str
    spec: Dict[str, Any]
    stop: threading.Event = field(default_factory=threading.Event)


class TaskInbox:
    """Tasks handed to this slave, taken by the worker loop (blocking, no polling)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._tasks: Deque[SlaveTask] = collections.deque()
        self._closed = False

    def put(self, task: SlaveTask) -> None:
        with self._cond:
            self._tasks.append(task)
            self._cond.notify_all()

    def get(self, timeout: Optional[float] = None) -> Optional[SlaveTask]:
        """The next task; None once closed (or after ``timeout``)."""
        with self._cond:
            self._cond.wait_for(lambda: self._tasks or self._closed, timeout=timeout)
            return self._tasks.popleft() if self._tasks else None

    def take(self, match: Callable[[SlaveTask], bool]) -> Optional[SlaveTask]:
        """Pop the first waiting task ``match`` accepts, without blocking."""
        with self._cond:
            for task in self._tasks:
                if match(task):
                    self._tasks.remove(task)
                    return task
            return None

    def task_ids(self) -> List[str]:
        with self._cond:
            return [t.task_id for t in self._tasks]

    def drain(self) -> List[SlaveTask]:
        with self._cond:
            tasks, self._tasks = list(self._tasks), collections.deque()
            return tasks

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class Outbox:
    """Batches metadata messages and sends them from one thread.

    A batch leaves when it is ``flush_interval`` old, at once for an urgent
    message, or on :meth:`flush`. Each answer carries a control block handed to
    ``on_control``. A send that did not reach the coordinator keeps the
    messages and retries with backoff; a batch the coordinator refused (a 4xx
    answer) or that cannot be sent at all is dropped and logged, since retrying
    it would block every later message. Messages of a delivered batch that
    ``send`` hands to :meth:`defer` (the coordinator could not check them: its
    store failed) are sent again with the same backoff. The thread never dies
    of one batch; if it dies anyway, ``on_death`` hears of it.
    """

    def __init__(self, send: Callable[[List[dict]], Optional[dict]], on_control: Callable[[dict], None],
                 flush_interval: float = 0.05, name: str = "outbox",
                 on_death: Optional[Callable[[str], None]] = None):
        self._send, self._on_control = send, on_control
        self.name = name
        self.flush_interval = flush_interval
        self._cond = threading.Condition()
        self._messages: List[dict] = []
        self._first_at: Optional[float] = None
        self._urgent = False
        self._batch: List[dict] = []  # the batch being sent (empty: nothing in flight; an empty batch never leaves)
        self._deferred: List[dict] = []  # messages of the batch just sent to send again (defer)
        self._deferred_why = ""
        self._closed = False
        self.sent = 0
        self.failures = 0
        self.dropped = 0  # messages refused by the coordinator, or impossible to send
        self._thread = guarded_thread(self._loop, name, on_death or (lambda reason: None))
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def put(self, message: dict, urgent: bool = False) -> None:
        with self._cond:
            if not self._messages:
                self._first_at = time.monotonic()
            self._messages.append(message)
            self._urgent = self._urgent or urgent
            self._cond.notify_all()

    def _ready(self) -> bool:
        if self._closed:
            return True
        if not self._messages:
            return False
        return self._urgent or time.monotonic() - self._first_at >= self.flush_interval

    def _loop(self) -> None:
        backoff = 0.05
        while True:
            with self._cond:
                while not self._ready():
                    timeout = None
                    if self._messages:
                        timeout = max(0.0, self.flush_interval - (time.monotonic() - self._first_at))
                    self._cond.wait(timeout)
                if self._closed and not self._messages:
                    return
                batch, self._messages, self._urgent = self._messages, [], False
                self._batch = batch
            try:
                control = self._send(batch)
            except RemoteError as exc:
                if 400 <= exc.status < 500 and exc.status not in (408, 429):  # the same batch would fail again
                    self._drop(batch, f"refused by the coordinator: {exc}")
                    continue
                if not self._retry_later(batch, exc, backoff):
                    return
                backoff = min(backoff * 2, 2.0)
                continue
            except ParallelRLError as exc:
                if not self._retry_later(batch, exc, backoff):
                    return
                backoff = min(backoff * 2, 2.0)
                continue
            except Exception as exc:  # noqa: BLE001 - a batch that cannot be sent at all is dropped and logged
                logger.exception("%s: sending %d message(s) failed", self.name, len(batch))
                self._drop(batch, f"{type(exc).__name__}: {exc}")
                continue
            with self._cond:
                deferred, self._deferred = self._deferred, []
                self.sent += len(batch) - len(deferred)
                self._batch = []
                self._cond.notify_all()
            if control:
                self._on_control(control)
            if not deferred:
                backoff = 0.05
                continue
            if not self._retry_later(deferred, self._deferred_why, backoff):
                return
            backoff = min(backoff * 2, 2.0)

    def defer(self, messages: List[dict], why: str) -> None:
        """Called by ``send`` (on the outbox thread): ``messages`` of the batch it sent were not taken this time
        but must not be lost; they go again after the backoff, before newer messages."""
        with self._cond:
            self._deferred.extend(messages)
            self._deferred_why = why

    def task_ids(self) -> List[str]:
        """Tasks named by messages not yet delivered (queued or being sent)."""
        with self._cond:
            return [m["task_id"] for m in self._messages + self._batch
                    if isinstance(m, dict) and isinstance(m.get("task_id"), str)]

    def _drop(self, batch: List[dict], why: str) -> None:
        kinds = ", ".join(sorted({str(m.get("type")) for m in batch if isinstance(m, dict)}))
        logger.error("%s: dropping %d message(s) (%s): %s", self.name, len(batch), kinds, why)
        with self._cond:
            self.dropped += len(batch)
            self._batch = []
            self._cond.notify_all()

    def _retry_later(self, batch: List[dict], exc: Exception, backoff: float) -> bool:
        """Put ``batch`` back in front and wait ``backoff`` (woken early by close); False when closing."""
        self.failures += 1
        logger.warning("%s: sending %d message(s) failed: %s", self.name, len(batch), exc)
        with self._cond:
            self._messages = batch + self._messages
            self._first_at = time.monotonic()
            self._batch = []
            self._cond.notify_all()
            if self._closed:
                return False
            self._cond.wait(backoff)  # bounded backoff before the retry (woken early by close)
        return True

    def flush(self, timeout: float = 5.0) -> bool:
        """Send everything queued now; True when the outbox emptied within ``timeout``."""
        with self._cond:
            self._urgent = True
            self._cond.notify_all()
            return self._cond.wait_for(lambda: not self._messages and not self._batch, timeout=timeout)

    def close(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)


# seconds a slave the coordinator forgot keeps trying to register again before it exits
REREGISTER_SECONDS = 30.0


def default_advertise(host: str, port: int) -> str:
    """The URL others reach us at: bound to all interfaces (a container), our host name's address."""
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostbyname(socket.gethostname())
    return f"http://{host}:{port}"


class Slave:
    """Base of :class:`FlaskFileSystemCollector` and :class:`FlaskFileSystemLearner`."""

    kind = "slave"
    # how long registering again (the coordinator forgot us) is retried before the slave exits with an error
    reregister_seconds = REREGISTER_SECONDS

    def __init__(self, coordinator_url: Optional[str] = None, host: str = "127.0.0.1", port: int = 0,
                 advertise: Optional[str] = None, token: Optional[str] = None, shared_dir: Optional[str] = None,
                 max_tasks: int = 0, request_timeout: float = 5.0, max_retries: int = 3,
                 worker_id: Optional[str] = None,
                 insecure_no_token: bool = False):
        if not token and not insecure_no_token:
            raise ConfigError(f"a {self.kind} needs the cluster token: without one anybody who reaches its port "
                              f"could connect it and choose what it imports and runs; set {TOKEN_ENV} (the "
                              f"coordinator's token), or pass --insecure-no-token for a local experiment")
        if not token:
            logger.warning("%s: STARTED WITHOUT A CLUSTER TOKEN (--insecure-no-token): anybody who reaches this "
                           "port can make it import modules and write files; use only on a trusted machine",
                           self.kind)
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
        self.storage: Optional[SharedStorage] = None
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
        self._heartbeat_interval = 1.0
        self._heartbeat_ttl = 10.0
        self.fatal_error: Optional[str] = None
        # what went wrong in this process's threads (health and heartbeats say so)
        self.problems: Deque[str] = collections.deque(maxlen=20)
        self._storage_backoff = 0.0  # seconds to wait before the next task (a task failed on the shared store)
        # task ids accepted lately: a retried assignment is acknowledged, not run twice
        self._seen_tasks: "collections.OrderedDict[str, None]" = collections.OrderedDict()
        self.app = self._create_app()
        self.server = ServerThread(self.app, host, port, threads=4, name=self.kind)
        self.address = (advertise or default_advertise(host, self.server.port)).rstrip("/")

    # ---- HTTP API (master -> slave) ------------------------------------------------------
    def _create_app(self) -> Flask:
        app = Flask(f"parallel_rl.{self.kind}")
        app.config["MAX_CONTENT_LENGTH"] = 8 * 1024 * 1024
        install_json_errors(app)
        slave = self

        @app.get("/slave/v1/health")
        def health():
            storage = slave.storage_health()
            degraded = slave.problems or (storage is not None and not storage["healthy"])
            out = {"status": "degraded" if degraded else "ok", "kind": slave.kind,
                   "worker_id": slave.worker_id, "pid": os.getpid(), "running": sorted(slave._running),
                   "tasks_done": slave.tasks_done, "problems": list(slave.problems), "storage": storage}
            challenge = request.args.get("challenge")
            if challenge is not None:  # a coordinator asks us to prove we hold the token before it sends it
                if not 16 <= len(challenge) <= 128:
                    raise ApiError(400, "bad_request", f"challenge must be 16-128 characters, got {len(challenge)}")
                out["address"] = slave.address
                out["proof"] = slave_proof(slave.token, challenge, slave.address) if slave.token else None
            return jsonify(out)

        @app.post("/slave/v1/connect")
        def connect():
            check_token(slave.token)
            body = json_body()
            slave.on_connect(body_field(body, "worker_id", str), body_field(body, "config", dict),
                             body_field(body, "coordinator", str, required=False),
                             body_field(body, "shared_dir", str, required=False),
                             number_field(body, "heartbeat_interval", 1.0, 0.0),
                             number_field(body, "heartbeat_ttl", 10.0, 0.0),
                             body_field(body, "lease", str, required=False))
            return jsonify({"status": "connected", "worker_id": slave.worker_id})

        @app.post("/slave/v1/tasks")
        def start_task():
            check_token(slave.token)
            if not slave.connected.is_set():
                raise ApiError(409, "conflict", "not connected to a coordinator")
            body = json_body()
            task = SlaveTask(body_field(body, "task_id", str), body_field(body, "kind", str),
                             body_field(body, "spec", dict))
            with slave._lock:
                if task.task_id in slave._seen_tasks:  # a retried assignment: acknowledged, never run twice
                    return jsonify({"status": "accepted", "task_id": task.task_id, "duplicate": True}), 202
                slave.accept_task(task)
                slave._seen_tasks[task.task_id] = None
                while len(slave._seen_tasks) > 1000:
                    slave._seen_tasks.popitem(last=False)
            return jsonify({"status": "accepted", "task_id": task.task_id}), 202

        @app.delete("/slave/v1/tasks/<task_id>")
        def stop_task(task_id: str):
            check_token(slave.token)
            if not slave.stop_task(task_id):
                raise ApiError(404, "not_found", f"no running task {task_id!r}")
            return jsonify({"status": "stopping", "task_id": task_id})

        @app.post("/slave/v1/disconnect")
        def disconnect():
            check_token(slave.token)
            body = json_body()
            slave.on_disconnect(str(body.get("reason", "")))
            return jsonify({"status": "disconnecting"})

        return app

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

    def storage_health(self) -> Optional[Dict[str, Any]]:
        """Whether the shared store works for this process (None before it is opened)."""
        return self.storage.health.to_dict() if self.storage is not None else None

    def _thread_died(self, problem: str) -> None:
        """A thread the slave cannot work without died: report it and exit (the coordinator fails our tasks)."""
        self.report_problem(problem)
        self.fatal_error = problem
        self.request_stop()

    def on_connect(self, worker_id: str, config: dict, coordinator: Optional[str], shared_dir: Optional[str],
                   heartbeat_interval: float, heartbeat_ttl: float, lease: Optional[str] = None) -> None:
        from ..config import compile_config

        try:
            cfg = compile_config(config)
        except ConfigError as exc:
            raise ApiError(400, "bad_request", f"config from the coordinator is invalid: {exc}") from None
        root = self.shared_dir_override or shared_dir
        if not root:
            raise ApiError(400, "bad_request", "no shared_dir: start the slave with --shared-dir")
        with self._lock:
            if coordinator and not self.coordinator_url:
                self.coordinator_url = coordinator.rstrip("/")
            if not self.coordinator_url:
                raise ApiError(400, "bad_request", "no coordinator URL: start the slave with --coordinator")
            self.cfg = cfg
            self._heartbeat_interval, self._heartbeat_ttl = heartbeat_interval, heartbeat_ttl
            if self.storage is None or self.storage.root != root:
                try:
                    self.storage = SharedStorage(root, cfg.parallel.storage_options)
                except StorageError as exc:
                    raise ApiError(400, "bad_request", f"{self.kind}: {exc}") from None
            self.storage.health.name = f"{self.kind} {worker_id}"
            client = HttpClient(self.coordinator_url, self.token, timeout=self.request_timeout,
                                max_retries=self.max_retries)
            client.set_lease(lease)
            if self.coordinator is not None:  # adopted again: the last adoption's connections go
                self.coordinator.close()
            # the client with the new lease first, then the id: a heartbeat never sends one with the other's lease
            self.coordinator = client
            self.worker_id = self.preferred_id = worker_id
            if self.outbox is None:
                self.outbox = Outbox(self._send_metadata, self.on_control,
                                     flush_interval=self.flush_interval(cfg), name=f"{self.kind}-outbox",
                                     on_death=self._thread_died)
            self.setup(cfg)
            if self._heartbeat_thread is None:
                self._heartbeat_thread = guarded_thread(self._heartbeat_loop, f"{self.kind}-heartbeat",
                                                        self._thread_died)
                self._heartbeat_thread.start()
        self._let_go.clear()
        self.connected.set()
        self._answered.set()
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
        if reason != "re-register":
            # let the running tasks report how they ended before we forget our worker id
            with self._tasks_changed:
                self._tasks_changed.wait_for(lambda: not any(t.task_id in self._running for t in running),
                                             timeout=5.0)
            if self.outbox is not None:
                self.outbox.flush(timeout=2.0)
        with self._lock:
            self.worker_id = None
        self.connected.clear()
        self._answered.set()
        for task in self.inbox.drain():
            logger.info("%s: dropping queued %s", self.kind, task.task_id)
        self.on_released(reason)

    def on_released(self, reason: str) -> None:
        """Hook: the coordinator disconnected us. Slaves started with --coordinator exit."""
        if self.self_registering and reason != "re-register":
            self.request_stop()

    # ---- hooks for subclasses --------------------------------------------------------------
    def flush_interval(self, cfg: EasyDict) -> float:
        return 0.05

    def setup(self, cfg: EasyDict) -> None:
        """Build the algorithm objects from the coordinator's config."""

    def execute(self, task: SlaveTask) -> Dict[str, Any]:
        """Run one task; return its result. Raise to fail it."""
        raise NotImplementedError

    def heartbeat_body(self) -> Dict[str, Any]:
        """What each heartbeat tells the coordinator (a LearnerAggregator adds its ranks)."""
        return {"problems": list(self.problems), "tasks": self.held_task_ids(), "storage": self.storage_health()}

    def held_task_ids(self) -> List[str]:
        """Tasks this slave holds: queued, running, or with an end report not yet delivered. Read in the order
        a task moves (inbox, then running, then the outbox), so a task moving meanwhile is still seen."""
        queued = self.inbox.task_ids()
        with self._lock:
            running = list(self._running)
        unsent = self.outbox.task_ids() if self.outbox is not None else []
        return sorted(set(queued + running + unsent))

    def on_control(self, control: Dict[str, Any]) -> None:
        self.control = control
        if control.get("stop"):
            self._stop_running_tasks()
        for task_id in control.get("cancel_tasks") or []:  # issued by a coordinator process that is gone
            if self.stop_task(task_id):
                logger.info("%s %s: stopped %s (the restarted coordinator does not know it)", self.kind,
                            self.worker_id, task_id)

    def teardown(self) -> None:
        """Free the algorithm objects (envs, models)."""

    # ---- slave -> master ----------------------------------------------------------------------
    def _send_metadata(self, messages: List[dict]) -> Optional[dict]:
        worker_id = self.worker_id
        if worker_id is None or self.coordinator is None:
            logger.warning("%s: not connected; dropping %d message(s)", self.kind, len(messages))
            return None
        try:
            answer = self.coordinator.post(f"/api/v1/workers/{worker_id}/metadata", {"messages": messages})
        except RemoteError as exc:
            if exc.status == 404:
                logger.warning("%s: coordinator no longer knows %s; dropping %d message(s)", self.kind, worker_id,
                               len(messages))
                return None
            raise
        retry = []
        for refusal in answer.get("refused") or []:  # refused messages are dropped: sent again, they fail again
            index = refusal.get("index")
            if refusal.get("code") == "unavailable" and isinstance(index, int) and 0 <= index < len(messages):
                retry.append(messages[index])  # the store failed the coordinator's check, not the message
                continue
            logger.error("%s %s: coordinator refused message %s (%s): %s", self.kind, worker_id,
                         refusal.get("index"), refusal.get("type"), refusal.get("message"))
            if self.outbox is not None:
                self.outbox.dropped += 1
        if retry and self.outbox is not None:
            first = next(r for r in answer["refused"] if r.get("code") == "unavailable")
            self.outbox.defer(retry, f"the coordinator could not check {len(retry)} message(s), sending them again: "
                                     f"{first.get('message')}")
        return answer["control"]

    def send_metadata(self, message: dict, urgent: bool = False) -> None:
        if self.outbox is not None:
            self.outbox.put(message, urgent=urgent)

    def report_end(self, task: SlaveTask, kind: str, result: Dict[str, Any], error: Optional[str] = None,
                   storage: Optional[Dict[str, Any]] = None) -> None:
        """``storage``: the store's health, when the task failed on it (the coordinator backs off too)."""
        message = {"type": kind, "task_id": task.task_id, "result": result}
        if error:
            message["error"] = error
        if storage is not None:
            message["storage"] = storage
        self.send_metadata(message, urgent=True)

    def register(self, deadline_seconds: float = 60.0) -> None:
        """Self-registration: ask the coordinator to adopt us (it calls /slave/v1/connect back)."""
        client = HttpClient(self.coordinator_url, self.token, timeout=self.request_timeout + 5, max_retries=0)
        self._answered.clear()
        deadline = time.monotonic() + deadline_seconds
        delay = 0.05
        try:
            while True:
                try:
                    body = {"address": self.address}
                    if self.preferred_id:
                        body["worker_id"] = self.preferred_id
                    client.post(f"/api/v1/{self.kind}s", body)
                    break
                except PeerUnavailableError as exc:
                    if time.monotonic() + delay > deadline or self._stop.is_set():
                        raise PeerUnavailableError(f"coordinator {self.coordinator_url} unreachable for "
                                                   f"{deadline_seconds:g}s: {exc}") from None
                    self._stop.wait(delay)
                    delay = min(delay * 2, 1.0)
        finally:
            client.close()  # registering again after a failure makes a client per try
        # released right after being adopted (training ended as we joined) is a normal end, not an error
        if not self._answered.wait(self.request_timeout):
            raise PeerUnavailableError(f"registered at {self.coordinator_url} but it never connected back")

    def _register_again(self) -> None:
        """After the coordinator forgot us: register again, retrying with backoff for up to
        ``reregister_seconds``; when that fails, exit with ``fatal_error`` set. A slave that
        gave up after one failed try was a zombie: alive, registered nowhere, never asked for again."""
        budget = self.reregister_seconds
        deadline = time.monotonic() + budget
        delay = 0.25
        while not self._stop.is_set():
            try:
                self.register(deadline_seconds=max(0.0, deadline - time.monotonic()))
                return
            except ParallelRLError as exc:
                if self.connected.is_set():  # adopted after all (the connect call came late)
                    return
                if time.monotonic() + delay > deadline:
                    self.fatal_error = (f"could not register again with coordinator {self.coordinator_url} within "
                                        f"{budget:g}s (the last try: {exc})")
                    logger.error("%s: %s; exiting", self.kind, self.fatal_error)
                    self.request_stop()
                    return
                logger.warning("%s: registering again failed (trying again in %.2fs): %s", self.kind, delay, exc)
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)

    def _heartbeat_loop(self) -> None:
        last_ok = time.monotonic()
        while not self._stop.wait(self._heartbeat_interval):
            worker_id = self.worker_id
            if worker_id is None or self.coordinator is None:
                continue
            try:
                control = self.coordinator.post(f"/api/v1/workers/{worker_id}/heartbeat", self.heartbeat_body(),
                                                retries=0,
                                                timeout=max(1.0, self._heartbeat_interval))
                last_ok = time.monotonic()
                self.on_control(control)
                if control.get("state") == "gone" and self.worker_id == worker_id and not self._stop.is_set():
                    # removed, and the coordinator's disconnect call did not reach us (it is sent once, with a
                    # short timeout): its answer to our heartbeat says the same
                    self.leave("removed (told by the heartbeat's answer)")
            except RemoteError as exc:
                # only for the identity this heartbeat was sent for: a late answer about an id we have since
                # been let go from must not tear down the adoption that followed
                if (exc.status == 404 and not self._stop.is_set() and not self._let_go.is_set()
                        and self.worker_id == worker_id):
                    logger.warning("%s: coordinator forgot %s (%s); registering again", self.kind, worker_id, exc)
                    self._release("re-register")
                    self._register_again()
            except ParallelRLError as exc:
                silent = time.monotonic() - last_ok
                logger.warning("%s %s: heartbeat failed (%.1fs without the coordinator): %s",
                               self.kind, worker_id, silent, exc)
                if silent > 3 * self._heartbeat_ttl and self.coordinator_url:
                    self.fatal_error = f"coordinator {self.coordinator_url} unreachable for {silent:.0f}s"
                    logger.error("%s: %s; exiting", self.kind, self.fatal_error)
                    self.request_stop()

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
            "%s %s: starting %s %s", self.kind, self.worker_id, task.task_id, task.spec)
        try:
            result = self.execute(task)
        except Exception as exc:  # any failure of a task is reported, not swallowed
            health = self.storage.health if self.storage is not None else None
            # failed on the shared store (also when another thread of the task, e.g. the learner's data thread,
            # met the fault): not a bug of the task, and the next task would fail alike, so back off
            if health is not None and (isinstance(exc, StorageFaultError) or not health.healthy):
                wcfg = self.cfg.parallel.worker
                self._storage_backoff = health.back_off(wcfg.storage_backoff, wcfg.storage_max_backoff)
                logger.error("%s %s: %s failed on the shared store (%d in a row), next task in %.1fs: %s",
                             self.kind, self.worker_id, task.task_id, health.failures, self._storage_backoff, exc)
                self.report_end(task, "task_failed", {}, error=f"{type(exc).__name__}: {exc}",
                                storage=health.to_dict())
            else:
                logger.exception("%s %s: %s failed", self.kind, self.worker_id, task.task_id)
                self.report_end(task, "task_failed", {}, error=f"{type(exc).__name__}: {exc}")
        else:
            completed = bool(result.pop("completed", False))
            stopped = task.stop.is_set() and not completed
            self.report_end(task, "task_cancelled" if stopped else "task_done", result,
                            error="stopped early" if stopped else None)
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
                self.coordinator.request("DELETE", f"/api/v1/{self.kind}s/{worker_id}", json={"self": True},
                                         retries=1, timeout=2.0)
                logger.info("%s %s: deregistered", self.kind, worker_id)
            except ParallelRLError as exc:
                logger.warning("%s %s: could not deregister: %s", self.kind, worker_id, exc)
            self.worker_id = None
        self.teardown()
        self.server.close(timeout=2.0)
