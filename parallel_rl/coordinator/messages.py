"""The coordinator's message table: what each metadata message from a slave checks and does.

A batch is read in two passes: every message is checked first (its shape by the protocol's ``from_json``, then
here what needs the coordinator's state: the sender's role, task ownership, the chunk on the shared disk, the
policy published), with no side effects; then the ones that passed are applied in order. So a bad message
changes nothing, and the answer names each refused one, so the slave drops it instead of sending it again
forever. Each message type is one check/apply pair in :attr:`MessageTable.PAIRS`.

The table owns what only it uses (each worker's chunk layout, each role's run of repeated failures); it is given
the parts it calls (tasks, replay index, store, membership, flow control, commander), the run's counters it moves
(:class:`RunCounters`, the coordinator's, under its lock) and the coordinator's three verbs it needs (end a task,
finish the run, kick the commander), not the coordinator.
"""

from __future__ import annotations

import itertools
import logging
import operator
import re
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Protocol, Tuple, overload

from .. import protocol
from ..errors import (
    ForbiddenError,
    NotFoundError,
    ProtocolViolation,
    RequestRefused,
    StorageError,
    StorageFaultError,
    UnavailableError,
)
from ..protocol import Chunk, ChunkDamaged, Games, LearnInfo, Policy, TaskEnd
from ..storage import SharedStorage, StorageHealth
from ..storage.names import check_name
from .commander_api import Commander
from .flow_control import LONG_POLL_RETRY_AFTER, FlowControl
from .membership import Membership
from .replay import ReplayIndex
from .tasks import Task, TaskKind, TaskState, TaskTable
from .workers import Worker

logger = logging.getLogger(__name__)

# CoordinatorState.FAILED (coordinator.py imports this module, so not the other way round)
RUN_FAILED = "failed"
TASK_END_STATES = {
    "task_done": TaskState.FINISHED,
    "task_cancelled": TaskState.CANCELLED,
    "task_failed": TaskState.FAILED,
}


class RunCounters(Protocol):
    """The run's counters that metadata messages move (the coordinator's; read and written under its lock)."""

    env_steps: int
    episodes: int
    train_iter: int
    policy_version: int
    train_returns: Deque[float]
    policy_published_at: Dict[int, float]  # version -> when it was announced
    policy_env_steps: Dict[int, int]  # version -> the run's env steps when it was announced
    policy_propagation: List[float]  # seconds from an announcement to the first chunk stamped with it
    learn_info: Dict[str, Any]


