"""Collectors and learners: list, add, remove; and the workers' own traffic
(heartbeat, batched metadata), which needs the cluster token."""
from flask import Blueprint, jsonify, request

from parallel_rl.transport import LEASE_HEADER, ApiError, field, json_body, number_field
from parallel_rl.storage import check_health_report

from ..context import get_coordinator, require_token, start_worker

bp = Blueprint("workers", __name__, url_prefix="/api/v1")

KIND_OF = {"collectors": "collector", "learners": "learner"}


def _kind(collection: str) -> str:
    if collection not in KIND_OF:
        raise ApiError(404, "not_found", f"no resource {collection!r} (collectors or learners)")
    return KIND_OF[collection]


@bp.get("/workers")
def list_all_workers():
    """Every worker, collectors and learners (a LearnerAggregator is one learner, its ranks listed in it)."""
    return jsonify({"workers": [w.to_dict() for w in get_coordinator().workers.list()]})


@bp.get("/<collection>")
def list_workers(collection: str):
    kind = _kind(collection)
    return jsonify({collection: [w.to_dict() for w in get_coordinator().workers.list(kind)]})


@bp.post("/<collection>")
def add_worker(collection: str):
    kind = _kind(collection)
    require_token()
    body = json_body()
    address = field(body, "address", str, required=False)
    if address is None:  # `parallel-rl run` starts one more (a fork of its fork server)
        return jsonify(start_worker(kind)), 202
    worker = get_coordinator().membership.add_worker(kind, address, field(body, "worker_id", str, required=False))
    return jsonify(worker.to_dict()), 201


@bp.get("/<collection>/<worker_id>")
def get_worker(collection: str, worker_id: str):
    return jsonify(get_coordinator().membership.get_worker(worker_id, _kind(collection)).to_dict())


@bp.delete("/<collection>/<worker_id>")
def remove_worker(collection: str, worker_id: str):
    """Remove a worker: no new tasks; its running task wraps up and its data stays.

    A slave leaving on its own sends ``{"self": true}`` after reporting its tasks."""
    kind = _kind(collection)
    require_token()
    coordinator = get_coordinator()
    body = request.get_json(silent=True) or {}
    if isinstance(body, dict) and body.get("self") is True:
        worker = coordinator.membership.deregister(worker_id, kind, request.headers.get(LEASE_HEADER))
    else:
        worker = coordinator.membership.remove_worker(worker_id, kind)
    return jsonify(worker.to_dict())


def _is_rank(r) -> bool:
    """A learner rank as a LearnerAggregator lists it in its heartbeats."""
    return (isinstance(r, dict) and set(r) == {"rank", "pid", "state"} and type(r["rank"]) is int
            and (r["pid"] is None or type(r["pid"]) is int) and isinstance(r["state"], str) and len(r["state"]) <= 32)


@bp.post("/workers/<worker_id>/heartbeat")
def heartbeat(worker_id: str):
    require_token()
    coordinator = get_coordinator()
    body = request.get_json(silent=True) if request.content_length else None
    problems = body.get("problems") if isinstance(body, dict) else None
    if problems is not None and (not isinstance(problems, list) or not all(isinstance(p, str) for p in problems)):
        raise ApiError(400, "bad_request", "field 'problems' must be a list of strings")
    tasks = body.get("tasks") if isinstance(body, dict) else None
    if tasks is not None and (not isinstance(tasks, list) or len(tasks) > 1000
                              or not all(isinstance(t, str) for t in tasks)):
        raise ApiError(400, "bad_request", "field 'tasks' must be a list of at most 1000 task ids")
    ranks = body.get("ranks") if isinstance(body, dict) else None
    if ranks is not None and (not isinstance(ranks, list) or len(ranks) > 1024 or not all(_is_rank(r) for r in ranks)):
        raise ApiError(400, "bad_request", "field 'ranks' must be a list of at most 1024 objects "
                                           "{rank: int, pid: int or null, state: str}")
    storage = body.get("storage") if isinstance(body, dict) else None
    if storage is not None:
        try:
            storage = check_health_report(storage)
        except ValueError as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
    worker = coordinator.membership.heartbeat(worker_id, request.headers.get(LEASE_HEADER),
                                              [p[:500] for p in problems[-20:]] if problems is not None else None,
                                              tasks, ranks=ranks, storage=storage)
    return jsonify(coordinator.flow.control_for(worker))


@bp.post("/workers/<worker_id>/metadata")
def metadata(worker_id: str):
    require_token()
    body = json_body()
    messages = field(body, "messages", list)
    wait = number_field(body, "wait_for_allowance", 0.0)
    version = field(body, "policy_version", int, required=False)
    loaded = field(body, "loaded_version", int, required=False)
    return jsonify(get_coordinator().handle_metadata(worker_id, messages, wait_for_allowance=wait,
                                                     policy_version=version, loaded_version=loaded,
                                                     lease=request.headers.get(LEASE_HEADER)))
