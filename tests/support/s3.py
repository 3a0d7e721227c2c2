"""The S3 servers the tests run on, and their fixtures: every S3 test runs on moto's emulator (Python, in this
process) and on SeaweedFS's S3 gateway (a production store, its own process: :mod:`tests.support.seaweedfs`).

A test module takes the fixtures by importing them (``from tests.support.s3 import bucket, s3_env, s3_server``):
``s3_server`` is session-scoped and parametrized over :data:`S3_SERVERS`, so each test that uses it runs once on
each (ids ``[moto]`` / ``[seaweedfs]``); ``s3_env`` points this process and its children at the server, ``bucket``
is a fresh bucket. A test that stops its store makes its own with :func:`start_s3` and restarts it with
``start_again()``."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict

import pytest

from tests.support.seaweedfs import missing_reason, start_seaweedfs

S3_SERVERS = ("moto", "seaweedfs")


@dataclass
class MotoS3:
    """moto's S3 server in this process (``ThreadedMotoServer``); it accepts any credentials unless told not to
    (``moto.settings.INITIAL_NO_AUTH_ACTION_COUNT``). Its objects live in this process, so a server started again
    on the same port serves them."""

    endpoint: str
    port: int
    server: Any = field(repr=False)
    access_key: str = "testing"
    secret_key: str = "testing"
    name: str = "moto"

    def env(self) -> Dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def stop(self) -> None:
        self.server.stop()

    def start_again(self) -> "MotoS3":
        return start_moto(self.port)


def start_moto(port: int = 0) -> MotoS3:
    """moto's S3 server on 127.0.0.1 (``port`` 0: picked by the OS)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer("127.0.0.1", port, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return MotoS3(f"http://{host}:{port}", port, server)


def start_s3(kind: str, tmp_path):
    """A new S3 server of ``kind`` (one of :data:`S3_SERVERS`; SeaweedFS keeps its files under ``tmp_path``);
    skips the test when SeaweedFS is not installed."""
    if kind == "moto":
        return start_moto()
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    return start_seaweedfs(tmp_path / "seaweedfs")


@pytest.fixture(scope="session", params=S3_SERVERS)
def s3_server(request, tmp_path_factory):
    """One S3 server per kind for the whole session (SeaweedFS takes seconds to start): moto, then SeaweedFS."""
    server = start_s3(request.param, tmp_path_factory.mktemp(request.param))
    yield server
    server.stop()


def point_at(server, monkeypatch) -> dict:
    """Set the AWS variables that point this process and its children at ``server`` (the usual ones, nothing
    else) and start a new default boto3 session, which reads them (a session keeps the credentials it first
    found: another server's). Returns the variables."""
    import boto3

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    env = server.env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    return env


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """AWS variables that point this process and its children at the session's server (:func:`point_at`)."""
    return point_at(s3_server, monkeypatch)


@pytest.fixture
def bucket(s3_env):
    """A fresh, empty bucket."""
    import boto3

    name = f"rl-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def objects(bucket, prefix=""):
    """The keys in ``bucket`` under ``prefix``, sorted (through the AWS variables of the environment)."""
    import boto3

    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


class RequestLog:
    """A TCP proxy on 127.0.0.1 (OS-picked port) in front of an S3 server that records each HTTP request our
    code sends through it, as ``(method, path and query)``: S3 requests counted on the wire (``env()`` points a
    process at the proxy instead of the server). Bytes pass unchanged both ways (a signed request stays valid:
    its Host header names the proxy, as the client signed it); the client's stream is parsed only to find where
    each request starts (Content-Length or chunked bodies, ``Expect: 100-continue`` included). ``close()`` stops
    it."""

    def __init__(self, server):
        import socket
        import threading
        from urllib.parse import urlsplit

        upstream = urlsplit(server.endpoint)
        self.server, self.upstream = server, (upstream.hostname, upstream.port)
        self.requests: list = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list = []
        threading.Thread(target=self._accept, name="s3-request-log", daemon=True).start()

    def env(self) -> Dict[str, str]:
        return {**self.server.env(), "AWS_ENDPOINT_URL": self.endpoint}

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def taken(self) -> list:
        """The requests recorded since the last ``taken()`` or ``clear()`` (and forgets them)."""
        with self._lock:
            taken, self.requests[:] = list(self.requests), []
        return taken

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self.upstream, timeout=30)
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()

    @staticmethod
    def _pump(source, sink) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(2)
                except OSError:
                    pass

    def _requests(self, client, upstream) -> None:
        reader = client.makefile("rb")
        try:
            while line := reader.readline():
                head = [line]
                while (header := reader.readline()) not in (b"\r\n", b"\n", b""):
                    head.append(header)
                head.append(header)
                upstream.sendall(b"".join(head))  # before the body: the client may wait for "100 Continue"
                method, target = line.decode("latin-1").split()[:2]
                with self._lock:
                    self.requests.append((method, target))
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (h.decode("latin-1").partition(":") for h in head[1:-1])
                }
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    while True:
                        size_line = reader.readline()
                        upstream.sendall(size_line)
                        size = int(size_line.split(b";")[0], 16)
                        if size == 0:
                            while (trailer := reader.readline()) not in (b"\r\n", b"\n", b""):
                                upstream.sendall(trailer)
                            upstream.sendall(trailer)
                            break
                        upstream.sendall(reader.read(size + 2))  # the chunk and its CRLF
                else:
                    left = int(headers.get("content-length", "0"))
                    while left > 0:
                        data = reader.read1(min(left, 65536))
                        if not data:
                            return
                        upstream.sendall(data)
                        left -= len(data)
        except (OSError, ValueError):
            pass
        finally:
            for sock in (client, upstream):
                try:
                    sock.shutdown(2)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()
        for sock in self._sockets:
            try:
                sock.close()
            except OSError:
                pass


@pytest.fixture
def s3_requests(s3_server, monkeypatch):
    """A :class:`RequestLog` in front of the session's server, with the AWS variables of this process pointing
    at it; ``bucket_through(log)`` makes a bucket there."""
    log = RequestLog(s3_server)
    point_at(log, monkeypatch)
    yield log
    log.close()
