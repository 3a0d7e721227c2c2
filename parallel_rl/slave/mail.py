"""What passes between a slave and its coordinator, queued: tasks in (:class:`TaskInbox`, taken by the worker
loop) and metadata out (:class:`Outbox`, batched and sent from its own thread)."""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional

from ..errors import ParallelRLError, RemoteError
from ..runtime import guarded_thread

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


# messages in one call at most: the coordinator checks each chunk's file on the store (on an object store a request
# each), and a backlog sent whole after a store outage (110 chunks) outlasted the call's timeout and was sent again,
# grown, while the coordinator still checked the first copy
MAX_BATCH = 32

# message types of which only the newest matters (the coordinator keeps the highest policy version and the last
# learn info): while the coordinator is out of reach the older ones queued are dropped, not sent
LATEST_ONLY = ("policy", "learn_info")


def coalesce(messages: List[dict]) -> List[dict]:
    """``messages`` without those a newer message of the same ``LATEST_ONLY`` type (and task) supersedes. A learner
    cut off from its coordinator's store for 30 s queued ~1,200 policy announcements (one per 10 iterations), each
    checked on the store when they went at last: the batch outlasted the call's timeout, was sent again, grew, and
    the announcements of checkpoints pruned meanwhile were refused."""
    newest: Dict[tuple, int] = {}
    for i, m in enumerate(messages):
        if isinstance(m, dict) and m.get("type") in LATEST_ONLY:
            newest[(m["type"], m.get("task_id"))] = i
    if len(newest) == sum(1 for m in messages if isinstance(m, dict) and m.get("type") in LATEST_ONLY):
        return messages
    return [
        m
        for i, m in enumerate(messages)
        if not (isinstance(m, dict) and m.get("type") in LATEST_ONLY) or newest[(m["type"], m.get("task_id"))] == i
    ]


class Outbox:
    """Batches metadata messages and sends them from one thread.

    A batch leaves when it is ``flush_interval`` old, at once for an urgent
    message, or on :meth:`flush`. Each answer carries a control block handed to
    ``on_control``. A batch holds at most ``MAX_BATCH`` messages (a backlog
    goes in batches, one after the other). A send that did not reach the
    coordinator keeps the messages and retries with backoff (of the
    ``LATEST_ONLY`` kinds only the newest goes); a batch the coordinator refused (a 4xx
    answer) or that cannot be sent at all is dropped and logged, since retrying
    it would block every later message. Messages of a delivered batch that
    ``send`` hands to :meth:`defer` (the coordinator could not check them: its
    store failed) are sent again with the same backoff. The thread never dies
    of one batch; if it dies anyway, ``on_death`` hears of it.
    """

    def __init__(
        self,
        send: Callable[[List[dict]], Optional[dict]],
        on_control: Callable[[dict], None],
        flush_interval: float = 0.05,
        name: str = "outbox",
        on_death: Optional[Callable[[str], None]] = None,
    ):
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
                queued = coalesce(self._messages)
                batch, self._messages = queued[:MAX_BATCH], queued[MAX_BATCH:]
                self._urgent = bool(self._messages)  # the rest goes right after this batch
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
            return [
                m["task_id"]
                for m in self._messages + self._batch
                if isinstance(m, dict) and isinstance(m.get("task_id"), str)
            ]

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

    def empty(self) -> bool:
        """Nothing queued and nothing in flight: every message put so far reached the coordinator."""
        with self._cond:
            return not self._messages and not self._batch

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
