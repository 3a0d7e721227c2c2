"""The HTTP API a slave serves to the coordinator (master -> slave)::

    GET    /slave/v1/health            liveness and identity (open)
    POST   /slave/v1/connect           the master adopts this slave: worker id, config, shared dir (answered at
                                       once; the slave sets up afterwards, its heartbeats say when it is ready)
    POST   /slave/v1/tasks             start a task (202)
    DELETE /slave/v1/tasks/<task_id>   wrap a task up early
    POST   /slave/v1/disconnect        the master lets this slave go

Views read and check the request, then call the slave (:class:`~parallel_rl.slave.slave.Slave`).
"""

from __future__ import annotations

from typing import Any

from flask import Flask, jsonify, request

from ..transport import ApiError, check_token, field, install_json_errors, json_body, number_field
from .mail import SlaveTask


def create_slave_app(slave: Any) -> Flask:
    """The Flask app of ``slave`` (a Slave: its token, kind and the calls below)."""
    app = Flask(f"parallel_rl.{slave.kind}")
    app.config["MAX_CONTENT_LENGTH"] = 8 * 1024 * 1024
    install_json_errors(app)

    @app.get("/slave/v1/health")
    def health():
        challenge = request.args.get("challenge")
        # a coordinator asks us to prove we hold the token before it sends it
        if challenge is not None and not 16 <= len(challenge) <= 128:
            raise ApiError(400, "bad_request", f"challenge must be 16-128 characters, got {len(challenge)}")
        return jsonify(slave.health(challenge))

    @app.post("/slave/v1/connect")
    def connect():
        check_token(slave.token)
        body = json_body()
        slave.on_connect(
            field(body, "worker_id", str),
            field(body, "config", dict),
            field(body, "coordinator", str, required=False),
            field(body, "shared_dir", str, required=False),
            number_field(body, "heartbeat_interval", 1.0, 0.0),
            number_field(body, "heartbeat_ttl", 10.0, 0.0),
            field(body, "lease", str, required=False),
        )
        # answered at once: the envs and model are built afterwards, and the heartbeats say when they are ready
        return jsonify({"status": "connected", "worker_id": slave.worker_id, "ready": slave.readiness.ready.is_set()})

    @app.post("/slave/v1/tasks")
    def start_task():
        check_token(slave.token)
        if not slave.connected.is_set():
            raise ApiError(409, "conflict", "not connected to a coordinator")
        if not slave.readiness.ready.is_set():
            raise ApiError(409, "conflict", f"not set up: {slave.readiness.error or 'building its envs and model'}")
        body = json_body()
        task = SlaveTask(field(body, "task_id", str), field(body, "kind", str), field(body, "spec", dict))
        if not slave.assign(task):  # a retried assignment: acknowledged, never run twice
            return jsonify({"status": "accepted", "task_id": task.task_id, "duplicate": True}), 202
        return jsonify({"status": "accepted", "task_id": task.task_id}), 202

    @app.delete("/slave/v1/tasks/<task_id>")
    def stop_task(task_id: str):
        check_token(slave.token)
        if not slave.stop_task(task_id):
            raise ApiError(404, "not_found", f"no running task {task_id!r}")
        return jsonify({"status": "stopping", "task_id": task_id})

    @app.post("/slave/v1/disconnect")
    def disconnect():
        check_token(slave.token)
        body = json_body()
        slave.on_disconnect(str(body.get("reason", "")))
        return jsonify({"status": "disconnecting"})

    return app
