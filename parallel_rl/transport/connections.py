"""cheroot's connection handling, made safe for a cluster's traffic and for strangers' connections: a cap on open
connections and on a peer's unproven ones, no spin when the process runs out of descriptors, requests read ahead in the
selector under a deadline (a client trickling its request holds no thread) within one budget of bytes for all heads not
yet shown to carry the cluster token, and no body read for a request without it (answered 401/403 and closed).
:class:`~parallel_rl.transport.server.ServerThread` is the way in."""

from __future__ import annotations

import ctypes
import errno
import heapq
import io
import logging
import math
import re
import resource
import select
import selectors
import socket
import threading
import time
from typing import Any, Optional

import cheroot.connections
import cheroot.makefile
import cheroot.server
import cheroot.wsgi

from .codec import encode_json
from .strangers import ReadAhead, bearer_refusal

logger = logging.getLogger(__name__)


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
        self._open_peak = 0  # the most connections open since memory was last handed back (_give_memory_back)

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
            conn = super()._from_server_socket(server_socket)
        except OSError as exc:
            if exc.errno not in _EXHAUSTED:
                raise
            self._exhausted(exc)
            return None
        if conn is not None and not server.read_ahead.admit(conn, getattr(conn, "remote_addr", None)):
            conn.close()  # its address holds max_connections_per_peer connections that showed no token
            server.refused_connections += 1
            self._warn(
                f"{conn.remote_addr} holds {server.read_ahead.max_per_peer} connections that showed no "
                f"cluster token (the most one address may: max_connections_per_peer); closing new ones"
            )
            return None
        return conn

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
        self._warn(
            f"{self.server.open_connections} connections open (the most this server keeps: "
            f"max_open_connections={self.server.max_open_connections}), all busy; closing new ones"
        )

    def _exhausted(self, exc: OSError) -> None:
        shed = self._shed_idle(max(1, len(self._idle()) // 4))
        if not shed:  # nothing of ours to free: stop accepting for a while, the backlog holds the clients
            self._pause = min(1.0, max(0.05, self._pause * 2))
            self._resume_at = time.monotonic() + self._pause
            self._selector.unregister(self.server.socket.fileno())
        self._warn(
            f"out of descriptors ({exc.strerror}) with {self.server.open_connections} connections open; "
            f"closed {shed} idle connection(s)"
            + ("" if shed else f", accepting again in {self._pause:.2f}s")
            + ": raise the open-file limit (ulimit -n) or lower max_open_connections"
        )

    def _give_memory_back(self) -> None:
        """After many connections closed, hand the memory their buffers held back to the OS (glibc keeps freed
        heap for reuse: 7,500 strangers' connections left the coordinator at 1.8 GiB after they closed)."""
        open_now = self.server.open_connections
        self._open_peak = max(self._open_peak, open_now)
        if self._open_peak - open_now >= _TRIM_AFTER_CLOSED and _malloc_trim is not None:
            self._open_peak = open_now
            _malloc_trim(0)

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
            self._give_memory_back()
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
    keeps its thread; one that sends later (a heartbeat a second later) costs a thread ``linger`` s.

    A request that announces a body (``Content-Length``, chunked, ``Expect``) without the cluster token, on a
    server that has one, is answered 401/403 and the connection closed, its body never read (:class:`ReadAhead`)."""

    def __init__(self, server, sock, makefile=cheroot.makefile.MakeFile):
        super().__init__(server, sock, makefile)
        self.pending = bytearray()  # what arrived of the next request before a thread parses it
        self.request_started: Optional[float] = None  # time.monotonic() of the next request's first byte
        self.deadline: Optional[float] = None  # while a request is read: its reads end by then
        self.timed_out = False  # the request read past its deadline: the connection closes after the answer
        self.peer: Optional[str] = None  # the address its place is counted against while unproven (ReadAhead)
        self.proven = False  # a request head carried the cluster token
        self.busy = False  # a thread has it
        self.was_cut = False  # ReadAhead cut it to stay in its budget
        self.refusal: Optional[tuple] = None  # (status, code, message) to answer instead of parsing the request
        self.rfile = _RequestReader(self, self.rbufsize)
        self._counted = True
        server.count_connection(+1)

    def close(self) -> None:
        if self._counted:
            self._counted = False
            self.server.count_connection(-1)
            self.server.read_ahead.forget(self)
            self.pending = bytearray()
        super().close()

    def cut(self) -> None:
        """Cut by :class:`ReadAhead` (under its lock, while no thread has the connection): the selector sees its
        end at once and a thread closes it."""
        self.was_cut = True
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already gone: the selector sees that too

    def past_deadline(self, now: float) -> bool:
        return self.request_started is not None and now > self.request_started + self.server.request_timeout

    def time_out(self) -> None:
        """Close the connection; with a request begun past its deadline, answer 408 first (best effort)."""
        self.answer_timeout()
        self.close()

    def answer_timeout(self) -> None:
        """Answer 408 when a request was begun (best effort: the connection is closed next)."""
        if self.request_started is not None:
            self.answer_and_close(
                408, "request_timeout", f"the request was not complete within {self.server.request_timeout:g}s"
            )

    def answer_and_close(self, status: int, code: str, message: str) -> None:
        """Send ``{"error": ...}`` with ``status`` and ``Connection: close``, without waiting (best effort: the
        connection is closed next; whatever the client still sends is never read)."""
        body = encode_json({"error": {"code": code, "message": message}})
        reason = _REASONS.get(status, b"Error")
        try:
            self.socket.setblocking(False)
            self.socket.send(
                b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (status, reason, len(body), body)
            )
        except OSError:
            pass  # the client is gone or its window full: the close tells it as much

    def communicate(self) -> bool:
        read_ahead = self.server.read_ahead
        if not read_ahead.enter(self):
            return False  # cut meanwhile (ReadAhead): the thread closes it
        try:
            return self._serve()
        finally:
            read_ahead.leave(self)

    def _serve(self) -> bool:
        while True:
            if not self._request_arrived():
                if self.past_deadline(time.monotonic()):
                    self.answer_timeout()
                    return False  # the thread closes the connection
                return True  # back to the selector until more of the request arrives
            if self.refusal is not None:
                self.answer_and_close(*self.refusal)
                return False
            self.request_started = self.request_started or time.monotonic()  # None: the end, or a reset
            self.deadline = self.request_started + self.server.request_timeout
            self.timed_out = False
            try:
                keep_open = super().communicate() and not self.timed_out  # the rest of a late body: unread
            finally:
                self.deadline = None
                # bytes of a next request sent along with this one: its deadline runs from now
                self.request_started = time.monotonic() if self.pending else None
            if not (
                keep_open
                and self.server.ready
                and (self.rfile.has_data() or _readable(self.socket, self.server.linger))
            ):
                return keep_open

    def _request_arrived(self) -> bool:
        """Read what the socket holds, waiting a few ms at most; whether the next request is all there (its
        head, and its body when it is at most PREREAD_BODY_BYTES and the head carried the token), or the
        connection ended, or the request is refused (``refusal``).

        Until then the connection waits in the selector, so that a client sending a request a byte at a
        time (slow-loris) holds no thread; the whole request must arrive within ``request_timeout``."""
        if self.rfile.buffered():  # pipelined: the next request is already in the reader's buffer
            self.request_started = self.request_started or time.monotonic()
            if self.proven:
                return True
            # a stranger's next request goes through the same door as a first one: its head is judged
            self.pending[:0] = self.rfile.read1(len(self.rfile.peek()))
            if not self.server.read_ahead.hold(self, len(self.pending)):
                self.refusal = _BUSY
                return True
            if self._judged():
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
                if not self.server.read_ahead.hold(self, len(self.pending) + len(data)):
                    self.refusal = _BUSY
                    return True
                self.pending += data
                if self._judged():
                    return True
            if wait <= 0 or not _readable(self.socket, wait):
                return False
            wait = 0.0  # one more read of what arrived meanwhile

    def _judged(self) -> bool:
        """Whether ``pending`` holds what a thread may parse: a whole head (proving the connection when it
        carries the token, refusing it when it announces a body without), and the body read ahead. A proven
        connection's head is not looked at here (a worker's every request passes this way)."""
        read_ahead = self.server.read_ahead
        end = self.pending.find(b"\r\n\r\n") if read_ahead.token and not self.proven else -1
        if end >= 0:
            head = bytes(self.pending[:end])
            authorization = _AUTHORIZATION.search(head)
            refusal = bearer_refusal(
                authorization.group(1).decode("latin-1") if authorization else "", read_ahead.token
            )
            if refusal is None:
                read_ahead.prove(self)
            elif _announces_body(head):
                self.refusal = refusal
                return True
        return self.request_complete()  # a head past max_request_header_size too: the parser answers 431

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


def _announces_body(head: bytes) -> bool:
    length = _CONTENT_LENGTH.search(head)
    return bool((length and int(length.group(1)) > 0) or _TRANSFER_ENCODING.search(head) or _EXPECT.search(head))


# a request body up to this size is read whole before a thread parses the request (the larger bodies, a
# learner's priorities, are read by the thread, each read under the request's deadline)
_PREREAD_BODY_BYTES = 256 * 1024
# how long a thread waits for the rest of a request it got a part of, before handing the connection back to the
# selector (a client's head and body come in separate writes, a few microseconds apart)
_PREREAD_WAIT = 0.01
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length[ \t]*:[ \t]*(\d{1,18})", re.IGNORECASE)
_EXPECT = re.compile(rb"\r\nexpect[ \t]*:", re.IGNORECASE)
_TRANSFER_ENCODING = re.compile(rb"\r\ntransfer-encoding[ \t]*:", re.IGNORECASE)
_AUTHORIZATION = re.compile(rb"\r\nauthorization[ \t]*:([^\r\n]*)", re.IGNORECASE)
_BUSY = (
    503,
    "unavailable",
    "the server holds as many unfinished requests of clients without the cluster token "
    "as it may (its read-ahead budget); try again",
)
_REASONS = {401: b"Unauthorized", 403: b"Forbidden", 408: b"Request Timeout", 503: b"Service Unavailable"}
# once this many connections closed since the most open, freed memory is handed back to the OS (malloc_trim)
_TRIM_AFTER_CLOSED = 256
# the process's own symbols (libc among them): find_library("c") would run ldconfig at every process's start-up
_malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc only


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
            conn.server.read_ahead.hold(conn, len(conn.pending))  # parsed: no longer held ahead
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


class Server(cheroot.wsgi.Server):
    """cheroot's WSGI server, its messages (a reset connection, a request it could not parse) to our log."""

    ConnectionClass = _Connection  # waits ServerThread's ``linger`` for a connection's next request
    max_open_connections = 1 << 20  # set by ServerThread
    request_timeout = 10.0  # a request's head and body arrive within this many seconds (set by ServerThread)
    open_connections = 0  # accepted and not closed yet
    refused_connections = 0  # closed at once, every connection being busy or its address at its cap
    # strangers' read-ahead bytes and connections per address (set by ServerThread; this default limits nothing)
    read_ahead = ReadAhead(None, 1 << 62, 1 << 62)

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
