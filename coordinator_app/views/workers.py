"""Collectors and learners: list, add, remove; and the workers' own traffic
(heartbeat, batched metadata), which needs the cluster token."""

from flask import Blueprint, jsonify, request

from parallel_rl.protocol import Heartbeat, MetadataBatch, Registration
from parallel_rl.transport import LEASE_HEADER, ApiError, json_body

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
    registration = Registration.from_json(json_body())
    if registration.address is None:  # `parallel-rl run` starts one more (a fork of its fork server)
        return jsonify(start_worker(kind)), 202
    worker = get_coordinator().membership.add_worker(
        kind, registration.address, registration.worker_id, sender=request.remote_addr
    )
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


@bp.post("/workers/<worker_id>/heartbeat")
def heartbeat(worker_id: str):
    require_token()
    coordinator = get_coordinator()
    beat = Heartbeat.from_json(request.get_json(silent=True) if request.content_length else None)
    worker = coordinator.membership.heartbeat(
        worker_id,
        request.headers.get(LEASE_HEADER),
        beat.problems,
        beat.tasks,
        ranks=beat.ranks,
        storage=beat.storage.to_json() if beat.storage else None,
        time_breakdown=beat.time_breakdown,
        ready=beat.ready,
        setup_error=beat.setup_error,
        unanswered_seconds=beat.unanswered_seconds or 0.0,
    )
    return jsonify(coordinator.flow.control_for(worker))


@bp.post("/workers/<worker_id>/metadata")
def metadata(worker_id: str):
    require_token()
    batch = MetadataBatch.from_json(json_body())
    return jsonify(
        get_coordinator().handle_metadata(
            worker_id,
            batch.messages,
            wait_for_allowance=batch.wait_for_allowance,
            policy_version=batch.policy_version,
            loaded_version=batch.loaded_version,
            lease=request.headers.get(LEASE_HEADER),
        )
    )
