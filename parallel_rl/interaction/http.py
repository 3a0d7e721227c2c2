"""HTTP plumbing shared by the coordinator and every slave.

- :class:`ServerThread` serves a WSGI app with cheroot in a thread.
- :func:`install_json_errors` gives an app one JSON error shape:
  ``{"error": {"code": "...", "message": "..."}}``; no request gets an HTML page.
- :func:`check_token` compares the cluster token in constant time.
- :class:`HttpClient` makes JSON calls with a timeout and a bounded retry with
  exponential backoff; it raises typed errors and never waits forever.
- :func:`pack_array` / :func:`unpack_array` carry numeric arrays inside JSON as
  base64 bytes (hot paths: sampled references, priorities).
"""
from __future__ import annotations

import base64
import errno
import hashlib
import heapq
import hmac
import io
import json as _json
import logging
import math
import os
import re
import resource
import secrets
import select
import selectors
import socket
import threading
import time
from typing import Any, Dict, Optional

import cheroot.connections
import cheroot.makefile
import cheroot.server
import cheroot.wsgi
import numpy as np
import urllib3
from flask import Flask, jsonify, request
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import HTTPException

from ..errors import AuthError, BindError, PeerUnavailableError, ProtocolError, RemoteError, RequestRefused

logger = logging.getLogger(__name__)

TOKEN_ENV = "PARALLEL_RL_TOKEN"
COORDINATOR_ENV = "PARALLEL_RL_COORDINATOR"
# the lease token the coordinator gave a worker at connect; sent with every call the worker makes
LEASE_HEADER = "X-Parallel-RL-Lease"


def finite_json(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, ±inf) replaced by None: JSON has no NaN, so they go as null.

    A diverging loss must reach the coordinator as ``null``, not kill the thread that sends it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    if isinstance(value, np.generic):
        return finite_json(value.item())
    return value


def encode_json(value: Any) -> bytes:
    """JSON bytes of ``value``; non-finite floats become null (the fast path costs nothing when there are none)."""
    try:
        return _json.dumps(value, allow_nan=False).encode()
    except ValueError:  # a NaN or an infinity somewhere
        return _json.dumps(finite_json(value), allow_nan=False).encode()


def new_token() -> str:
    return secrets.token_urlsafe(24)


def token_from_env() -> Optional[str]:
    return os.environ.get(TOKEN_ENV) or None