class MessageTable:
    """Checks and applies the metadata messages of one coordinator (``coordinator.handle_metadata``)."""

    def __init__(
        self,
        *,
        counters: RunCounters,
        lock: threading.RLock,
        tasks: TaskTable,
        replay: ReplayIndex,
        storage: SharedStorage,
        check_health: StorageHealth,
        membership: Membership,
        flow: FlowControl,
        commander: Commander,
        worker_cfg: Any,
        max_repeated_failures: int,
        end_task: Callable[..., Optional[Task]],
        finish: Callable[[str, str], None],
        kick: Callable[[], None],
    ):
        """``check_health``: the store as the message checks see it; ``worker_cfg``: the ``parallel.worker``
        section (its back-offs, read as attributes); ``end_task``, ``finish``, ``kick``: the coordinator's."""
        self.counters, self._lock = counters, lock
        self.tasks, self.replay, self.storage, self.check_health = tasks, replay, storage, check_health
        self.membership, self.flow, self.commander = membership, flow, commander
        self.worker_cfg, self.max_repeated_failures = worker_cfg, int(max_repeated_failures)
        self._end_task, self._finish, self._kick = end_task, finish, kick
        # worker id -> (fixed bytes, bytes per row) of its chunk files (_check_chunk_file)
        self.chunk_layouts: Dict[str, Tuple[int, int]] = {}
        # task kind -> (error with numbers masked, failures in a row with it) as workers report them
        self.failure_runs: Dict[TaskKind, Tuple[str, int]] = {}

    def forget_worker(self, worker_id: str) -> None:
        """The worker is forgotten: its chunk layout goes too."""
        self.chunk_layouts.pop(worker_id, None)

    def handle_metadata(
        self,
        worker_id: str,
        messages: List[Dict[str, Any]],
        wait_for_allowance: float = 0.0,
        policy_version: Optional[int] = None,
        lease: Optional[str] = None,
        loaded_version: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Check a batch of messages from a slave, then apply the ones that passed; returns
        ``{"control": ..., "refused": [{"index", "type", "code", "message"}, ...]}``.

        With ``wait_for_allowance`` > 0 (a throttled collector) the answer waits up to that many seconds until
        collecting is allowed again, or until a policy newer than the collector's ``policy_version`` is
        announced. On-policy, ``loaded_version`` (the policy the collector acts with) must be the current one
        for its share of the next segment to end the wait."""
        worker = self.membership.heartbeat(worker_id, lease)
        answer: Dict[str, Any] = {"refused": self.check_and_apply(worker, messages) if messages else []}
        if wait_for_allowance > 0:
            with self.flow.long_poll() as slot:
                if slot:
                    self.flow.wait_for_allowance(wait_for_allowance, policy_version, worker, loaded_version)
                else:
                    answer["retry_after"] = LONG_POLL_RETRY_AFTER
        answer["control"] = self.flow.control_for(worker)
        return answer

    def check_and_apply(self, worker: Worker, messages: List[Any]) -> List[Dict[str, Any]]:
        """Check every message, apply the ones that passed; the refusals, each naming its message."""
        checked, refused = [], []
        for index, msg in enumerate(messages):
            try:
                checked.append(self.check_message(worker, msg))
            except RequestRefused as exc:
                kind = msg.get("type") if isinstance(msg, dict) else None
                refused.append(
                    {
                        "index": index,
                        "type": kind if isinstance(kind, str) else None,
                        "code": exc.code,
                        "message": str(exc),
                    }
                )
        logged = [r for r in refused if r["code"] != "unavailable"]  # the store failing is logged once, by its health
        if logged:
            logger.warning(
                "coordinator: refused %d of %d message(s) from %s: %s",
                len(logged),
                len(messages),
                worker.worker_id,
                "; ".join(f"#{r['index']} {r['type']}: {r['message']}" for r in logged[:3]),
            )
        for apply, run in itertools.groupby(checked, key=operator.itemgetter(0)):
            if apply in self.APPLY_RUNS:  # consecutive chunk announcements: one replay insert
                apply(self, worker, [parsed for _, parsed in run])
            else:
                for _, parsed in run:
                    apply(self, worker, parsed)
        return refused

    def check_message(self, worker: Worker, obj: Any) -> Tuple[Callable, Any]:
        """``(apply, parsed)`` for one message, or a RequestRefused saying why it is refused. Changes nothing."""
        cls = protocol.message_class(obj)
        if worker.kind not in cls.SENDERS:
            raise ForbiddenError(
                f"{worker.worker_id} is a {worker.kind}; {cls.TYPE!r} messages "
                f"come from {' or '.join(cls.SENDERS)}s only"
            )
        check, apply = self.PAIRS[cls.TYPE]
        try:
            return apply, check(self, worker, cls.from_json(obj))
        except StorageFaultError as exc:  # the store failed the check, not the message: the slave sends it again
            self.check_health.fault(str(exc))
            raise UnavailableError(f"{exc}; the message is kept and sent again") from None
        except StorageError as exc:
            raise ProtocolViolation(str(exc)) from None

    @overload
    def _owned_task(self, worker: Worker, task_id: str) -> Task: ...

    @overload
    def _owned_task(self, worker: Worker, task_id: Optional[str]) -> Optional[Task]: ...

    def _owned_task(self, worker: Worker, task_id: Optional[str]) -> Optional[Task]:
        """The task ``task_id`` names (None for None), which must run on ``worker``."""
        if task_id is None:
            return None
        task = self.tasks.get(task_id)
        if task is None:
            raise NotFoundError(f"no task {task_id!r:.60}")
        if task.worker_id != worker.worker_id:
            raise ForbiddenError(f"{task_id} belongs to {task.worker_id}, not {worker.worker_id}")
        return task

    # ---- chunk ------------------------------------------------------------------------------------------
    def _check_chunk(self, worker: Worker, msg: Chunk) -> Dict[str, Any]:
        name = check_name(msg.chunk)
        task = self._owned_task(worker, msg.task_id)
        newest, version = self.counters.policy_version, msg.policy_version
        if version > newest:  # a collector may load a checkpoint before its announcement reaches us
            on_disk = self.storage.policies.latest()
            newest = max(newest, -1 if on_disk is None else on_disk)
            if version > newest:
                raise ProtocolViolation(f"policy_version {version} was never published (newest {newest})")
        if not self.replay.known(name):  # a retried announcement is not read again
            self._check_chunk_file(worker, name, msg.size)
        return {
            "name": name,
            "size": msg.size,
            "version": version,
            "steps": msg.env_steps,
            "returns": msg.episode_returns,
            "task": task,
        }

    def _check_chunk_file(self, worker: Worker, name: str, size: int) -> None:
        """Chunk ``name`` must hold ``size`` rows (ProtocolViolation otherwise).

        A worker's chunks share one layout: the same columns, so a file's size is fixed bytes plus bytes per
        row times its rows. A chunk whose size in bytes is what the worker's layout gives for ``size`` rows
        holds ``size`` rows: one ``lstat``. Any other (the worker's first chunk, a new layout, a wrong size, a
        truncated file) has its column headers read (``zipfile``: ~150 us, most of an announcement's cost),
        and sets the worker's layout when its rows are right."""
        chunks, health = self.storage.chunks, self.check_health
        layout = self.chunk_layouts.get(worker.worker_id)
        try:
            if layout is not None and chunks.size(name) == layout[0] + layout[1] * size:
                rows = None  # its size says it holds `size` rows
            else:
                rows, nbytes, row_bytes = chunks.layout(name)
        except FileNotFoundError:
            raise ProtocolViolation(f"chunk {name!r} announced but not on the shared disk") from None
        if not health.healthy:  # the store answered a read again (a fault raised above)
            health.recovered()
            logger.info("coordinator: the shared store answers the chunk checks again")
        if rows is None:
            return
        if rows != size:
            raise ProtocolViolation(f"chunk {name!r} has {rows} rows on disk, announced {size=}")
        if row_bytes > 0:  # rows without bytes cannot be counted by size
            self.chunk_layouts[worker.worker_id] = (nbytes - row_bytes * rows, row_bytes)

    def _apply_chunks(self, worker: Worker, ms: List[Dict[str, Any]]) -> None:
        """A run of consecutive chunk announcements: one insert into the replay index (its files' headers were
        read by the check), then the counters and the tasks' progress."""
        c = self.counters
        added = self.replay.add_chunks(
            [(m["name"], m["size"], m["version"]) for m in ms], worker.worker_id, checked=True
        )
        ms = [m for m, new in zip(ms, added) if new]  # the rest were retried messages
        progress: Dict[str, list] = {}  # task id -> [task, env steps, chunks] of this run
        with self._lock:
            for m in ms:
                steps = m["steps"]
                c.env_steps += steps
                worker.env_steps += steps
                worker.policy_version = version = m["version"]
                self.flow.metering.chunk_counted(worker, version, steps)
                published = c.policy_published_at.pop(version, None)
                if published is not None:
                    c.policy_propagation.append(time.time() - published)
                    del c.policy_propagation[:-1000]
                c.episodes += len(m["returns"])
                c.train_returns.extend(m["returns"])
                if m["task"] is not None:
                    counts = progress.setdefault(m["task"].task_id, [m["task"], 0, 0])
                    counts[1] += steps
                    counts[2] += 1
        for task_id, (task, steps, chunks) in progress.items():
            self.tasks.update_progress(
                task_id,
                env_steps=task.progress.get("env_steps", 0) + steps,
                chunks=task.progress.get("chunks", 0) + chunks,
            )

    # ---- task ends -------------------------------------------------------------------------------------
    def _check_task_end(self, worker: Worker, msg: TaskEnd) -> Dict[str, Any]:
        task = self._owned_task(worker, msg.task_id)
        result: Optional[Dict[str, Any]] = msg.result
        error, state = msg.error, TASK_END_STATES[msg.TYPE]
        if state == TaskState.FAILED:
            error, result = error or "unknown error", None
        elif state == TaskState.FINISHED:
            error = None
            if task.kind == TaskKind.EVALUATOR:
                protocol.check_eval_result(msg.result)
        storage = msg.storage.to_json() if msg.storage is not None and state == TaskState.FAILED else None
        return {
            "task_id": task.task_id,
            "kind": task.kind,
            "state": state,
            "result": result,
            "error": error,
            "storage": storage,
        }

    def _apply_task_end(self, worker: Worker, m: Dict[str, Any]) -> None:
        report = m["storage"]
        wcfg = self.worker_cfg
        repeated = None
        if report is not None and not report["healthy"]:
            # failed on the shared store: no task for this worker for a while (before the commander hears of the
            # failure), or its next one would fail at once, and the next, in a hot loop
            self.membership.storage_report(worker, report)
            delay = worker.storage.back_off(wcfg.storage_backoff, wcfg.storage_max_backoff)
            logger.warning(
                "coordinator: %s failed %s on the shared store (%d in a row); no task for it for %.1fs",
                worker.worker_id,
                m["task_id"],
                worker.storage.failures,
                delay,
            )
        elif m["state"] == TaskState.FAILED:
            # its own error: the same one may come back with every task (a checkpoint that does not fit the model),
            # so the worker backs off, and the role's run of the same error is counted
            with self._lock:
                delay = worker.back_off(wcfg.failure_backoff, wcfg.failure_max_backoff)
                repeated = self._count_repeated_failure(m["kind"], m["error"])
            logger.warning(
                "coordinator: %s failed %s (%d in a row); no task for it for %.1fs",
                worker.worker_id,
                m["task_id"],
                worker.failures,
                delay,
            )
        elif m["state"] == TaskState.FINISHED:
            with self._lock:
                worker.failures, worker.retry_at = 0, 0.0
                self.failure_runs.pop(m["kind"], None)
        self._end_task(
            m["task_id"],
            m["state"],
            result=m["result"],
            error=m["error"],
            store_fault=report is not None and not report["healthy"],
        )
        if repeated is not None:
            self._finish(RUN_FAILED, repeated)

    def _count_repeated_failure(self, kind: TaskKind, error: str) -> Optional[str]:
        """Count a failure of a ``kind`` task reported by its worker; the reason to fail the run when the last
        ``max_repeated_failures`` such failures had the same error (numbers aside: a checkpoint's version, a
        size), else None. A finished task of the kind ends the run of failures."""
        limit = self.max_repeated_failures
        error = " ".join(error.split())  # one line, whatever the exception's message held
        signature = re.sub(r"\d+", "#", error)
        last, count = self.failure_runs.get(kind, (None, 0))
        count = count + 1 if signature == last else 1
        self.failure_runs[kind] = (signature, count)
        if limit <= 0 or count < limit:
            return None
        return (
            f"{kind.value} tasks failed {count} times in a row with the same error "
            f"(parallel.commander.max_repeated_failures={limit}): {error[:500]}"
        )

    # ---- learner messages ------------------------------------------------------------------------------
    def _check_policy(self, worker: Worker, msg: Policy) -> Dict[str, Any]:
        if not self.storage.policies.exists(msg.version):
            raise ProtocolViolation(f"policy {msg.version} announced but its checkpoint is not on the shared disk")
        return {"version": msg.version}

    def _apply_policy(self, worker: Worker, m: Dict[str, Any]) -> None:
        c, version = self.counters, m["version"]
        with self._lock:
            worker.policy_version = version
            if version > c.policy_version:
                c.policy_version = version
                c.policy_published_at[version] = time.time()
                c.policy_env_steps[version] = c.env_steps
                for table in (c.policy_published_at, c.policy_env_steps):  # the newest 1,000 versions' only
                    for old in [v for v in table if v < version - 1000]:
                        del table[old]
        self.flow.notify_progress()  # throttled collectors pick the new policy up now
        self._kick()

    def _check_learn_info(self, worker: Worker, msg: LearnInfo) -> Dict[str, Any]:
        return {"train_iter": msg.train_iter, "info": dict(msg.info), "task": self._owned_task(worker, msg.task_id)}

    def _apply_learn_info(self, worker: Worker, m: Dict[str, Any]) -> None:
        c = self.counters
        with self._lock:
            worker.train_iter = m["train_iter"]
            c.train_iter = max(c.train_iter, worker.train_iter)
            c.learn_info = m["info"]
        self.flow.notify_progress()
        if m["task"] is not None:
            self.tasks.update_progress(m["task"].task_id, train_iter=worker.train_iter)

    def _check_chunk_damaged(self, worker: Worker, msg: ChunkDamaged) -> Dict[str, Any]:
        return {"name": check_name(msg.chunk), "error": " ".join(msg.error.split())[:300]}

    def _apply_chunk_damaged(self, worker: Worker, m: Dict[str, Any]) -> None:
        """A learner could not read a chunk (a damaged file, a column of objects, rows of another layout): its
        rows leave the replay index (quarantined), or every batch that samples them would lose them again, and
        a resumed run would too. Logged once: a chunk already quarantined or not indexed changes nothing."""
        replay = self.replay
        rows = replay.quarantine(m["name"])
        if rows is not None:
            logger.error(
                "coordinator: %s cannot read chunk %r (%s): quarantined, %d row(s) dropped from the replay "
                "index, its file deleted after the grace period (%d chunk(s) quarantined in all)",
                worker.worker_id,
                m["name"],
                m["error"],
                rows,
                replay.chunks_quarantined,
            )

    # ---- two-player games ------------------------------------------------------------------------------
    def _check_games(self, worker: Worker, msg: Games) -> Dict[str, Any]:
        return {"opponent": msg.opponent, "counts": msg.counts, "task": self._owned_task(worker, msg.task_id)}

    def _apply_games(self, worker: Worker, m: Dict[str, Any]) -> None:
        on_games = getattr(self.commander, "on_games", None)
        if on_games is None:
            logger.warning(
                "coordinator: %s sent game results but the %s keeps no league (set parallel.commander.type='league')",
                worker.worker_id,
                type(self.commander).__name__,
            )
            return
        on_games(m["opponent"], m["counts"])
        task = m["task"]
        self.tasks.update_progress(task.task_id, games=task.progress.get("games", 0) + sum(m["counts"].values()))

    # wire type -> (check (no side effects), apply); who may send each is the protocol's (Message.SENDERS)
    PAIRS: Dict[str, Tuple[Callable, Callable]] = {
        Chunk.TYPE: (_check_chunk, _apply_chunks),
        "task_done": (_check_task_end, _apply_task_end),
        "task_cancelled": (_check_task_end, _apply_task_end),
        "task_failed": (_check_task_end, _apply_task_end),
        Policy.TYPE: (_check_policy, _apply_policy),
        LearnInfo.TYPE: (_check_learn_info, _apply_learn_info),
        Games.TYPE: (_check_games, _apply_games),
        ChunkDamaged.TYPE: (_check_chunk_damaged, _apply_chunk_damaged),
    }
    # applies that take a run of consecutive messages of their type at once
    APPLY_RUNS = (_apply_chunks,)
