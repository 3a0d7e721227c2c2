"""The slave's side of the conversation it starts with the coordinator (slave -> master): registration (and
registering again when the coordinator forgot it), heartbeats that keep its lease, and metadata batches.

:class:`CoordinatorLink` is a part of :class:`~parallel_rl.slave.slave.Slave` (its base class), kept apart
because it is the one half of the slave that calls out; the master -> slave half is :mod:`.slave_app`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, List, Optional, Set


from ..errors import ParallelRLError, PeerUnavailableError, RemoteError, UnavailableError
from ..protocol import MESSAGES, Heartbeat, MetadataBatch, Registration, StorageReport, TimeBreakdown
from ..transport import HttpClient
from .defaults import worker_default_config  # noqa: F401 (the section this module reads)
from .mail import Outbox, SlaveTask

logger = logging.getLogger(__name__)

# seconds a slave the coordinator forgot keeps trying to register again before it exits
REREGISTER_SECONDS = 30.0
# a slave started with --coordinator retries its first registration this long (a coordinator still booting, as
# under docker compose), then exits
REGISTER_SECONDS = 60.0
# a registered slave whose heartbeats go unanswered this long (or 3 leases, when longer) takes the coordinator for
# gone and exits; shorter, a network partition of half a minute ended the workers it cut off (toy leases of 2 s:
# after 6 s)
SILENCE_SECONDS = 60.0


class CoordinatorLink:
    """Registration, heartbeats and metadata of a slave. It uses the slave's identity (``kind``, ``address``,
    ``token``, ``worker_id``, ``preferred_id``), its link state (``coordinator_url``, the ``coordinator``
    client, ``outbox``, the ``connected`` / ``_answered`` / ``_let_go`` / ``_stop`` events, the heartbeat
    interval and ttl, ``inbox``, ``problems``, the running tasks under ``_lock``, ``storage``) and its reactions
    (``on_control``, ``leave``, ``_release``, ``request_stop``), all set up by
    :class:`~parallel_rl.slave.slave.Slave`."""

    kind: str
    address: str
    token: Optional[str]
    worker_id: Optional[str]
    preferred_id: Optional[str]
    coordinator_url: Optional[str]
    coordinator: Optional[HttpClient]
    outbox: Optional[Outbox]
    request_timeout: float
    fatal_error: Optional[str]
    connected: threading.Event
    _answered: threading.Event
    _let_go: threading.Event
    _stop: threading.Event
    _beat_now: threading.Event
    adoption_tasks: Set[str]  # the tasks the coordinator gave us since it last connected us
    _heartbeat_interval: float
    _heartbeat_ttl: float
    # monotonic: our last answered heartbeat, while the heartbeats since went unanswered (None: answered)
    _unanswered_since: Optional[float] = None
    # how long registering again (the coordinator forgot us) is retried before the slave exits with an error
    reregister_seconds = REREGISTER_SECONDS

    def _send_metadata(self, messages: List[dict]) -> Optional[dict]:
        """Send a batch as the current worker id. While the slave registers again (the coordinator lost or forgot
        it) the batch is kept: UnavailableError makes the outbox send it again with backoff, and once adopted
        again it goes under the new id (the coordinator indexes a chunk announced twice once). Only a slave the
        coordinator let go drops what it could not send."""
        worker_id, coordinator = self.worker_id, self.coordinator
        if worker_id is None or coordinator is None:
            if self._let_go.is_set():
                logger.warning("%s: not connected; dropping %d message(s)", self.kind, len(messages))
                return None
            raise UnavailableError(
                f"not registered with coordinator {self.coordinator_url} (registering again); "
                f"{len(messages)} message(s) kept"
            )
        messages = self._of_this_adoption(messages)
        if not messages:
            return None
        try:
            answer = coordinator.post(f"/api/v1/workers/{worker_id}/metadata", MetadataBatch(messages).to_json())
        except RemoteError as exc:
            if exc.status != 404:
                raise
            if self._let_go.is_set():
                logger.warning(
                    "%s: coordinator no longer knows %s; dropping %d message(s)", self.kind, worker_id, len(messages)
                )
                return None
            # lost (its lease ran out) or forgotten: the heartbeat thread registers us again meanwhile
            raise UnavailableError(
                f"coordinator {self.coordinator_url} no longer knows {worker_id} (registering "
                f"again); {len(messages)} message(s) kept"
            ) from None
        retry = []
        for refusal in answer.get("refused") or []:  # refused messages are dropped: sent again, they fail again
            index = refusal.get("index")
            if refusal.get("code") == "unavailable" and isinstance(index, int) and 0 <= index < len(messages):
                retry.append(messages[index])  # the store failed the coordinator's check, not the message
                continue
            logger.error(
                "%s %s: coordinator refused message %s (%s): %s",
                self.kind,
                worker_id,
                refusal.get("index"),
                refusal.get("type"),
                refusal.get("message"),
            )
            if self.outbox is not None:
                self.outbox.dropped += 1
        if retry and self.outbox is not None:
            first = next(r for r in answer["refused"] if r.get("code") == "unavailable")
            self.outbox.defer(
                retry,
                f"the coordinator could not check {len(retry)} message(s), sending them again: {first.get('message')}",
            )
        return answer["control"]

    def _of_this_adoption(self, messages: List[dict]) -> List[dict]:
        """``messages`` as this adoption may send them. One naming a task of an earlier adoption (queued before
        the coordinator lost us; it failed that task then) would be refused: a chunk goes without its task (its
        rows are still indexed), the rest (task ends, learn info, games of that task) are dropped here."""
        tasks = self.adoption_tasks
        kept, dropped = [], 0
        for message in messages:
            task_id = message.get("task_id") if isinstance(message, dict) else None
            if task_id is None or task_id in tasks:
                kept.append(message)
            elif message.get("type") == "chunk":
                kept.append({k: v for k, v in message.items() if k != "task_id"})
            else:
                dropped += 1
        if dropped:
            logger.info(
                "%s %s: dropping %d message(s) about tasks of an earlier registration (the coordinator "
                "ended them when it lost us)",
                self.kind,
                self.worker_id,
                dropped,
            )
        return kept

    def send_metadata(self, metadata: dict, urgent: bool = False) -> None:
        if self.outbox is not None:
            self.outbox.put(metadata, urgent=urgent)

    def report_end(
        self,
        task: SlaveTask,
        kind: str,
        result: Dict[str, Any],
        error: Optional[str] = None,
        storage: Optional[Dict[str, Any]] = None,
    ) -> None:
        """``storage``: the store's health, when the task failed on it (the coordinator backs off too)."""
        message = MESSAGES[kind](
            task_id=task.task_id,
            result=result or {},
            error=error or None,
            storage=None if storage is None else StorageReport.from_json(storage),
        )
        self.send_metadata(message.to_json(), urgent=True)

    def register(self, deadline_seconds: float = REGISTER_SECONDS) -> None:
        """Self-registration: ask the coordinator to adopt us (it calls /slave/v1/connect back)."""
        client = HttpClient(self.coordinator_url, self.token, timeout=self.request_timeout + 5, max_retries=0)
        self._answered.clear()
        deadline = time.monotonic() + deadline_seconds
        delay = 0.05
        try:
            while True:
                try:
                    body = Registration(self.address, self.preferred_id or None).to_json()
                    client.post(f"/api/v1/{self.kind}s", body)
                    break
                except PeerUnavailableError as exc:
                    if time.monotonic() + delay > deadline or self._stop.is_set():
                        raise PeerUnavailableError(
                            f"coordinator {self.coordinator_url} unreachable for {deadline_seconds:g}s: {exc}"
                        ) from None
                    if delay >= 1.0:  # past the first ~1.5 s (a coordinator still booting): say so, once a second
                        logger.warning(
                            "%s: registering with %s failed, trying again in %.1fs (until %.0fs from the start): %s",
                            self.kind,
                            self.coordinator_url,
                            delay,
                            deadline_seconds,
                            exc,
                        )
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
                    self.fatal_error = (
                        f"could not register again with coordinator {self.coordinator_url} within "
                        f"{budget:g}s (the last try: {exc})"
                    )
                    logger.error("%s: %s; exiting", self.kind, self.fatal_error)
                    self.request_stop()
                    return
                logger.warning("%s: registering again failed (trying again in %.2fs): %s", self.kind, delay, exc)
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)

    def storage_health(self) -> Optional[Dict[str, Any]]:
        """Whether the shared store works for this process (None before it is opened)."""
        return self.storage.health.to_dict() if self.storage is not None else None

    def heartbeat_body(self) -> Dict[str, Any]:
        """What each heartbeat tells the coordinator (a LearnerAggregator adds its ranks)."""
        health = self.storage_health()
        setup = self.readiness.report()
        unanswered = self._unanswered_since
        return Heartbeat(
            problems=list(self.problems),
            tasks=self.held_task_ids(),
            unanswered_seconds=None if unanswered is None else round(time.monotonic() - unanswered, 3),
            storage=None if health is None else StorageReport.from_json(health),
            # the phases' clocks are made by the set-up
            time_breakdown=self.time_breakdown() if setup["ready"] else None,
            **setup,
        ).to_json()

    def time_breakdown(self) -> Optional[TimeBreakdown]:
        """Where this slave's time went since it was set up (None before; the shells count it)."""
        return None

    def held_task_ids(self) -> List[str]:
        """Tasks this slave holds: queued, running, or with an end report not yet delivered. Read in the order
        a task moves (inbox, then running, then the outbox), so a task moving meanwhile is still seen."""
        queued = self.inbox.task_ids()
        with self._lock:
            running = list(self._running)
        unsent = self.outbox.task_ids() if self.outbox is not None else []
        tasks = self.adoption_tasks  # an unsent report about an earlier registration's task is not one we hold
        return sorted(set(queued + running + [t for t in unsent if t in tasks]))

    def _heartbeat_loop(self) -> None:
        last_ok = time.monotonic()
        self._unanswered_since = None
        while True:
            self._beat_now.wait(self._heartbeat_interval)  # or sooner: a set-up ended, a stop
            self._beat_now.clear()
            if self._stop.is_set():
                return
            worker_id = self.worker_id
            if worker_id is None or self.coordinator is None:
                continue
            try:
                control = self.coordinator.post(
                    f"/api/v1/workers/{worker_id}/heartbeat",
                    self.heartbeat_body(),
                    retries=0,
                    timeout=max(1.0, self._heartbeat_interval),
                )
                last_ok, self._unanswered_since = time.monotonic(), None
                self.on_control(control)
                if control.get("state") == "gone" and self.worker_id == worker_id and not self._stop.is_set():
                    # removed, and the coordinator's disconnect call did not reach us (it is sent once, with a
                    # short timeout): its answer to our heartbeat says the same
                    self.leave("removed (told by the heartbeat's answer)")
            except RemoteError as exc:
                self._unanswered_since = None  # an answer, if a refusal
                # only for the identity this heartbeat was sent for: a late answer about an id we have since
                # been let go from must not tear down the adoption that followed
                if (
                    exc.status == 404
                    and not self._stop.is_set()
                    and not self._let_go.is_set()
                    and self.worker_id == worker_id
                ):
                    logger.warning("%s: coordinator forgot %s (%s); registering again", self.kind, worker_id, exc)
                    self._release("re-register")
                    self._register_again()
            except ParallelRLError as exc:
                silent = time.monotonic() - last_ok
                self._unanswered_since = last_ok  # the next heartbeats say so: they may arrive, answers not
                logger.warning(
                    "%s %s: heartbeat failed (%.1fs without the coordinator): %s", self.kind, worker_id, silent, exc
                )
                if silent > max(3 * self._heartbeat_ttl, SILENCE_SECONDS) and self.coordinator_url:
                    self.fatal_error = f"coordinator {self.coordinator_url} unreachable for {silent:.0f}s"
                    logger.error("%s: %s; exiting", self.kind, self.fatal_error)
                    self.request_stop()
