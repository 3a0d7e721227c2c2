"""The coordinator (master): task table, worker registry, replay index, commander."""

import importlib

# names -> the module that defines them, imported on first use (PEP 562): importing a light part of the package
# (``coordinator.defaults``, ``coordinator.tasks``) does not load the coordinator, its transport and Flask
_WHERE = {
    "COMMANDER_REGISTRY": "commander",
    "SoloCommander": "commander",
    "create_parallel_commander": "commander",
    "Commander": "commander_api",
    "CommanderHandle": "commander_api",
    "Coordinator": "coordinator",
    "CoordinatorState": "coordinator",
    "ReplayIndex": "replay",
    "Task": "tasks",
    "TaskKind": "tasks",
    "TaskState": "tasks",
    "TaskTable": "tasks",
    "Worker": "workers",
    "WorkerRegistry": "workers",
    "WorkerState": "workers",
}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "COMMANDER_REGISTRY",
    "SoloCommander",
    "create_parallel_commander",
    "Commander",
    "CommanderHandle",
    "Coordinator",
    "CoordinatorState",
    "ReplayIndex",
    "Task",
    "TaskKind",
    "TaskState",
    "TaskTable",
    "Worker",
    "WorkerRegistry",
    "WorkerState",
]
