"""What a commander is, and what it may see and do of the coordinator that drives it.

A commander (``parallel.commander.type``, :data:`~parallel_rl.coordinator.commander.COMMANDER_REGISTRY`)
decides which task goes to which worker. The coordinator builds it from the config, then hands it a
:class:`CommanderHandle` (:meth:`Commander.attach`) and calls the methods of :class:`Commander`: ``step``
whenever something changed, ``on_task_failed`` / ``on_task_finished`` as tasks end, ``epsilon`` for every
control block, ``state_dict`` / ``load_state_dict`` with the coordinator's snapshots. The handle is all the
commander holds of the coordinator: it reads the workers, the tasks, the newest policy version and whether
the run is over, creates and assigns tasks, and ends the run; it reaches nothing else.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Protocol, runtime_checkable

from ..storage import SharedStorage
from .tasks import Task, TaskKind, TaskTable
from .workers import Worker, WorkerRegistry


class CommanderHandle:
    """A commander's view of its coordinator (see the module's docstring)."""

    def __init__(
        self,
        *,
        storage: SharedStorage,
        workers: WorkerRegistry,
        tasks: TaskTable,
        assign: Callable[[Task, Worker], bool],
        finish: Callable[[str, str], None],
        policy_version: Callable[[], int],
        over: Callable[[], bool],
        spare: Callable[[Worker], Optional[bool]] = lambda worker: None,
    ):
        self.storage = storage  # checkpoints and league snapshots on the shared store
        self._workers, self._tasks = workers, tasks
        self._assign, self._finish = assign, finish
        self._policy_version, self._over, self._spare = policy_version, over, spare

    @property
    def policy_version(self) -> int:
        """The newest policy version a learner announced (-1 before the first)."""
        return self._policy_version()

    @property
    def over(self) -> bool:
        """Whether the run is over (solved, a budget used up, failed, closing): no more tasks."""
        return self._over()

    def workers(self, kind: Optional[str] = None) -> List[Worker]:
        """The registered workers (of ``kind``), ended ones included."""
        return self._workers.list(kind)

    def spare(self, worker: Worker) -> Optional[bool]:
        """Whether collector ``worker`` has nothing to collect now (synchronous on-policy: its share of the
        current segment is in), so an evaluation there holds no segment up; None: the flow does not say."""
        return self._spare(worker)

    def tasks(self, kind: Optional[str] = None, state: Optional[str] = None) -> List[Task]:
        return self._tasks.list(kind=kind, state=state)

    def create_task(
        self,
        kind: TaskKind,
        spec: Dict[str, Any],
        replaces: Optional[Task] = None,
        failures: Optional[List[float]] = None,
    ) -> Task:
        """A new pending task (``replaces``: the failed task it retries, ``failures``: its chain's failure times)."""
        return self._tasks.create(kind, spec, replaces=replaces, failures=failures)

    def assign(self, task: Task, worker: Worker) -> bool:
        """Hand ``task`` to ``worker``; False when the worker is busy, refused it or was unreachable (the task
        failed then, and comes back through ``on_task_failed``)."""
        return self._assign(task, worker)

    def finish(self, state: str, reason: str) -> None:
        """End the run (``state``: ``failed``, ``stopped`` or ``solved``; ``reason`` is shown to the user)."""
        self._finish(state, reason)


@runtime_checkable
class Commander(Protocol):
    """What the coordinator calls on its commander."""

    # the policy version last handed to an evaluator (kept in the coordinator's snapshot counters)
    last_eval_version: Optional[int]

    def attach(self, cluster: CommanderHandle) -> None:
        """Called once by the coordinator, before any other call but ``state_dict`` / ``load_state_dict``."""

    def step(self) -> None:
        """Something changed (a task ended, a worker came or went, a policy was announced): assign work."""

    def epsilon(self, env_steps: int) -> float:
        """The collectors' exploration epsilon after ``env_steps`` env steps."""

    def on_task_failed(self, task: Task, store_fault: bool = False) -> None:
        """``task`` failed (``store_fault``: on the shared store): retry it or end the run."""

    def on_task_finished(self, task: Task) -> None:
        """``task`` finished (its result in ``task.result``)."""

    def state_dict(self) -> dict:
        """The commander's own state, as JSON values (saved in the coordinator's snapshots)."""

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (``{}`` from a snapshot that holds none)."""