# ---- server side -------------------------------------------------------------------
class ApiError(Exception):
    """Raised in a view to answer ``{"error": {...}}`` with ``status``."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 408: "request_timeout", 409: "conflict", 413: "payload_too_large",
    415: "unsupported_media_type",
    422: "unprocessable",
    429: "too_many_requests", 500: "internal_error", 503: "unavailable",
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
    """401 without a bearer token, 403 with a wrong one (constant-time compare)."""
    if not expected:
        return
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise ApiError(401, "unauthorized", "missing cluster token: send 'Authorization: Bearer <PARALLEL_RL_TOKEN>'")
    if not hmac.compare_digest(given.strip().encode(), expected.encode()):
        raise ApiError(403, "forbidden", "wrong cluster token: use the coordinator's PARALLEL_RL_TOKEN")


def slave_proof(token: str, challenge: str, address: str) -> str:
    """What a slave holding the cluster ``token`` answers to the coordinator's ``challenge`` on its health
    endpoint, reachable at ``address``: an HMAC, so the token itself never travels before the slave is
    proven. Bound to the address the slave advertises, so a server elsewhere cannot relay a real slave's
    answer as its own."""
    message = f"parallel_rl slave proof\n{challenge}\n{address}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON: send non-finite numbers as null")


def loads(data: Any) -> Any:
    """``data`` parsed as JSON: ValueError for anything that is not JSON, NaN and infinities included, and for
    arrays or objects nested too deep to parse (a RecursionError, which no caller expects, otherwise)."""
    try:
        return _json.loads(data, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("arrays or objects nested too deep") from None


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


def field(data: Dict[str, Any], name: str, kind: type | tuple, required: bool = True, default: Any = None) -> Any:
    """``data[name]`` checked against ``kind``; 400 naming the field otherwise."""
    if name not in data or data[name] is None:
        if required:
            raise ApiError(400, "bad_request", f"missing field {name!r}")
        return default
    value = data[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise ApiError(400, "bad_request", f"field {name!r} must be {'/'.join(k.__name__ for k in kinds)}, got bool")
    if not isinstance(value, kinds):
        raise ApiError(400, "bad_request",
                       f"field {name!r} must be {'/'.join(k.__name__ for k in kinds)}, got {type(value).__name__}")
    return value


def number_field(data: Dict[str, Any], name: str, default: float, lo: float = -math.inf,
                 hi: float = math.inf) -> float:
    """``data[name]``, an int or a float, as a float in ``[lo, hi]``; 400 naming the field otherwise (an
    integer past float range included: ``float()`` of it raises OverflowError)."""
    value = field(data, name, (int, float), required=False, default=default)
    try:
        number = float(value)
    except OverflowError:
        number = math.nan
    if not lo <= number <= hi:
        raise ApiError(400, "bad_request", f"field {name!r} must be a number in [{lo:g}, {hi:g}], got {value!r:.40}")
    return number


PACKED_DTYPES = ("<i4", "<i8", "<f4", "<f8")


def pack_array(values: Any, dtype: str) -> Dict[str, str]:
    """A 1-D numeric array as a JSON object ``{"dtype": "<i8", "base64": "..."}`` of its little-endian bytes.

    Writing and parsing thousands of numbers as JSON text costs milliseconds;
    this costs microseconds. :func:`unpack_array` reads it back."""
    if dtype not in PACKED_DTYPES:
        raise ValueError(f"cannot pack dtype {dtype!r}; one of {PACKED_DTYPES}")
    raw = np.ascontiguousarray(values, dtype=dtype).reshape(-1).tobytes()
    return {"dtype": dtype, "base64": base64.b64encode(raw).decode("ascii")}


def unpack_array(value: Any, dtype: Any) -> np.ndarray:
    """A JSON list of numbers, or an array from :func:`pack_array`, as a 1-D array of ``dtype``.

    Raises ValueError for anything else (the caller answers 400)."""
    if isinstance(value, dict):
        packed = value.get("dtype")
        if packed not in PACKED_DTYPES or not isinstance(value.get("base64"), str):
            raise ValueError(f"a packed array is {{\"dtype\": one of {list(PACKED_DTYPES)}, \"base64\": str}}, "
                             f"got {sorted(value)}")
        raw = base64.b64decode(value["base64"], validate=True)
        if len(raw) % np.dtype(packed).itemsize:
            raise ValueError(f"{len(raw)} bytes are not a whole number of {packed} values")
        return np.frombuffer(raw, dtype=packed).astype(dtype)
    if isinstance(value, list):
        try:
            array = np.asarray(value, dtype=dtype)
        except (TypeError, OverflowError) as exc:  # OverflowError: an integer past the dtype's range
            raise ValueError(str(exc)) from None
        if array.ndim != 1:
            raise ValueError(f"expected a flat list of numbers, got {array.ndim} dimensions")
        return array
    raise ValueError(f"expected a list of numbers or a packed array, got {type(value).__name__}")


# descriptors a process keeps for what is not a connection (files, the store's, threads' pipes, logs): the
# derived connection cap leaves a quarter of the open-file limit, at least this many, to them
_RESERVED_DESCRIPTORS = 64
# errors of accept() that say the process or the system is out of descriptors or memory
_EXHAUSTED = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def max_open_connections(configured: Optional[int] = None) -> int:
    """The connections one server keeps open at most: ``configured`` (> 0), else three quarters of the
    process's open-file limit (``RLIMIT_NOFILE``, soft), and never so many that the limit would be hit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    derived = max(16, soft - max(_RESERVED_DESCRIPTORS, soft // 4))
    return min(int(configured), derived) if configured and configured > 0 else derived


