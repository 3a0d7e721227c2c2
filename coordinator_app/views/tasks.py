"""Tasks: list with filters and paging, one by id."""

from flask import Blueprint, jsonify, request

from parallel_rl.coordinator.tasks import TaskKind, TaskState
from parallel_rl.transport import ApiError

from ..context import get_coordinator

bp = Blueprint("tasks", __name__, url_prefix="/api/v1/tasks")


def _int_arg(name: str, default: int, low: int, high: int) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "bad_request", f"query parameter {name!r} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise ApiError(400, "bad_request", f"query parameter {name!r} must be in [{low}, {high}], got {value}")
    return value


def _choice_arg(name: str, choices: list):
    raw = request.args.get(name) or None
    if raw is not None and raw not in choices:
        raise ApiError(400, "bad_request", f"query parameter {name!r} must be one of {choices}, got {raw!r}")
    return raw


@bp.get("")
def list_tasks():
    kind = _choice_arg("kind", [k.value for k in TaskKind])
    state = _choice_arg("state", [s.value for s in TaskState])
    limit = _int_arg("limit", 100, 1, 1000)
    offset = _int_arg("offset", 0, 0, 10**9)
    tasks = get_coordinator().tasks.list(kind=kind, state=state)
    page = tasks[offset : offset + limit]
    return jsonify({"tasks": [t.to_dict() for t in page], "total": len(tasks), "offset": offset, "limit": limit})


@bp.get("/<task_id>")
def get_task(task_id: str):
    task = get_coordinator().tasks.get(task_id)
    if task is None:
        raise ApiError(404, "not_found", f"no task {task_id!r}")
    return jsonify(task.to_dict())
