"""The HTTP server side shared by the coordinator and every slave.

- :class:`ServerThread` serves a WSGI app with cheroot in a thread, with a cap on open connections and a
  deadline for each request (a client trickling its request holds no thread).
- :func:`install_json_errors` gives an app one JSON error shape:
  ``{"error": {"code": "...", "message": "..."}}``; no request gets an HTML page. The domain's refusals
  (:class:`~parallel_rl.errors.RequestRefused`) are answered with their status here.
- :func:`check_token` compares the cluster token in constant time; :func:`json_body` reads a request's JSON.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any, Dict, Optional
from urllib.parse import urlsplit

from flask import Flask, jsonify, request
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import HTTPException

from ..errors import BindError, RequestRefused
from .codec import loads
from .connections import Server, max_open_connections
from .strangers import ReadAhead, bearer_refusal

logger = logging.getLogger(__name__)


class ApiError(Exception):
    """Raised in a view to answer ``{"error": {...}}`` with ``status``."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "unprocessable",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
}


def error_response(status: int, code: str, message: str):
    response = jsonify({"error": {"code": code, "message": message}})
    response.status_code = status
    return response


def install_json_errors(app: Flask) -> None:
    """Every error leaves as JSON; unexpected exceptions are logged and become 500. Request bodies are read
    with :func:`loads`, so a body nested too deep is a 400 too."""
    provider = _JsonProvider(app)
    provider.sort_keys = app.json.sort_keys
    app.json = provider

    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return error_response(exc.status, exc.code, exc.message)

    @app.errorhandler(RequestRefused)
    def _refused(exc: RequestRefused):  # the domain's refusals (parallel_rl.errors) speak HTTP only here
        return error_response(exc.http_status, exc.code, str(exc))

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        status = exc.code or 500
        return error_response(status, _CODES.get(status, "http_error"), exc.description or exc.name)

    @app.errorhandler(TimeoutError)
    def _timeout(exc: TimeoutError):  # reading the body outlasted the request's deadline (_RequestIO)
        return error_response(408, "request_timeout", f"the request's body did not arrive in time: {exc}")

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        logger.exception("%s: unhandled error on %s %s", app.name, request.method, request.path)
        return error_response(500, "internal_error", f"{type(exc).__name__}: {exc}")


def check_token(expected: Optional[str]) -> None:
    """401 without a bearer token, 403 with a wrong one (constant-time compare: :func:`bearer_refusal`)."""
    if not expected:
        return
    refusal = bearer_refusal(request.headers.get("Authorization", ""), expected)
    if refusal is not None:
        raise ApiError(*refusal)


class _JsonProvider(DefaultJSONProvider):
    """Flask's JSON, reading with :func:`loads` (``request.get_json`` answers 400, never 500)."""

    def loads(self, s: Any, **kwargs: Any) -> Any:
        return loads(s)


