"""The service's REST application (``parallel-rl serve``): its runs and its pool of workers, JSON under
``/api/v1``. Each run's own coordinator keeps serving every endpoint of a one-run cluster on its own port (the
``url`` of the run). The token rules are the coordinator's: mutating calls need ``Authorization: Bearer
<PARALLEL_RL_TOKEN>``; read-only calls are open. The service object (``parallel_rl.service.Service``) is kept in
``app.extensions``; the views stay thin. ``GET /api/v1/compare`` is computed by the function ``parallel-rl serve``
hands the app (``parallel_rl.after.compare.service_comparison``, above this layer); the compare view is at ``/``."""

from __future__ import annotations

import threading
from typing import Callable, Optional

from flask import Blueprint, Flask, Response, current_app, jsonify, request

from parallel_rl.protocol import CompareQuery, Registration, RunSubmission
from parallel_rl.transport import ApiError, check_token, install_json_errors, json_body
from parallel_rl.transport.strangers import bearer_refusal

bp = Blueprint("service", __name__, url_prefix="/api/v1")
KIND_OF = {"collectors": "collector", "learners": "learner"}
MAX_BODY_BYTES = 2 * 1024 * 1024  # a config's text (1 M characters) and its overrides
# comparisons computed at once (each a bootstrap of up to 64 runs, open to anyone where no run closes its reads):
# more are refused with 429 at once, so that they never hold every server thread nor the box's cores
COMPARE_SLOTS = 2


def _service():
    return current_app.extensions["parallel_rl.service"]


def _require_token() -> None:
    check_token(current_app.config.get("CLUSTER_TOKEN"))


def _kind(collection: str) -> str:
    if collection not in KIND_OF:
        raise ApiError(404, "not_found", f"no resource {collection!r} (runs, pool, collectors or learners)")
    return KIND_OF[collection]


@bp.get("/health")
def health():
    return jsonify({"status": "ok"})


def _holds_token() -> bool:
    expected = current_app.config.get("CLUSTER_TOKEN")
    return not expected or bearer_refusal(request.headers.get("Authorization", ""), expected) is None


@bp.get("/runs")
def list_runs():
    """Every run; of a run whose config closes its reads (``parallel.coordinator.auth_read``), only its id, name
    and state without the token."""
    service, holder = _service(), _holds_token()
    rows = [
        service.row(r) if holder or not r.auth_read else {"id": r.run_id, "name": r.name, "state": r.state.value}
        for r in list(service.records)
    ]
    return jsonify({"runs": rows})


@bp.post("/runs")
def submit_run():
    _require_token()
    body = RunSubmission.from_json(json_body())
    record = _service().submit(body.config, body.config_text, body.overrides, body.weight, body.name)
    return jsonify(_service().row(record)), 201


@bp.get("/runs/<run_id>")
def get_run(run_id: str):
    if _service().record(run_id).auth_read:  # the run's own coordinator answers it only with the token
        _require_token()
    return jsonify(_service().detail(run_id))


@bp.delete("/runs/<run_id>")
def stop_run(run_id: str):
    _require_token()
    service = _service()
    return jsonify(service.row(service.stop(run_id)))


@bp.get("/compare")
def compare():
    """Groups of runs as ``parallel-rl compare`` reports them (IQM with a 95 % bootstrap CI, mean curves with
    bands), JSON or its CSV; a run whose config closes its reads needs the token, as ``GET /runs/<id>``."""
    query = CompareQuery.from_query(request.args)
    service = _service()
    records = [service.record(run_id) for run_id in query.runs]  # 404 naming the first unknown id
    if any(record.auth_read for record in records):
        _require_token()
    computed = current_app.extensions.get("parallel_rl.compare")
    if computed is None:
        raise ApiError(503, "unavailable", "this app computes no comparisons: `parallel-rl serve` serves them")
    slots = current_app.extensions["parallel_rl.compare_slots"]
    if not slots.acquire(blocking=False):
        raise ApiError(429, "too_many_requests", f"{COMPARE_SLOTS} comparisons are being computed: try again shortly")
    try:
        out = computed([(r.run_id, service.directory(r.run_id), r.name) for r in records], query)
    finally:
        slots.release()
    if query.format == "csv":
        return Response(out, mimetype="text/csv", headers={"Content-Disposition": 'attachment; filename="compare.csv"'})
    return jsonify(out)


@bp.get("/pool")
def pool():
    return jsonify(_service().pool())


@bp.get("/<collection>")
def list_workers(collection: str):
    return jsonify({collection: _service().workers(_kind(collection))})


@bp.post("/<collection>")
def add_slot(collection: str):
    kind = _kind(collection)
    _require_token()
    if Registration.from_json(json_body()).address is not None:
        raise ApiError(
            400,
            "bad_request",
            "the service starts its own workers: add a slot without an address, or add a running worker to "
            "one run through that run's coordinator (its url in GET /api/v1/runs)",
        )
    return jsonify(_service().add_slot(kind)), 202


@bp.delete("/<collection>/<worker_id>")
def remove_worker(collection: str, worker_id: str):
    if _kind(collection) != "collector":
        raise ApiError(409, "conflict", "a learner slot is freed by stopping its run: DELETE /api/v1/runs/<id>")
    _require_token()
    return jsonify(_service().remove_collector(worker_id))


@bp.get("/openapi.json")
def openapi():
    from parallel_rl import __version__

    from .openapi import service_openapi_document

    return jsonify(service_openapi_document(__version__))


def create_service_app(service=None, token=None, compare: Optional[Callable] = None) -> Flask:
    """``compare(runs, query)``: what computes ``GET /api/v1/compare`` (without it: 503)."""
    from .views.dashboard import compare_bp

    app = Flask("parallel_rl.service", static_folder=None)
    app.config.from_mapping(CLUSTER_TOKEN=token, MAX_CONTENT_LENGTH=MAX_BODY_BYTES, JSON_SORT_KEYS=False)
    app.json.sort_keys = False
    if service is not None:
        app.extensions["parallel_rl.service"] = service
    if compare is not None:
        app.extensions["parallel_rl.compare"] = compare
    app.extensions["parallel_rl.compare_slots"] = threading.BoundedSemaphore(COMPARE_SLOTS)
    install_json_errors(app)
    app.register_blueprint(bp)
    app.register_blueprint(compare_bp)
    return app


def serve_service(service, host: str, port: int, token: str, compare: Optional[Callable] = None):
    """A cheroot server (not started) for the service's REST API on ``host:port`` (0: the OS picks)."""
    from parallel_rl.transport import ServerThread

    return ServerThread(
        create_service_app(service, token, compare),
        host,
        port,
        threads=8,
        name="service",
        max_body_bytes=2 * MAX_BODY_BYTES,
        token=token,
    )
