"""Replay buffers: stats, and batched sampling of references for learners."""

from flask import Blueprint, jsonify, request

from parallel_rl.protocol import SampleAnswer, SampleRequest
from parallel_rl.transport import LEASE_HEADER, ApiError, json_body

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
    ask = SampleRequest.from_json(json_body())
    out = coordinator.sample(
        ask.worker_id,
        ask.batch_size,
        ask.batches,
        ask.train_iter,
        priorities=ask.priorities,
        wait=ask.wait,
        encoding=ask.encoding,
        lease=request.headers.get(LEASE_HEADER),
        ahead=ask.ahead,
    )
    control = coordinator.flow.control_for(coordinator.membership.get_worker(ask.worker_id))
    return jsonify(SampleAnswer(**out, control=control).to_json())
