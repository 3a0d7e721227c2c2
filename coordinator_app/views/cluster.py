"""Health and cluster summary."""

from flask import Blueprint, jsonify

from ..context import get_coordinator

bp = Blueprint("cluster", __name__, url_prefix="/api/v1")


@bp.get("/health")
def health():
    return jsonify({"status": "ok"})


@bp.get("/cluster")
def cluster():
    """The summary, and the workers the coordinator does not reach now (which, since when: docs/failures.md)."""
    c = get_coordinator()
    return jsonify({**c.summary(), "unreachable": c.workers.unreachable()})


@bp.get("/cluster/history")
def history():
    """Time series for charts: evaluations and throughput samples (one per second, last 10 minutes)."""
    c = get_coordinator()
    return jsonify(
        {"eval": list(c.eval_history), "throughput": list(c.throughput_history), "stop_value": c.cfg.run.stop_value}
    )


@bp.get("/openapi.json")
def openapi():
    from parallel_rl import __version__

    from ..openapi import openapi_document

    return jsonify(openapi_document(__version__))