def json_body() -> Dict[str, Any]:
    """The request's JSON object, or 400."""
    if not request.is_json:
        raise ApiError(400, "bad_request", "the body must be JSON (Content-Type: application/json)")
    try:
        raw = request.get_data(cache=True)
    except OSError as exc:  # a timeout: the body did not arrive within the request's deadline
        raise ApiError(408, "request_timeout", f"the request's body did not arrive in time: {exc}") from None
    try:
        data = loads(raw)
    except ValueError as exc:  # also UnicodeDecodeError
        raise ApiError(400, "bad_request", f"the body must be JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "bad_request", f"the body must be a JSON object, got {type(data).__name__}")
    return data


WILDCARD_HOSTS = ("0.0.0.0", "::", "")  # a server bound to every interface


def route_address(url: Optional[str]) -> Optional[str]:
    """This host's address on the route to ``url``'s host (None when it has no route or the name does not
    resolve): a UDP socket's connect sends nothing, the kernel only picks the route and our end of it. A server
    bound to every interface is reached at that address by that peer (the address the peer sees us come from)."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        family, _, _, _, peer = socket.getaddrinfo(parts.hostname, parts.port or 80, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(peer)
            return s.getsockname()[0]
    except (OSError, ValueError) as exc:
        logger.debug("transport: no route to %s (%s)", url, exc)
        return None


def http_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class ServerThread:
    """A cheroot server for ``app`` on ``host:port`` (0: the OS picks), run in a daemon thread.

    cheroot keeps idle keep-alive connections in a ``selectors`` set: a call costs the same with 4 or 1,000
    connections open. (waitress, before it, asked every open connection whether it was readable on every
    event: over half of the coordinator's CPU with 256 collectors connected.) Each of ``threads`` threads
    reads a request, runs the app and writes the answer, then waits up to ``linger`` seconds for the
    connection's next request (:class:`~.connections._Connection`). A request waits in the selector, without a thread,
    until its head and (small) body have arrived; the whole of it must arrive within ``request_timeout``
    seconds (default ``timeout``) of its first byte, else it is answered 408 and the connection closed. At
    most ``max_connections`` are open at once (:class:`~.connections._Connections`). With the cluster ``token``,
    what clients without it can hold is bounded (:class:`~.strangers.ReadAhead`): no body of theirs is read,
    their unfinished heads share ``read_ahead_bytes``, one address has ``max_connections_per_peer`` of them."""

    def __init__(
        self,
        app,
        host: str = "127.0.0.1",
        port: int = 0,
        threads: int = 8,
        name: str = "http",
        max_body_bytes: int = 8 * 1024 * 1024,
        connection_limit: int = 200,
        timeout: float = 10.0,
        linger: float = 0.005,
        max_connections: Optional[int] = None,
        request_timeout: Optional[float] = None,
        token: Optional[str] = None,
        read_ahead_bytes: int = 16 * 1024 * 1024,
        max_connections_per_peer: int = 1024,
    ):
        # request_queue_size is the listen backlog: hundreds of collectors connect at once
        self.server = Server(
            (host, port),
            app,
            numthreads=threads,
            max=threads,
            server_name="parallel_rl",
            request_queue_size=1024,
            timeout=timeout,
            shutdown_timeout=1,
        )
        # a body whose Content-Length is over max_body_bytes is answered 413 before it is read
        self.server.max_request_body_size = max_body_bytes
        # after an answer, a thread waits this long for its connection's next request (_Connection)
        self.server.linger = linger
        self.server.max_request_header_size = 64 * 1024
        # idle keep-alive connections kept at most; past it a connection is closed after its answer
        self.server.keep_alive_conn_limit = connection_limit
        # connections open at most (a new one past it closes the one idle longest, or is closed itself):
        # ``max_connections``, else derived from the open-file limit (see max_open_connections)
        self.server.max_open_connections = max_open_connections(max_connections)
        # a request's head and body must arrive within this many seconds of its first byte, however slowly
        # they trickle in (``timeout`` bounds each read); until it is whole it waits without a thread
        self.server.request_timeout = float(timeout if request_timeout is None else request_timeout)
        # with a ``token``, a request announcing a body without it is answered 401/403 unread; bytes read ahead
        # for connections that have not shown it stay within ``read_ahead_bytes`` (the oldest heads are cut
        # past it), and one address holds at most ``max_connections_per_peer`` such connections
        self.server.read_ahead = ReadAhead(token, read_ahead_bytes, max_connections_per_peer)
        # the connection loop's select() timeout: stop() waits for the loop to see it (0.5 s by default, which
        # made every close take up to half a second; the idle loop costs nothing to speak of at 50 ms)
        self.server.expiration_interval = 0.05
        try:
            self.server.prepare()  # binds: the port is known from here on
        except OSError as exc:  # cheroot's message: "No socket could be created -- ((host, port): [Errno 98] ...)"
            reason = str(exc).rpartition(": ")[2].rstrip(")") or str(exc)
            raise BindError(
                f"{name}: cannot listen on {host}:{port}: {reason}; another process holds the port "
                f"(an earlier run still alive?): stop it or choose another --port (0 lets the OS pick)"
            ) from None
        self.host, self.port = self.server.bind_addr[0], int(self.server.bind_addr[1])
        self.thread = threading.Thread(target=self.server.serve, name=f"{name}-server", daemon=True)
        self.closed = False

    @property
    def url(self) -> str:
        return http_url("127.0.0.1" if self.host in WILDCARD_HOSTS else self.host, self.port)

    def start(self) -> "ServerThread":
        self.thread.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        if self.closed:
            return
        self.closed = True
        # stop() closes the listening socket (even when the server never started), gives the requests in
        # flight ``timeout`` s, then shuts their sockets and joins their threads without a limit: it runs in
        # a thread of its own, so that a request stuck in the app cannot hold this call
        self.server.shutdown_timeout = timeout
        stopper = threading.Thread(target=self.server.stop, name="http-server-stop", daemon=True)
        stopper.start()
        stopper.join(timeout + 1.0)
        if stopper.is_alive():
            logger.warning(
                "http server on port %d: a request still runs %gs after close; left to finish", self.port, timeout + 1.0
            )
        if self.thread.is_alive():
            self.thread.join(timeout)
