"""The worker registry: who is in the cluster, and whether their lease is alive.

Lifecycle: register -> connecting -> setting up -> idle <-> busy -> (leaving ->)
gone; a worker whose last heartbeat is older than the TTL is reaped as lost. A
lost or gone worker's address may register again; it gets a new worker id. A
registration of an address still connecting or setting up is that worker again. A slave may ask for an id
(``preferred_id``: the launcher's name for it, or the id it had before the
coordinator restarted); it gets it unless another entry holds it.

Identity: every worker gets a lease token at registration, which it sends
with every call (heartbeat, metadata, sample, deregistration); a call with
another worker's id but not its lease is refused. ``next_id`` (the id
counters) and each worker's lease digest (SHA-256 of the token) are plain
values, so the registry's identity can be saved and restored; the tokens
themselves never leave the process (a snapshot holds only their digests).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from ..protocol import TimeBreakdown
from ..transport import ApiError, HttpClient
from ..storage import StorageHealth


_WORKER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def lease_digest(lease: str) -> str:
    """The SHA-256 (hex) of a lease token: leases are random 128-bit tokens, so an unsalted digest cannot be
    turned back into one."""
    return hashlib.sha256(lease.encode()).hexdigest()


class WorkerState(str, Enum):
    CONNECTING = "connecting"  # registered, the coordinator is connecting to it: no tasks yet
    SETTING_UP = "setting_up"  # connected, building its envs and model (its heartbeats say when it is ready)
    IDLE = "idle"
    BUSY = "busy"
    LEAVING = "leaving"  # removal requested: no new tasks, running task wraps up
    LOST = "lost"  # lease expired or unreachable
    GONE = "gone"  # deregistered

    @property
    def active(self) -> bool:
        return self in (
            WorkerState.CONNECTING,
            WorkerState.SETTING_UP,
            WorkerState.IDLE,
            WorkerState.BUSY,
            WorkerState.LEAVING,
        )

    @property
    def pending(self) -> bool:
        """Registered but not ready for tasks yet."""
        return self in (WorkerState.CONNECTING, WorkerState.SETTING_UP)


@dataclass
class Worker:
    worker_id: str
    kind: str  # collector | learner
    address: str
    client: HttpClient = field(repr=False)
    state: WorkerState = WorkerState.IDLE
    registered_at: float = field(default_factory=time.time)
    last_heartbeat: float = field(default_factory=time.monotonic)
    current_task: Optional[str] = None
    # tasks the worker holds that this coordinator never issued (asked to stop in the control block)
    stale_tasks: List[str] = field(default_factory=list)
    eval_task: Optional[str] = None
    env_steps: int = 0
    train_iter: int = 0
    policy_version: int = -1
    tasks_done: int = 0
    pid: Optional[int] = None  # the slave's process id on its own host, from its health answer
    lease: str = field(default_factory=lambda: secrets.token_urlsafe(16), repr=False)
    problems: List[str] = field(default_factory=list)  # what the slave reports went wrong in it
    refusals: int = 0  # tasks refused in a row
    failures: int = 0  # tasks it reported failed in a row (its own errors, not the store's)
    removed: bool = False  # an operator removed it (DELETE): a supervisor does not replace its process
    retry_at: float = field(default=0.0, repr=False)  # monotonic: no task before (backing off after failures)
    ended_at: Optional[float] = field(default=None, repr=False)  # monotonic: first seen lost or gone
    # a LearnerAggregator's data-parallel ranks as its heartbeats list them: rank, pid, state
    ranks: List[Dict[str, Any]] = field(default_factory=list)
    # the shared store as this worker sees it (its reports), and the backoff after tasks it failed on the store
    storage: StorageHealth = field(default_factory=lambda: StorageHealth(name=None), repr=False)
    # where its time went since it was set up, as its last heartbeat said (None before the first report)
    time_breakdown: Optional[TimeBreakdown] = field(default=None, repr=False)

    # unreachability (GET /api/v1/cluster's ``unreachable``): a heartbeat is missed past ``silence_limit`` s (half
    # the lease), or the worker says the answers to its calls stopped coming (``answers_lost_since``, epoch s: its
    # requests arrive, our answers do not); a worker lost for its silence keeps the time its silence began
    silence_limit: float = field(default=5.0, repr=False)
    answers_lost_since: Optional[float] = field(default=None, repr=False)
    lost_silent_since: Optional[float] = field(default=None, repr=False)

    # SHA-256 of ``lease`` (hex): what a call's lease is checked against, and all a snapshot keeps of it (a worker
    # restored from a snapshot has the digest only: its token stays with the slave)
    lease_digest: str = field(default="", repr=False)

    def __post_init__(self):
        if self.lease and not self.lease_digest:
            self.lease_digest = lease_digest(self.lease)

    @property
    def running_tasks(self) -> List[str]:
        """Ids of the tasks this worker runs now (a collector may run an evaluation inside a collection)."""
        return [t for t in (self.current_task, self.eval_task) if t]

    @property
    def assignable(self) -> bool:
        """Can take a task now: idle or busy (an evaluation beside a collection), and not backing off after a
        task it failed (on the shared store, or on its own error)."""
        return (
            self.state in (WorkerState.IDLE, WorkerState.BUSY)
            and self.storage.ready
            and time.monotonic() >= self.retry_at
        )

    @property
    def silent_since(self) -> float:
        """Epoch seconds of its last heartbeat."""
        return time.time() - (time.monotonic() - self.last_heartbeat)

    @property
    def unreachable_since(self) -> Optional[float]:
        """Epoch seconds since which the coordinator and this worker do not reach each other (None: they do):
        its last heartbeat when it has been silent past ``silence_limit`` (lost for that silence: until it is
        forgotten), or when the worker said our answers stopped reaching it."""
        if self.state == WorkerState.LOST:
            return self.lost_silent_since
        if not self.state.active or self.state == WorkerState.CONNECTING:
            return None
        if time.monotonic() - self.last_heartbeat > self.silence_limit:
            return self.silent_since
        return self.answers_lost_since

    def back_off(self, backoff: float, max_backoff: float) -> float:
        """It reported a task failed: seconds before its next task (exponential in failures in a row, capped)."""
        self.failures += 1
        delay = min(float(max_backoff), float(backoff) * 2 ** (self.failures - 1))
        self.retry_at = time.monotonic() + delay
        return delay

    def to_dict(self) -> Dict[str, Any]:
        out = {
            "worker_id": self.worker_id,
            "kind": self.kind,
            "address": self.address,
            "pid": self.pid,
            "state": self.state.value,
            "current_task": self.current_task,
            "registered_at": self.registered_at,
            "seconds_since_heartbeat": round(time.monotonic() - self.last_heartbeat, 3),
            "unreachable_since": self.unreachable_since,
            "policy_version": self.policy_version,
            "tasks_done": self.tasks_done,
            "problems": list(self.problems),
            "storage": self.storage.to_dict(),
            "time_breakdown": self.time_breakdown.view() if self.time_breakdown is not None else None,
        }
        if self.kind == "collector":
            out["env_steps"] = self.env_steps
            out["eval_task"] = self.eval_task
        else:
            out["train_iter"] = self.train_iter
            out["ranks"] = [dict(r) for r in self.ranks]
        return out


class WorkerRegistry:
    """The workers by id. Lost and gone workers stay listed for ``retention`` seconds (at most ``max_ended``
    of them), then are forgotten; their HTTP connections are closed when :meth:`forget_ended` first sees
    them ended."""

    def __init__(self, retention: float = 600.0, max_ended: int = 1000):
        self._lock = threading.RLock()
        self._workers: Dict[str, Worker] = {}
        self.next_id = {"collector": 1, "learner": 1}
        self.retention, self.max_ended = float(retention), int(max_ended)
        self.forgotten = 0

    def register(self, kind: str, address: str, client: HttpClient, preferred_id: Optional[str] = None) -> Worker:
        """A new entry (state connecting) named ``preferred_id`` when no entry holds it, else ``<kind>-<n>``.

        An address whose entry is still pending (connecting, setting up) is that worker registering again (its
        first registration timed out, or it was added meanwhile): its entry is returned, with its own client
        (``client`` is not kept). An address registered and ready is a 409."""
        if preferred_id is not None and not (isinstance(preferred_id, str) and _WORKER_ID_RE.fullmatch(preferred_id)):
            raise ApiError(400, "bad_request", f"worker_id must match {_WORKER_ID_RE.pattern}, got {preferred_id!r}")
        with self._lock:
            for w in self._workers.values():
                if w.address == address and w.state.active:
                    if w.state.pending and w.kind == kind:
                        return w
                    raise ApiError(
                        409, "conflict", f"{address} is already registered as {w.worker_id} ({w.state.value})"
                    )
            worker_id = preferred_id if preferred_id and preferred_id not in self._workers else None
            while worker_id is None or worker_id in self._workers:
                number, self.next_id[kind] = self.next_id[kind], self.next_id[kind] + 1
                worker_id = f"{kind}-{number}"
            worker = Worker(worker_id, kind, address, client, state=WorkerState.CONNECTING)
            self._workers[worker.worker_id] = worker
        self.forget_ended()  # a burst of joins and losses between two sweeps stays bounded too
        return worker

    def forget_ended(self) -> List[Worker]:
        """Close the connections of workers that ended (lost, gone) since the last call, and forget those
        ended more than ``retention`` s ago or beyond the newest ``max_ended``; returns the forgotten."""
        now = time.monotonic()
        with self._lock:
            ended = [w for w in self._workers.values() if not w.state.active]
            newly = [w for w in ended if w.ended_at is None]
            for w in newly:
                w.ended_at = now
            ended.sort(key=lambda w: w.ended_at)
            stale = [w for w in ended if now - w.ended_at > self.retention]
            stale += [w for w in ended[: max(0, len(ended) - self.max_ended)] if w not in stale]
            for w in stale:
                del self._workers[w.worker_id]
            self.forgotten += len(stale)
        for w in newly + stale:  # outside the lock: closing a pool may wait for its sockets
            w.client.close()
        return stale

    def get(self, worker_id: str) -> Optional[Worker]:
        with self._lock:
            return self._workers.get(worker_id)

    def list(self, kind: Optional[str] = None, active_only: bool = False) -> List[Worker]:
        with self._lock:
            return [
                w
                for w in self._workers.values()
                if (kind is None or w.kind == kind) and (not active_only or w.state.active)
            ]

    def with_lease(self, worker_id: str, lease: Optional[str]) -> Optional[Worker]:
        """The worker (in any state) when ``lease`` is its lease, else None."""
        with self._lock:
            worker = self._workers.get(worker_id)
            if worker is None or not isinstance(lease, str):
                return None
            return worker if hmac.compare_digest(lease_digest(lease).encode(), worker.lease_digest.encode()) else None

    def heartbeat(self, worker_id: str, lease: Optional[str]) -> Optional[Worker]:
        """Renew the lease; None when the worker is unknown, no longer active, or ``lease`` is not its lease."""
        with self._lock:
            worker = self.with_lease(worker_id, lease)
            if worker is None or not worker.state.active:
                return None
            worker.last_heartbeat = time.monotonic()
            return worker

    def expired(self, ttl: float) -> List[Worker]:
        """Active workers whose lease ran out (the caller marks them lost)."""
        now = time.monotonic()
        with self._lock:
            # a worker still connecting is not reaped: its lease starts when the connect call (bounded by its
            # timeout) returns; one setting up heartbeats from its own thread meanwhile, and is reaped as any
            return [
                w
                for w in self._workers.values()
                if w.state.active and w.state != WorkerState.CONNECTING and now - w.last_heartbeat > ttl
            ]

    _SAVED = (
        "worker_id",
        "kind",
        "address",
        "registered_at",
        "current_task",
        "eval_task",
        "env_steps",
        "train_iter",
        "policy_version",
        "tasks_done",
        "pid",
    )

    def state_dict(self) -> List[Dict[str, Any]]:
        """Every entry as plain JSON values (no client); with its lease's digest, never the token (snapshots are
        files others may read), so that a worker of a restarted coordinator is re-adopted under its id when it
        calls with the token it holds."""
        with self._lock:
            return [
                {**{k: getattr(w, k) for k in self._SAVED}, "state": w.state.value, "lease_sha256": w.lease_digest}
                for w in self._workers.values()
            ]

    def load_state_dict(self, items: List[Dict[str, Any]], make_client) -> None:
        """Restore saved entries; active ones get a fresh lease (a worker that is gone lets it run out).

        A worker saved while the coordinator was connecting to it is restored setting up: the connect call died
        with the old process, so either the slave took it (and its heartbeats re-adopt it, saying when it is
        ready) or it did not (and its lease runs out: it is reaped as lost, its address free to register again).
        Restored as connecting it was never reaped and never given a task."""
        with self._lock:
            self._workers = {}
            for item in items:
                digest = item.get("lease_sha256")
                if not isinstance(digest, str):  # a snapshot written before digests held the token itself
                    token = item.get("lease_token")
                    digest = lease_digest(token) if isinstance(token, str) else None
                state = WorkerState(item["state"])
                if state == WorkerState.CONNECTING:
                    state = WorkerState.SETTING_UP
                worker = Worker(
                    client=make_client(item["address"]),
                    state=state,
                    lease="",
                    **{k: item[k] for k in self._SAVED},
                    # no digest: no lease opens it (the worker registers again)
                    lease_digest=digest or secrets.token_hex(32),
                )
                self._workers[worker.worker_id] = worker

    def unreachable(self) -> List[Dict[str, Any]]:
        """The workers the coordinator does not reach now, oldest fault first: active ones silent past their
        limit or whose answers are lost, and ones lost for their silence whose address has not registered again
        (a worker that comes back gets a new id: its old entry is history, not a fault)."""
        now = time.time()
        with self._lock:
            back = {w.address for w in self._workers.values() if w.state.active}
            out = [
                {
                    "worker_id": w.worker_id,
                    "kind": w.kind,
                    "address": w.address,
                    "state": w.state.value,
                    "since": since,
                    "seconds": round(max(0.0, now - since), 3),
                }
                for w in self._workers.values()
                for since in [w.unreachable_since]
                if since is not None and (w.state.active or w.address not in back)
            ]
        return sorted(out, key=lambda u: u["since"])

    def counts(self) -> Dict[str, Dict[str, int]]:
        with self._lock:
            out = {k: {s.value: 0 for s in WorkerState} for k in ("collector", "learner")}
            for w in self._workers.values():
                out[w.kind][w.state.value] += 1
            return out
