"""Replay buffers: stats, and batched sampling of references for learners."""
from flask import Blueprint, jsonify, request

from parallel_rl.transport import LEASE_HEADER, ApiError, field, json_body, number_field

from ..context import get_coordinator, require_token

bp = Blueprint("buffers", __name__, url_prefix="/api/v1/buffers")


@bp.get("")
def list_buffers():
    return jsonify({"buffers": [get_coordinator().replay.stats()]})


@bp.get("/<name>")
def get_buffer(name: str):
    replay = get_coordinator().replay
    if name != replay.name:
        raise ApiError(404, "not_found", f"no buffer {name!r}")
    return jsonify(replay.stats())


@bp.post("/<name>/sample")
def sample(name: str):
    """Learner traffic: priorities for past batches in, references for the next batches out."""
    require_token()
    coordinator = get_coordinator()
    if name != coordinator.replay.name:
        raise ApiError(404, "not_found", f"no buffer {name!r}")
    body = json_body()
    batch_size = field(body, "batch_size", int)
    batches = field(body, "batches", int, required=False, default=1)
    if not 1 <= batch_size <= 65536 or not 1 <= batches <= 256:
        raise ApiError(400, "bad_request", f"need 1 <= batch_size <= 65536 and 1 <= batches <= 256, "
                                           f"got {batch_size=} {batches=}")
    encoding = field(body, "encoding", str, required=False, default="json")
    if encoding not in ("json", "base64"):
        raise ApiError(400, "bad_request", f"field 'encoding' must be 'json' or 'base64', got {encoding!r}")
    out = coordinator.sample(
        field(body, "worker_id", str),
        batch_size,
        batches,
        field(body, "train_iter", int, required=False, default=0),
        priorities=field(body, "priorities", dict, required=False),
        wait=number_field(body, "wait", 1.0),
        encoding=encoding,
        lease=request.headers.get(LEASE_HEADER),
    )
    worker = coordinator.membership.get_worker(body["worker_id"])
    return jsonify({**out, "control": coordinator.flow.control_for(worker)})
