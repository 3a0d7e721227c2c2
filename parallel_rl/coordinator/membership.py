"""Membership: which workers belong to the run, from the first proof to the last goodbye.

A worker is added by address (:meth:`Membership.add_worker`): the slave there proves it holds the cluster
token (:func:`prove_slave`) before anything is sent to it, then it is told to connect. Connect answers at once;
the slave builds its envs and model afterwards (``setting_up``: no tasks) and its heartbeats say when it is
ready, or why its set-up failed (the worker is let go). Its heartbeats renew its lease and carry its problems,
its store reports and the tasks it holds (reconciled after a resume).
It leaves by being removed (``DELETE``: running tasks wrap up first), by deregistering itself, by being
lost (no heartbeat within the lease, its process seen dead, refusing every task), or by being released
when the run is over. Ended workers are forgotten after ``worker_retention`` s (:meth:`Membership.reap`).

Tasks of a worker that leaves end through ``end_task`` (the coordinator's); every change calls ``kick``.
"""

from __future__ import annotations

import concurrent.futures
import hmac
import ipaddress
import logging
import secrets
import threading
import time
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import urlsplit

from easydict import EasyDict

from ..errors import (
    ConflictError,
    NotFoundError,
    ParallelRLError,
    PeerUnavailableError,
    ProtocolError,
    RemoteError,
    RequestRefused,
    UnreachableError,
)
from ..protocol import TimeBreakdown
from ..transport import TOKEN_ENV, HttpClient, check_url, http_url, route_address, slave_proof
from ..storage import SharedStorage
from .tasks import TaskState, TaskTable
from .workers import Worker, WorkerRegistry, WorkerState

logger = logging.getLogger(__name__)

KINDS = ("collector", "learner")
# workers let go at once when the coordinator stops (release_workers)
RELEASE_THREADS = 32


def loopback_hint(kind: str, address: str, sender: Optional[str]) -> str:
    """Why ``address`` cannot be reached when it is a loopback one and the registration came from another host
    (``sender``, the request's peer address): a loopback address is the coordinator's own host. "" otherwise."""
    try:
        host = urlsplit(address).hostname or ""
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        from_afar = sender is not None and not ipaddress.ip_address(sender).is_loopback
    except ValueError:  # a host name, or no sender address: nothing to say
        return ""
    if not (loopback and from_afar):
        return ""
    return (
        f"; {address} is a loopback address, which from the coordinator is its own host, but this came from "
        f"{sender}: start the {kind} with --advertise http://ADDRESS:PORT (an address the coordinator "
        f"reaches it at), or bind it with --host ADDRESS"
    )


def prove_slave(
    kind: str, address: str, token: Optional[str], timeout: float, sender: Optional[str] = None
) -> Dict[str, Any]:
    """The health answer of the ``kind`` slave at ``address``, once it proved it holds the cluster ``token``;
    UnreachableError (422) or RequestRefused (400, another kind) otherwise. ``sender``: the address the
    registration came from (its error then says when ``address`` is a loopback one from another host).

    Nothing is sent to an address before it proves it is one of ours: the health call carries no token
    but a random challenge, and only a slave holding the token, advertising ``address``, can answer it
    (:func:`~parallel_rl.transport.slave_proof`). Errors say what happened in our words; what a
    stranger answered is never echoed."""
    probe = HttpClient(address, None, timeout=timeout, max_retries=1)
    challenge = secrets.token_urlsafe(24)
    try:
        health = probe.get("/slave/v1/health", params={"challenge": challenge})
    except PeerUnavailableError:
        raise UnreachableError(
            f"cannot reach a {kind} at {address} (no connection, or no answer "
            f"within {timeout:g}s){loopback_hint(kind, address, sender)}"
        ) from None
    except ProtocolError as exc:  # it answered, but not as a slave of ours
        answered = f"HTTP {exc.status}" if exc.status else "something"
        raise UnreachableError(
            f"{address} is not a parallel_rl {kind}: its health endpoint "
            f"answered {answered} with a body that is not a slave's (non-JSON, "
            f"or another schema); is this a parallel_rl server?"
        ) from None
    finally:
        probe.close()
    if not isinstance(health, dict) or health.get("kind") not in KINDS:
        raise UnreachableError(
            f"{address} is not a parallel_rl {kind}: its health answer is not a slave's (is this a parallel_rl server?)"
        )
    if health["kind"] != kind:
        raise RequestRefused(f"{address} is a {health['kind']}, not a {kind}")
    if token:
        if health.get("address") != address:
            raise UnreachableError(
                f"the {kind} at {address} advertises another address: add it by "
                f"the address it prints (`serving on URL`), or start it with "
                f"--advertise {address}",
                code="unproven",
            )
        proof = health.get("proof")
        if not isinstance(proof, str) or not hmac.compare_digest(
            proof.encode(), slave_proof(token, challenge, address).encode()
        ):
            raise UnreachableError(
                f"the {kind} at {address} did not prove it holds the cluster token "
                f"(start it with this coordinator's {TOKEN_ENV}); nothing was "
                f"sent to it",
                code="unproven",
            )
    return health


