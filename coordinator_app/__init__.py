"""The coordinator's REST application: ``create_app(coordinator)``.

One blueprint per resource; views stay thin and call into
:class:`parallel_rl.coordinator.Coordinator`, kept in ``app.extensions``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from flask import Flask, request

from parallel_rl.transport import install_json_errors

from .context import get_coordinator, require_read_token, require_token, start_worker

__all__ = ["create_app", "get_coordinator", "require_read_token", "require_token", "serve_coordinator", "start_worker"]


def serve_coordinator(
    coordinator,
    host: str,
    port: int,
    advertise: Optional[str] = None,
    start_worker: Optional[Callable[[str], dict]] = None,
):
    """A cheroot server (not started) for ``coordinator``'s REST API on ``host:port`` (0: the OS picks).

    Workers reach the coordinator at ``advertise``, else its configured ``advertise``, else the served address
    (bound to every interface: our address on the route to each worker).
    ``start_worker(kind)``: how ``POST /collectors`` without an address starts one (``parallel-rl run``)."""
    from parallel_rl.transport import WILDCARD_HOSTS, ServerThread

    ccfg = coordinator.cfg.parallel.coordinator
    # long-polls have their own threads: heartbeats always find one of the request threads free. A body
    # over max_body_bytes gets the app's JSON 413; one over twice that is refused by the server before it
    # is read; one without the token is never read (401/403)
    app = create_app(coordinator)
    if start_worker is not None:
        app.extensions["parallel_rl.start_worker"] = start_worker
    server = ServerThread(
        app,
        host,
        port,
        threads=int(ccfg.request_threads) + int(ccfg.long_poll_slots),
        name="coordinator",
        max_body_bytes=2 * int(ccfg.max_body_bytes),
        connection_limit=int(ccfg.max_connections),
        max_connections=int(ccfg.get("max_open_connections", 0)),
        token=coordinator.token,
        read_ahead_bytes=int(ccfg.read_ahead_bytes),
        max_connections_per_peer=int(ccfg.max_connections_per_peer),
    )
    membership = coordinator.membership
    membership.advertise_url = advertise or membership.advertise_url or server.url
    # bound to every interface and no URL given: each worker added by its URL is told our address on the
    # route to it (127.0.0.1, server.url's, only reaches workers on this host)
    membership.advertise_per_worker = membership.advertise_url == server.url and server.host in WILDCARD_HOSTS
    return server


def create_app(coordinator=None, test_config: Optional[Mapping[str, Any]] = None) -> Flask:
    app = Flask("parallel_rl.coordinator", static_folder=None)
    max_body = 4 * 1024 * 1024
    if coordinator is not None:
        max_body = int(coordinator.cfg.parallel.coordinator.max_body_bytes)
    app.config.from_mapping(
        CLUSTER_TOKEN=getattr(coordinator, "token", None),
        AUTH_READ=bool(coordinator.cfg.parallel.coordinator.auth_read) if coordinator is not None else False,
        MAX_CONTENT_LENGTH=max_body,
        JSON_SORT_KEYS=False,
    )
    if test_config:
        app.config.from_mapping(test_config)
    app.json.sort_keys = False
    if coordinator is not None:
        app.extensions["parallel_rl.coordinator"] = coordinator
    install_json_errors(app)

    from .views import buffers, cluster, dashboard, league, tasks, videos, workers

    for module in (cluster, tasks, workers, buffers, league, videos, dashboard):
        app.register_blueprint(module.bp)
    if coordinator is not None:
        from .metrics import install_metrics

        install_metrics(app, coordinator)

        @app.before_request
        def _take_turn():  # a metadata request is served in its turn: see Admission
            if request.endpoint == "workers.metadata":
                coordinator.flow.admission.enter()

        @app.teardown_request
        def _give_turn(exc):
            coordinator.flow.admission.leave()

    @app.before_request
    def _read_auth():
        if request.method in ("GET", "HEAD", "OPTIONS") and request.endpoint != "cluster.health":
            require_read_token()

    return app
