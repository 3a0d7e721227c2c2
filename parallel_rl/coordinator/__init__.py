"""The coordinator (master): task table, worker registry, replay index, commander."""
from .commander import COMMANDER_REGISTRY, SoloCommander, create_parallel_commander
from .commander_api import Commander, CommanderHandle
from .coordinator import Coordinator, CoordinatorState
from .replay import ReplayIndex
from .tasks import Task, TaskKind, TaskState, TaskTable
from .workers import Worker, WorkerRegistry, WorkerState

__all__ = [
    "COMMANDER_REGISTRY", "SoloCommander", "create_parallel_commander", "Commander", "CommanderHandle",
    "Coordinator", "CoordinatorState", "ReplayIndex", "Task", "TaskKind", "TaskState", "TaskTable", "Worker",
    "WorkerRegistry", "WorkerState",
]