class Membership:
    """The run's workers. ``over()`` says why the run is over (None while it runs): a worker joining
    after that is let go at once."""

    def __init__(
        self,
        cfg: EasyDict,
        storage: SharedStorage,
        token: Optional[str],
        workers: WorkerRegistry,
        tasks: TaskTable,
        lock: threading.RLock,
        end_task: Callable[..., Any],
        kick: Callable[[], None],
        over: Callable[[], Optional[str]],
    ):
        self.cfg = cfg
        self.storage = storage
        self.token = token
        self.advertise_url: Optional[str] = cfg.parallel.coordinator.advertise or None
        # bound to every interface without an advertised URL: a worker is told our address on the route to it
        self.advertise_per_worker = False
        self.workers = workers
        self._tasks = tasks
        self._lock = lock  # the coordinator's: a worker's state changes with its tasks'
        self._end_task, self._kick, self._over = end_task, kick, over
        # after a resume: worker id -> the tasks the snapshot says it runs, until its first heartbeat says
        # which it really runs (a task it ended after the snapshot reported its end to the old process)
        self.unconfirmed: Dict[str, List[str]] = {}

    @property
    def silence_limit(self) -> float:
        """Seconds without a heartbeat after which a worker is shown unreachable: half its lease."""
        return float(self.cfg.parallel.coordinator.heartbeat_ttl) / 2

    def client(self, address: str) -> HttpClient:
        """The client that speaks to the worker at ``address`` for the coordinator."""
        return HttpClient(address, self.token, timeout=self.cfg.parallel.worker.request_timeout, max_retries=1)

    def url_for(self, address: str) -> Optional[str]:
        """The URL the worker at ``address`` reaches us at (what connect tells a worker added by its URL)."""
        if self.advertise_per_worker and self.advertise_url:
            ours = route_address(address)
            if ours:
                return http_url(ours, urlsplit(self.advertise_url).port)
        return self.advertise_url

    # ---- joining -------------------------------------------------------------------------
    def add_worker(
        self, kind: str, address: Any, preferred_id: Optional[str] = None, sender: Optional[str] = None
    ) -> Worker:
        """Connect to a running slave at ``address`` and register it (409 if already registered and ready), named
        ``preferred_id`` when that id is free. An address still connecting or setting up is the same worker: it
        is connected again with its id and lease (the slave takes a repeated connect as the same adoption).
        ``sender``: the address the request came from (for the error when ``address`` is unreachable)."""
        if kind not in KINDS:
            raise NotFoundError(f"unknown worker kind {kind!r}")
        address = check_url(address)
        wcfg = self.cfg.parallel.worker
        health = prove_slave(kind, address, self.token, float(wcfg.request_timeout), sender)
        client = self.client(address)
        worker = self.workers.register(kind, address, client, preferred_id)
        worker.silence_limit = self.silence_limit
        if worker.client is not client:  # registered again while pending: the same worker
            client.close()
            logger.info(
                "coordinator: %s at %s registered again while %s", worker.worker_id, address, worker.state.value
            )
        worker.pid = health.get("pid") if isinstance(health.get("pid"), int) else None
        try:
            answer = worker.client.post(
                "/slave/v1/connect",
                {
                    "worker_id": worker.worker_id,
                    "coordinator": self.url_for(address),
                    "config": self.cfg,
                    "shared_dir": self.storage.root,
                    "heartbeat_interval": float(wcfg.heartbeat_interval),
                    "heartbeat_ttl": float(self.cfg.parallel.coordinator.heartbeat_ttl),
                    "lease": worker.lease,
                },
            )
        except ParallelRLError as exc:
            with self._lock:
                # adopted through another registration's connect meanwhile (it heartbeats with its lease)
                adopted = worker.state.active and worker.state != WorkerState.CONNECTING
                if not adopted:
                    worker.state = WorkerState.GONE
            if not adopted:
                self._kick()
                raise UnreachableError(f"{kind} at {address} refused to connect: {exc}") from None
            answer = {}
        # a slave that does not say (an older one) built everything inside the connect call
        ready = not isinstance(answer, dict) or answer.get("ready") is not False
        with self._lock:
            if worker.state == WorkerState.CONNECTING:
                worker.state = WorkerState.IDLE if ready else WorkerState.SETTING_UP
                worker.last_heartbeat = time.monotonic()  # the lease starts now, not when connecting began
        logger.info("coordinator: registered %s at %s (%s)", worker.worker_id, address, worker.state.value)
        if self._over() is not None:  # joined after the run ended (a coordinator serving on): let it go now
            self._release(worker)
        self._kick()
        return worker

    def increase_collector(self, address: Any) -> Worker:
        """Add a running collector slave (DI-engine's ``deal_with_increase_collector``): what
        ``POST /api/v1/collectors`` does."""
        return self.add_worker("collector", address)

    def decrease_collector(self, worker_id: str) -> Worker:
        """Remove a collector (DI-engine's ``deal_with_decrease_collector``): what
        ``DELETE /api/v1/collectors/<worker_id>`` does."""
        return self.remove_worker(worker_id, "collector")

    def heartbeat(
        self,
        worker_id: str,
        lease: Optional[str],
        problems: Optional[List[str]] = None,
        tasks: Optional[List[str]] = None,
        ranks: Optional[List[Dict[str, Any]]] = None,
        storage: Optional[Dict[str, Any]] = None,
        time_breakdown: Optional[TimeBreakdown] = None,
        ready: Optional[bool] = None,
        setup_error: Optional[str] = None,
        unanswered_seconds: Optional[float] = None,
    ) -> Worker:
        """Renew ``worker_id``'s lease; 404 when it is not registered with that lease (it registers again).

        ``ready``: the worker built its envs and model; one setting up becomes idle (it takes tasks).
        ``setup_error``: its set-up failed (one line): the worker is let go (``gone``, the reason among its
        problems), and the answer's ``state`` tells it so.

        ``tasks``: the ids of the tasks the worker holds (queued, running, or with an end report not yet
        delivered). After a resume they settle what the snapshot could not know: a task the snapshot has
        running on this worker that the worker no longer holds ended while the coordinator was down (its
        report went to the old process), so it fails and is issued again; a task the worker runs that this
        coordinator never issued (issued after the snapshot) is cancelled through the control block.

        ``storage``: the worker's report on the shared store (checked by ``check_health_report``): shown under
        the worker and in the cluster summary; a healthy one ends the worker's backoff.

        ``time_breakdown``: where the worker's time went (shown under the worker; the summary's bottleneck).

        ``unanswered_seconds``: how long the worker's calls have gone unanswered (its requests arrive, our answers
        are lost on the way back): past the silence limit it is shown unreachable since then. A heartbeat says it
        (0: answered); other calls that renew the lease (metadata, samples) leave it as it is."""
        worker = self.workers.heartbeat(worker_id, lease)
        if worker is None:
            removed = self.workers.with_lease(worker_id, lease)
            if removed is not None and removed.state == WorkerState.GONE:
                # removed (DELETE, training over) and about to be let go: its last reports still count, and
                # a 404 would make it register again before the disconnect reaches it
                return removed
            raise NotFoundError(f"worker {worker_id!r:.60} is not registered with this lease (register again)")
        self._answers_lost(worker, unanswered_seconds)
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
            self.storage_report(worker, storage)
        if time_breakdown is not None:
            worker.time_breakdown = time_breakdown
        if setup_error is not None:
            self._setup_failed(worker, setup_error)
        elif ready and worker.state.pending:
            with self._lock:
                if worker.state.pending:
                    worker.state = WorkerState.IDLE
            logger.info("coordinator: %s is set up", worker_id)
            self._kick()
        return worker

    def _answers_lost(self, worker: Worker, unanswered_seconds: Optional[float]) -> None:
        """Record (or clear) what ``worker`` says of our answers; a change is logged."""
        if unanswered_seconds is None:  # not a heartbeat: it says nothing of our answers
            return
        lost = unanswered_seconds > worker.silence_limit
        if lost and worker.answers_lost_since is None:
            worker.answers_lost_since = time.time() - float(unanswered_seconds)
            logger.warning(
                "coordinator: %s at %s gets no answers from us for %.1fs (its requests arrive): unreachable",
                worker.worker_id,
                worker.address,
                unanswered_seconds,
            )
        elif not lost and worker.answers_lost_since is not None:
            worker.answers_lost_since = None
            logger.info("coordinator: %s at %s gets our answers again", worker.worker_id, worker.address)

    def _setup_failed(self, worker: Worker, error: str) -> None:
        """``worker`` could not build its envs or model: it is let go (no task would run there)."""
        with self._lock:
            if not worker.state.active:
                return
            worker.state = WorkerState.GONE
            running = worker.running_tasks
            if error not in worker.problems:
                worker.problems = (worker.problems + [error])[-20:]
        logger.error(
            "coordinator: %s at %s could not set up, letting it go: %s", worker.worker_id, worker.address, error
        )
        for task_id in running:
            self._end_task(task_id, TaskState.FAILED, error=f"{worker.worker_id} could not set up: {error}")
        self._kick()

    def storage_report(self, worker: Worker, report: Dict[str, Any]) -> None:
        """``worker``'s (checked) report on the shared store; a change of its health is logged."""
        was = worker.storage.healthy
        if worker.storage.update_from(report) and was != worker.storage.healthy:
            if was:
                logger.error(
                    "coordinator: %s reports the shared store failing: %s", worker.worker_id, worker.storage.error
                )
            else:
                logger.info("coordinator: %s reports the shared store working again", worker.worker_id)

    def _reconcile_tasks(self, worker: Worker, held: set) -> None:
        with self._lock:
            lost = [t for t in self.unconfirmed.pop(worker.worker_id, []) if t not in held]
            known = {t: self._tasks.get(t) for t in held}
            worker.stale_tasks = sorted(
                t for t, task in known.items() if task is None or task.worker_id != worker.worker_id
            )
        for task_id in lost:
            self._end_task(
                task_id,
                TaskState.FAILED,
                error=f"{worker.worker_id} no longer runs it (it ended while the coordinator was restarting)",
            )
        if worker.stale_tasks:
            logger.info(
                "coordinator: asking %s to stop %s (issued by the coordinator before its restart)",
                worker.worker_id,
                worker.stale_tasks,
            )

    def get_worker(self, worker_id: str, kind: Optional[str] = None) -> Worker:
        """The worker (of ``kind``, when given), or 404."""
        worker = self.workers.get(worker_id)
        if worker is None or (kind is not None and worker.kind != kind):
            raise NotFoundError(f"no {kind or 'worker'} {worker_id!r}")
        return worker

    # ---- leaving --------------------------------------------------------------------------
    def remove_worker(self, worker_id: str, kind: Optional[str] = None, reason: str = "removed") -> Worker:
        """Deregister: no new tasks; a running task is asked to wrap up (its data stays)."""
        worker = self.get_worker(worker_id, kind)
        if not worker.state.active:
            raise ConflictError(f"{worker_id} is already {worker.state.value}")
        with self._lock:
            running = worker.running_tasks
            worker.state = WorkerState.LEAVING if running else WorkerState.GONE
            worker.removed = True
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
            self.disconnect(worker, reason)
        self._kick()
        return worker

    def deregister(self, worker_id: str, kind: Optional[str] = None, lease: Optional[str] = None) -> Worker:
        """A slave leaving on its own (SIGTERM): it reported its tasks already. Needs the worker's lease."""
        worker = self.get_worker(worker_id, kind)
        if self.workers.heartbeat(worker_id, lease) is None:
            raise NotFoundError(f"{worker_id} is not registered with this lease")
        with self._lock:
            running = worker.running_tasks
            worker.state = WorkerState.GONE
        for task_id in running:
            self._end_task(task_id, TaskState.CANCELLED, error=f"{worker_id} left")
        logger.info("coordinator: %s deregistered", worker_id)
        self._kick()
        return worker

    def disconnect(self, worker: Worker, reason: str) -> None:
        """``worker`` is gone: tell it so."""
        with self._lock:
            worker.state = WorkerState.GONE
        try:
            # a slave that misses this call hears it from its next heartbeat's answer (state "gone"), as long
            # as this coordinator serves; a stopping one does not wait for that, so the call is retried once
            worker.client.post("/slave/v1/disconnect", {"reason": reason}, timeout=3.0, retries=1)
        except ParallelRLError as exc:
            logger.debug("coordinator: %s disconnect not acknowledged: %s", worker.worker_id, exc)

    def mark_lost(self, worker: Worker, reason: str) -> None:
        """A worker lost while silent past its silence limit (its lease ran out; our call to it failed in a
        partition) stays shown unreachable since its last heartbeat, until it registers again."""
        with self._lock:
            if not worker.state.active:
                return
            if time.monotonic() - worker.last_heartbeat > worker.silence_limit:
                worker.lost_silent_since = worker.silent_since
            worker.state = WorkerState.LOST
            running = worker.running_tasks
        logger.warning(
            "coordinator: %s at %s lost (%s); failing %s",
            worker.worker_id,
            worker.address,
            reason,
            running or "no task",
        )
        for task_id in running:
            self._end_task(task_id, TaskState.FAILED, error=f"{worker.worker_id} lost: {reason}")
        self._kick()

    def process_exited(self, pid: int, reason: str) -> Optional[Worker]:
        """A launcher saw the worker process ``pid`` (on this host) die: mark it lost now, not at lease expiry."""
        worker = next((w for w in self.workers.list(active_only=True) if w.pid == pid), None)
        if worker is not None:
            self.mark_lost(worker, reason)
        return worker

    def forget_workers(self, reason: str) -> None:
        """Every active worker is known dead (a whole-run resume): mark them lost and cancel their tasks, so
        replacements start at once instead of after a lease (a cancelled task uses up no attempt)."""
        for worker in self.workers.list(active_only=True):
            with self._lock:
                worker.state = WorkerState.LOST
                running = worker.running_tasks
            for task_id in running:
                self._end_task(task_id, TaskState.CANCELLED, error=f"{worker.worker_id}: {reason}")
        self._kick()

    def reap(self, ttl: float) -> List[Worker]:
        """Mark workers silent for ``ttl`` s lost; returns the ended workers forgotten now."""
        for worker in self.workers.expired(ttl):
            self.mark_lost(worker, f"no heartbeat for {ttl:g}s")
        forgotten = self.workers.forget_ended()
        for worker in forgotten:
            logger.debug("coordinator: forgot %s (%s)", worker.worker_id, worker.state.value)
        return forgotten

    # ---- the run is over ----------------------------------------------------------------------
    def release_workers(self) -> None:
        """Training is over and this coordinator serves on: remove every active worker as
        ``DELETE /collectors/<id>`` does (running tasks wrap up and report, then the worker is let go and is
        ``gone``); slaves that registered themselves exit. The workers are let go side by side: each call waits
        for its slave (or retries once after a refusal), and one after the other 256 unreachable collectors
        held a stopping coordinator for 26 s."""
        workers = self.workers.list(active_only=True)
        if workers:
            with concurrent.futures.ThreadPoolExecutor(
                min(RELEASE_THREADS, len(workers)), thread_name_prefix="release"
            ) as pool:
                list(pool.map(self._release, workers))

    def _release(self, worker: Worker) -> None:
        try:
            self.remove_worker(worker.worker_id, reason=f"training is over: {self._over()}")
        except RequestRefused as exc:  # it left on its own meanwhile
            logger.debug("coordinator: %s needs no release: %s", worker.worker_id, exc)

    def disconnect_all(self, reason: str) -> None:
        """The coordinator closes: tell every active worker to disconnect (best effort, one try each)."""
        for worker in self.workers.list(active_only=True):
            try:
                worker.client.post("/slave/v1/disconnect", {"reason": reason}, timeout=1.0, retries=0)
            except ParallelRLError as exc:
                logger.debug("coordinator: %s did not take the disconnect: %s", worker.worker_id, exc)
