"""The task table: every task the coordinator hands out, with its lifecycle.

pending -> running -> finished | failed | cancelled. A failed task is never
reused: the commander creates a replacement (``replaces`` names the original)
whose ``attempts`` continue the count, and whose ``failures`` hold the times of
the chain's failures within the commander's window.

Task ids are ``<kind>-<incarnation>-<number>`` (``collector-3fa9c2-000012``):
the incarnation is random for each task table, a restored one included, so a
message about a task of an earlier coordinator on the same shared directory can
never name a task of this one. (A resumed process must not go on with the saved
incarnation: the process it replaces went on issuing ids after its last
snapshot, and the numbers continue from the snapshot's.) Restored tasks keep
their ids.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional


class TaskKind(str, Enum):
    COLLECTOR = "collector"
    LEARNER = "learner"
    EVALUATOR = "evaluator"


class TaskState(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in (TaskState.FINISHED, TaskState.FAILED, TaskState.CANCELLED)


@dataclass
class Task:
    task_id: str
    kind: TaskKind
    spec: Dict[str, Any]
    state: TaskState = TaskState.PENDING
    worker_id: Optional[str] = None
    created_at: float = field(default_factory=time.time)
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    attempts: int = 0
    progress: Dict[str, Any] = field(default_factory=dict)
    result: Optional[Dict[str, Any]] = None
    error: Optional[str] = None
    replaces: Optional[str] = None
    # wall-clock times of this task's chain's failures within the commander's window (the replacement carries
    # them on): what max_task_attempts counts
    failures: List[float] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        """As plain JSON values. Field by field with shallow copies of the dicts (their values are never
        changed in place): ``dataclasses.asdict``'s deep copy made a snapshot of 10,000 tasks take ~0.7 s
        under the coordinator's lock."""
        return {
            "task_id": self.task_id,
            "kind": self.kind.value,
            "spec": dict(self.spec),
            "state": self.state.value,
            "worker_id": self.worker_id,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "attempts": self.attempts,
            "progress": dict(self.progress),
            "result": None if self.result is None else dict(self.result),
            "error": self.error,
            "replaces": self.replaces,
            "failures": list(self.failures),
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "Task":
        data = dict(data)
        data["kind"] = TaskKind(data["kind"])
        data["state"] = TaskState(data["state"])
        return cls(**data)


class TaskTable:
    """Thread-safe table of tasks in creation order.

    A long run creates a task every few seconds forever: beyond ``max_final``
    ended tasks, the oldest ended ones are forgotten (live tasks never are)."""

    def __init__(self, max_final: int = 10_000):
        self._lock = threading.RLock()
        self._tasks: Dict[str, Task] = {}
        self._seq = itertools.count(1)
        self.incarnation = secrets.token_hex(3)
        self.max_final = max_final
        self._final = 0
        self.forgotten = 0

    def create(
        self,
        kind: TaskKind,
        spec: Dict[str, Any],
        replaces: Optional[Task] = None,
        failures: Optional[List[float]] = None,
    ) -> Task:
        """A pending task; ``replaces``: the failed task it replaces (``attempts`` continue), ``failures``: the
        times of the chain's failures that still count."""
        with self._lock:
            task_id = f"{kind.value}-{self.incarnation}-{next(self._seq):06d}"
            task = Task(
                task_id,
                kind,
                dict(spec),
                replaces=replaces.task_id if replaces else None,
                attempts=replaces.attempts if replaces else 0,
                failures=list(failures or []),
            )
            self._tasks[task_id] = task
            return task

    def get(self, task_id: str) -> Optional[Task]:
        with self._lock:
            return self._tasks.get(task_id)

    def list(self, kind: Optional[str] = None, state: Optional[str] = None) -> List[Task]:
        with self._lock:
            return [
                t
                for t in self._tasks.values()
                if (kind is None or t.kind.value == kind) and (state is None or t.state.value == state)
            ]

    def start(self, task: Task, worker_id: str) -> None:
        with self._lock:
            task.state = TaskState.RUNNING
            task.worker_id = worker_id
            task.started_at = time.time()
            task.attempts += 1

    def requeue(self, task: Task) -> None:
        """Undo :meth:`start`: the worker was busy (still ending an earlier task), the task waits for the next."""
        with self._lock:
            task.state = TaskState.PENDING
            task.worker_id = None
            task.started_at = None
            task.attempts -= 1

    def end(
        self, task_id: str, state: TaskState, result: Optional[dict] = None, error: Optional[str] = None
    ) -> Optional[Task]:
        """Move a task to a final state; returns it, or None when unknown or already final."""
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or task.state.is_final:
                return None
            task.state = state
            task.finished_at = time.time()
            if result is not None:
                task.result = result
            if error is not None:
                task.error = error
            self._final += 1
            if self._final > self.max_final:
                self._forget_oldest_final()
            return task

    def _forget_oldest_final(self) -> None:
        excess = self._final - self.max_final
        for task_id in [t.task_id for t in self._tasks.values() if t.state.is_final][:excess]:
            del self._tasks[task_id]
            self._final -= 1
            self.forgotten += 1

    def update_progress(self, task_id: str, **progress: Any) -> None:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is not None:
                task.progress.update(progress)

    def counts(self) -> Dict[str, Dict[str, int]]:
        with self._lock:
            out: Dict[str, Dict[str, int]] = {k.value: {s.value: 0 for s in TaskState} for k in TaskKind}
            for t in self._tasks.values():
                out[t.kind.value][t.state.value] += 1
            return out

    def state_dict(self) -> Dict[str, Any]:
        with self._lock:
            return {"incarnation": self.incarnation, "tasks": [t.to_dict() for t in self._tasks.values()]}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        with self._lock:
            self._tasks = {}
            top = 0
            for item in state["tasks"]:
                task = Task.from_dict(item)
                self._tasks[task.task_id] = task
                top = max(top, int(task.task_id.rsplit("-", 1)[1]))
            self._seq = itertools.count(top + 1)
            self._final = sum(t.state.is_final for t in self._tasks.values())