class _Connections(cheroot.connections.ConnectionManager):
    """cheroot's connection manager (the selector thread's loop), with a cap on open connections and no
    spin when the process runs out of descriptors.

    At the server's ``max_open_connections`` a new connection makes room by closing the connections idle
    longest (a client that opened a connection and sent nothing is the first to go; a worker's keep-alive
    connection, used every heartbeat, the last); when every connection is busy in a thread the new one is
    accepted and closed at once. When accept() fails for want of descriptors (EMFILE: other files took
    them), idle connections are closed and accepting pauses, backing off from 50 ms to 1 s, instead of
    cheroot's loop retrying it at once, for ever, with a traceback each time."""

    def __init__(self, server):
        super().__init__(server)
        self._resume_at = 0.0  # accepting paused (descriptors exhausted) until this time.monotonic()
        self._pause = 0.0
        self._warned_at = -math.inf
        self._last_pass = time.monotonic()

    def _idle(self) -> list:
        return [(fd, conn) for fd, conn in self._selector.connections if conn is not self.server]

    def _shed_idle(self, count: int) -> int:
        """Close the ``count`` connections idle longest; how many were closed."""
        oldest = heapq.nsmallest(count, self._idle(), key=lambda item: item[1].last_used or 0.0)
        for fd, conn in oldest:
            self._selector.unregister(fd)
            conn.close()
        return len(oldest)

    def _from_server_socket(self, server_socket):
        server = self.server
        if server.open_connections >= server.max_open_connections:
            # make room for a few at once: a scan of the idle ones per accepted connection would cost
            if not self._shed_idle(max(1, server.max_open_connections // 32)):
                self._refuse(server_socket)
                return None
        try:
            return super()._from_server_socket(server_socket)
        except OSError as exc:
            if exc.errno not in _EXHAUSTED:
                raise
            self._exhausted(exc)
            return None

    def _refuse(self, server_socket) -> None:
        """Accept the next connection and close it at once: every connection is busy."""
        try:
            sock, _ = server_socket.accept()
        except OSError as exc:
            if exc.errno in _EXHAUSTED:
                self._exhausted(exc)
            return  # EAGAIN: the client gave up meanwhile
        sock.close()
        self.server.refused_connections += 1
        self._warn(f"{self.server.open_connections} connections open (the most this server keeps: "
                   f"max_open_connections={self.server.max_open_connections}), all busy; closing new ones")

    def _exhausted(self, exc: OSError) -> None:
        shed = self._shed_idle(max(1, len(self._idle()) // 4))
        if not shed:  # nothing of ours to free: stop accepting for a while, the backlog holds the clients
            self._pause = min(1.0, max(0.05, self._pause * 2))
            self._resume_at = time.monotonic() + self._pause
            self._selector.unregister(self.server.socket.fileno())
        self._warn(f"out of descriptors ({exc.strerror}) with {self.server.open_connections} connections open; "
                   f"closed {shed} idle connection(s)" + ("" if shed else f", accepting again in {self._pause:.2f}s")
                   + ": raise the open-file limit (ulimit -n) or lower max_open_connections")

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._warned_at >= 10.0:  # at most one line in 10 s, however fast clients come
            self._warned_at = now
            logger.warning("http server on port %s: %s", self.server.bind_addr[1], message)

    def _expire(self, threshold: float) -> None:
        """Close connections idle since ``threshold`` and those whose request is past its deadline (a client
        that sends its request a byte at a time waits here, not in a thread: see _Connection); resume
        accepting after a pause. cheroot calls this every ``expiration_interval`` (50 ms): the pass over the
        connections runs every 0.5 s."""
        now = time.monotonic()
        if now - self._last_pass >= 0.5:
            self._last_pass = now
            for fd, conn in self._idle():
                if conn.last_used < threshold or conn.past_deadline(now):
                    self._selector.unregister(fd)
                    conn.time_out()
        if self._resume_at and time.monotonic() >= self._resume_at:
            self._resume_at = 0.0
            self._selector.register(self.server.socket.fileno(), selectors.EVENT_READ, data=self.server)
        elif not self._resume_at:
            self._pause = 0.0


class _Connection(cheroot.server.HTTPConnection):
    """A keep-alive connection whose thread, after an answer, waits up to the server's ``linger`` seconds for
    the connection's next request and serves it too, before handing the connection back to the selector.

    Without it every request passes through cheroot's one selector thread, which needs the GIL once per
    request: with 256 collectors calling flat out it got it every ~5 ms (the GIL's switch interval) and
    handed out ~3 connections each time, so `GET /api/v1/cluster` waited ~150 ms behind them (p50). A client
    that sends its next request at once (a collector whose outbox filled while it waited for the answer)
    keeps its thread; one that sends later (a heartbeat a second later) costs a thread ``linger`` s."""

    def __init__(self, server, sock, makefile=cheroot.makefile.MakeFile):
        super().__init__(server, sock, makefile)
        self.pending = bytearray()  # what arrived of the next request before a thread parses it
        self.request_started: Optional[float] = None  # time.monotonic() of the next request's first byte
        self.deadline: Optional[float] = None  # while a request is read: its reads end by then
        self.timed_out = False  # the request read past its deadline: the connection closes after the answer
        self.rfile = _RequestReader(self, self.rbufsize)
        self._counted = True
        server.count_connection(+1)

    def close(self) -> None:
        if self._counted:
            self._counted = False
            self.server.count_connection(-1)
        super().close()

    def past_deadline(self, now: float) -> bool:
        return self.request_started is not None and now > self.request_started + self.server.request_timeout

    def time_out(self) -> None:
        """Close the connection; with a request begun past its deadline, answer 408 first (best effort)."""
        self.answer_timeout()
        self.close()

    def answer_timeout(self) -> None:
        """Answer 408 when a request was begun (best effort: the connection is closed next)."""
        if self.request_started is not None:
            body = encode_json({"error": {"code": "request_timeout", "message": (
                f"the request was not complete within {self.server.request_timeout:g}s")}})
            try:
                self.socket.setblocking(False)
                self.socket.send(b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                                 b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            except OSError:
                pass  # the client is gone or its window full: the close tells it as much

    def communicate(self) -> bool:
        while True:
            if not self._request_arrived():
                if self.past_deadline(time.monotonic()):
                    self.answer_timeout()
                    return False  # the thread closes the connection
                return True  # back to the selector until more of the request arrives
            self.request_started = self.request_started or time.monotonic()  # None: the end, or a reset
            self.deadline = self.request_started + self.server.request_timeout
            self.timed_out = False
            try:
                keep_open = super().communicate() and not self.timed_out  # the rest of a late body: unread
            finally:
                self.deadline = None
                # bytes of a next request sent along with this one: its deadline runs from now
                self.request_started = time.monotonic() if self.pending else None
            if not (keep_open and self.server.ready
                    and (self.rfile.has_data() or _readable(self.socket, self.server.linger))):
                return keep_open

    def _request_arrived(self) -> bool:
        """Read what the socket holds, waiting a few ms at most; whether the next request is all there (its
        head, and its body when it is at most PREREAD_BODY_BYTES), or the connection ended.

        Until then the connection waits in the selector, so that a client sending a request a byte at a
        time (slow-loris) holds no thread; the whole request must arrive within ``request_timeout``."""
        if self.rfile.buffered():  # pipelined: the next request is already in the reader's buffer
            self.request_started = self.request_started or time.monotonic()
            return True
        wait = _PREREAD_WAIT
        while True:
            try:
                self.socket.settimeout(0.0)
                data = self.socket.recv(65536)
            except BlockingIOError:
                data = None
            except OSError:
                return True  # reset: the parser meets the error and ends the connection
            finally:
                self.socket.settimeout(self.server.timeout)
            if data == b"":
                return True  # the client closed: the parser reads the end and ends the connection
            if data:
                if not self.pending:
                    self.request_started = time.monotonic()
                self.pending += data
                if self.request_complete():
                    return True
            if wait <= 0 or not _readable(self.socket, wait):
                return False
            wait = 0.0  # one more read of what arrived meanwhile

    def request_complete(self) -> bool:
        """Whether ``pending`` holds a whole request head, and its body unless that is large, or announced
        with ``Expect: 100-continue`` (sent after an answer), or chunked (read under the deadline)."""
        pending = self.pending
        end = pending.find(b"\r\n\r\n")
        if end < 0:
            return len(pending) > self.server.max_request_header_size  # the parser answers 431
        head = bytes(pending[:end])
        length = _CONTENT_LENGTH.search(head)
        if length is None or _EXPECT.search(head):
            return True
        return int(length.group(1)) > _PREREAD_BODY_BYTES or len(pending) - end - 4 >= int(length.group(1))


# a request body up to this size is read whole before a thread parses the request (the larger bodies, a
# learner's priorities, are read by the thread, each read under the request's deadline)
_PREREAD_BODY_BYTES = 256 * 1024
# how long a thread waits for the rest of a request it got a part of, before handing the connection back to the
# selector (a client's head and body come in separate writes, a few microseconds apart)
_PREREAD_WAIT = 0.01
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length[ \t]*:[ \t]*(\d{1,18})", re.IGNORECASE)
_EXPECT = re.compile(rb"\r\nexpect[ \t]*:", re.IGNORECASE)


class _RequestIO(io.RawIOBase):
    """A connection's bytes: first what :meth:`_Connection._request_arrived` read ahead, then the socket's,
    each read ending by the request's deadline (a timeout there is cheroot's 408, or the app's)."""

    def __init__(self, conn: "_Connection"):
        super().__init__()
        self.conn = conn

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        conn = self.conn
        if conn.pending:
            n = min(len(buffer), len(conn.pending))
            buffer[:n] = conn.pending[:n]
            del conn.pending[:n]
            return n
        sock = conn.socket
        if conn.deadline is None:
            return sock.recv_into(buffer)
        if conn.timed_out:
            return 0  # the end: cheroot reads what is left of a body before answering, and must not wait
        remaining = conn.deadline - time.monotonic()
        if remaining <= 0:
            conn.timed_out = True
            raise socket.timeout("timed out")  # the words cheroot looks for: 408
        sock.settimeout(min(conn.server.timeout, remaining))
        try:
            return sock.recv_into(buffer)
        except socket.timeout:
            conn.timed_out = True
            raise
        finally:
            sock.settimeout(conn.server.timeout)


class _RequestReader(cheroot.makefile.StreamReader):
    """cheroot's buffered socket reader over :class:`_RequestIO`."""

    def __init__(self, conn: "_Connection", bufsize: int):
        cheroot.makefile.io.BufferedReader.__init__(self, _RequestIO(conn), bufsize)
        self.bytes_read = 0
        self.conn = conn

    def buffered(self) -> bool:
        return super().has_data()

    def has_data(self) -> bool:
        """Whether a request can be parsed without waiting: in the buffer, or whole in what was read ahead."""
        return super().has_data() or (bool(self.conn.pending) and self.conn.request_complete())


def _readable(sock, timeout: float = 0.0) -> bool:
    """Whether ``sock`` has data (or its end) to read, waiting at most ``timeout`` s (the GIL released)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(timeout * 1000.0))


class _Server(cheroot.wsgi.Server):
    """cheroot's WSGI server, its messages (a reset connection, a request it could not parse) to our log."""

    ConnectionClass = _Connection  # waits ServerThread's ``linger`` for a connection's next request
    max_open_connections = 1 << 20  # set by ServerThread
    request_timeout = 10.0  # a request's head and body arrive within this many seconds (set by ServerThread)
    open_connections = 0  # accepted and not closed yet
    refused_connections = 0  # closed at once, every connection being busy

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._count_lock = threading.Lock()

    def prepare(self) -> None:
        super().prepare()
        # cheroot's loop, with the cap on connections and without the spin on EMFILE (_Connections)
        self._connections._selector.close()
        self._connections = _Connections(self)

    def count_connection(self, change: int) -> None:
        with self._count_lock:
            self.open_connections += change

    def error_log(self, msg: str = "", level: int = logging.INFO, traceback: bool = False) -> None:
        # cheroot says INFO for what a busy cluster does all the time (a peer that reset its connection)
        logger.log(logging.DEBUG if level < logging.WARNING else level, "http server: %s", msg, exc_info=traceback)

    def process_conn(self, conn) -> None:
        """A thread for a connection with something to read; one that has sent nothing yet (cheroot hands a
        new connection to a thread at once) waits among the idle keep-alive ones, so that connections
        opened and left silent cannot take every thread."""
        if conn.rfile.has_data() or _readable(conn.socket):
            super().process_conn(conn)
        else:
            self.put_conn(conn)


class ServerThread:
    """A cheroot server for ``app`` on ``host:port`` (0: the OS picks), run in a daemon thread.

    cheroot keeps idle keep-alive connections in a ``selectors`` set: a call costs the same with 4 or 1,000
    connections open. (waitress, before it, asked every open connection whether it was readable on every
    event: over half of the coordinator's CPU with 256 collectors connected.) Each of ``threads`` threads
    reads a request, runs the app and writes the answer, then waits up to ``linger`` seconds for the
    connection's next request (:class:`_Connection`). A request waits in the selector, without a thread,
    until its head and (small) body have arrived; the whole of it must arrive within ``request_timeout``
    seconds (default ``timeout``) of its first byte, else it is answered 408 and the connection closed. At
    most ``max_connections`` are open at once (:class:`_Connections`)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, threads: int = 8, name: str = "http",
                 max_body_bytes: int = 8 * 1024 * 1024, connection_limit: int = 200, timeout: float = 10.0,
                 linger: float = 0.005, max_connections: Optional[int] = None,
                 request_timeout: Optional[float] = None):
        # request_queue_size is the listen backlog: hundreds of collectors connect at once
        self.server = _Server((host, port), app, numthreads=threads, max=threads, server_name="parallel_rl",
                              request_queue_size=1024, timeout=timeout, shutdown_timeout=1)
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
        # the connection loop's select() timeout: stop() waits for the loop to see it (0.5 s by default, which
        # made every close take up to half a second; the idle loop costs nothing to speak of at 50 ms)
        self.server.expiration_interval = 0.05
        try:
            self.server.prepare()  # binds: the port is known from here on
        except OSError as exc:  # cheroot's message: "No socket could be created -- ((host, port): [Errno 98] ...)"
            reason = str(exc).rpartition(": ")[2].rstrip(")") or str(exc)
            raise BindError(f"{name}: cannot listen on {host}:{port}: {reason}; another process holds the port "
                            f"(an earlier run still alive?): stop it or choose another --port (0 lets the OS pick)"
                            ) from None
        self.host, self.port = self.server.bind_addr[0], int(self.server.bind_addr[1])
        self.thread = threading.Thread(target=self.server.serve, name=f"{name}-server", daemon=True)
        self.closed = False

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

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
            logger.warning("http server on port %d: a request still runs %gs after close; left to finish",
                           self.port, timeout + 1.0)
        if self.thread.is_alive():
            self.thread.join(timeout)


# ---- client side -------------------------------------------------------------------
# the largest answer an HttpClient reads: far over any answer of ours (a learner's batch of references for
# a few thousand rows is a few hundred KiB), far under what would take a process's memory
MAX_ANSWER_BYTES = 64 * 1024 * 1024

class HttpClient:
    """JSON calls to one peer, with the cluster token, a timeout and bounded retries.

    Connection failures and timeouts are retried ``max_retries`` times with
    exponential backoff, then raise :class:`PeerUnavailableError`. An HTTP
    error answer raises :class:`RemoteError` (or :class:`AuthError` for
    401/403) at once; an answer that is not our JSON raises ProtocolError, and so does one of more than
    ``max_answer_bytes``, which is never read whole (a peer's answer cannot take this process's memory).
    """

    def __init__(self, base_url: str, token: Optional[str] = None, timeout: float = 5.0,
                 max_retries: int = 3, backoff: float = 0.1, max_backoff: float = 2.0,
                 max_answer_bytes: int = MAX_ANSWER_BYTES):
        self.base_url = base_url.rstrip("/")
        self.max_answer_bytes = int(max_answer_bytes)
        self.token = token
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff, self.max_backoff = backoff, max_backoff
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self.lease: Optional[str] = None
        # urllib3 directly: a call costs about half the CPU of one through requests (a learner's data
        # thread makes ~70 a second on the learner's core). Thread-safe, keeps connections alive, and
        # reads no proxy settings from the environment.
        self._pool = urllib3.PoolManager(num_pools=2, maxsize=8, retries=False)

    def set_lease(self, lease: Optional[str]) -> None:
        """Send ``lease`` (the coordinator's lease token for this worker) with every later call."""
        self.lease = lease
        headers = {k: v for k, v in self._headers.items() if k != LEASE_HEADER}
        if lease:
            headers[LEASE_HEADER] = lease
        self._headers = headers

    def request(self, method: str, path: str, json: Any = None, timeout: Optional[float] = None,
                retries: Optional[int] = None, params: Optional[dict] = None) -> Any:
        url = self.base_url + path
        body = None if json is None else encode_json(json)
        retries = self.max_retries if retries is None else retries
        delay = self.backoff
        last_exc: Optional[Exception] = None
        for attempt in range(retries + 1):
            try:
                response = self._pool.request(method, url, body=body, fields=params, headers=self._headers,
                                              timeout=timeout or self.timeout, preload_content=False)
                content = self._read(method, url, response)
            except urllib3.exceptions.HTTPError as exc:  # refused, reset, timed out
                last_exc = exc
                if attempt < retries:
                    time.sleep(delay)  # backoff between bounded retries, not a wait for state
                    delay = min(delay * 2, self.max_backoff)
                continue
            return self._decode(method, url, response.status, content)
        raise PeerUnavailableError(
            f"{method} {url} failed after {retries + 1} attempt(s): {type(last_exc).__name__}: {last_exc}"
        )

    def _read(self, method: str, url: str, response: urllib3.BaseHTTPResponse) -> bytes:
        """The answer's body, at most ``max_answer_bytes`` of it: past that the connection is closed unread
        and ProtocolError raised."""
        limit = self.max_answer_bytes
        try:
            declared = int(response.headers.get("Content-Length") or 0)
        except ValueError:
            declared = 0
        content = b"" if declared > limit else response.read(limit + 1)
        if declared > limit or len(content) > limit:
            response.close()  # the rest is never read: the connection goes
            response.release_conn()
            exc = ProtocolError(
                f"{method} {url} answered HTTP {response.status} with more than {limit} bytes"
                f"{f' ({declared} declared)' if declared > limit else ''}; a parallel_rl server answers far less "
                f"(is this a parallel_rl server? if the answers are meant to be this large, raise the client's "
                f"max_answer_bytes)")
            exc.status = response.status
            raise exc
        response.release_conn()
        return content

    @staticmethod
    def _decode(method: str, url: str, status: int, content: bytes) -> Any:
        try:
            data = _json.loads(content) if content else {}
        except ValueError:
            snippet = content[:80].decode(errors="replace").replace("\n", " ")
            exc = ProtocolError(
                f"{method} {url} answered HTTP {status} with non-JSON {snippet!r}; is this a parallel_rl server?")
            exc.status = status
            raise exc from None
        if status >= 400:
            err = data.get("error") if isinstance(data, dict) else None
            if not isinstance(err, dict):
                exc = ProtocolError(f"{method} {url} answered HTTP {status} without an error object")
                exc.status = status
                raise exc
            code, message = str(err.get("code", "error")), str(err.get("message", ""))
            if status in (401, 403):
                raise AuthError(f"{method} {url}: {message} (HTTP {status})")
            raise RemoteError(status, code, message)
        return data

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, json: Any = None, **kw: Any) -> Any:
        return self.request("POST", path, json=json if json is not None else {}, **kw)

    def delete(self, path: str, **kw: Any) -> Any:
        return self.request("DELETE", path, **kw)

    def close(self) -> None:
        self._pool.clear()
