"""What a stranger's connections may cost a server (issue #41: findings 1, 2 and 15): no body of a request without
the cluster token is read, their unfinished heads share one read-ahead budget, one address holds a bounded number of
connections that never showed the token, and a coordinator under 2,000 such connections keeps its memory, its threads
and its workers' leases. Real servers on 127.0.0.1 with OS-picked ports, real sockets, a real coordinator process."""

import os
import re
import select
import socket
import subprocess
import sys
import threading
import time

import pytest
from flask import Flask, jsonify

from parallel_rl.transport import HttpClient, ServerThread, install_json_errors, json_body
from tests.support import eventually
from tests.test_coordinator import TOKEN, slaves  # noqa: F401  (fixture)


@pytest.fixture
def echo_server():
    """A server with the cluster token whose ``/echo`` counts the bodies it read; yields (server, reads)."""
    made = []
    reads = []

    def make(**kwargs):
        app = Flask("echo")
        install_json_errors(app)

        @app.post("/echo")
        def echo():
            body = json_body()
            reads.append(len(body))
            return jsonify(body)

        @app.get("/ping")
        def ping():
            return jsonify({"ok": True})

        kwargs.setdefault("request_timeout", 30.0)
        server = ServerThread(app, threads=2, token=TOKEN, **kwargs).start()
        made.append(server)
        return server, reads

    yield make
    for server in made:
        server.close()


def address(server):
    host, port = server.url.split("//")[1].split(":")
    return host, int(port)


def read_answer(sock, timeout: float = 5.0) -> bytes:
    """Everything the server sends until it closes the connection (fails past ``timeout``)."""
    sock.settimeout(timeout)
    answer = b""
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return answer
        if not data:
            return answer
        answer += data


def closed_by_server(sock, timeout: float) -> bool:
    """Whether the server closed ``sock`` (an answer before the end is allowed) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
        return True
    except socket.timeout:
        return False
    except OSError:  # reset
        return True


def ended(socks, wait: float) -> list:
    """For each of ``socks`` (checked together, waiting ``wait`` s at most): whether the server closed it."""
    readable = set(select.select(socks, [], [], wait)[0])
    return [sock in readable and closed_by_server(sock, 0.5) for sock in socks]


HEAD = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


@pytest.mark.parametrize(
    "head, status",
    [
        (HEAD + b"Content-Length: 1000000\r\n\r\n{", 401),  # a large body that would trickle for the whole deadline
        (HEAD + b"Content-Length: 10\r\n\r\n", 401),  # a small body that never comes
        (HEAD + b"Expect: 100-continue\r\nContent-Length: 10\r\n\r\n", 401),
        (HEAD + b"Transfer-Encoding: chunked\r\n\r\n", 401),
        (HEAD + b"Authorization: Bearer wrong\r\nContent-Length: 1000000\r\n\r\n", 403),
        (HEAD + b"Authorization: Basic eDp5\r\nContent-Length: 10\r\n\r\n", 401),
        # pipelined behind a request that needs no token: the second is judged as a first one would be
        (b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n" + HEAD + b"Content-Length: 500000\r\n\r\n{", 401),
    ],
)
def test_a_body_without_the_token_is_never_read_and_the_answer_comes_at_once(echo_server, head, status):
    """A request announcing a body without the cluster token is answered 401 (403 with a wrong token), in the
    JSON error shape, with ``Connection: close``, before its body arrives (the server's deadline is 30 s, the
    client waits 5): the body is never read and no app code runs for it."""
    server, reads = echo_server()
    with socket.create_connection(address(server), timeout=5) as sock:
        sock.sendall(head)
        answer = read_answer(sock)
    assert answer, "no answer within 5 s: the server waited for the body of a request without the token"
    last = answer[answer.rfind(b"HTTP/1.1 ") :]
    assert last.startswith(b"HTTP/1.1 %d" % status), answer[:300]
    assert b"Connection: close" in last and b'"error": {"code": "' in last, last
    assert reads == []


def test_a_token_holder_is_served_while_strangers_trickle_large_bodies(echo_server):
    """Strangers announcing large bodies are turned away at once and hold no thread: a token holder's request
    (with a body) on a 2-thread server is served meanwhile, and its body is read."""
    server, reads = echo_server()
    strangers = []
    try:
        for _ in range(40):
            sock = socket.create_connection(address(server), timeout=5)
            sock.sendall(HEAD + b"Content-Length: 1000000\r\n\r\n{")
            strangers.append(sock)
        client = HttpClient(server.url, TOKEN, timeout=5.0, max_retries=0)
        try:
            assert client.post("/echo", {"pad": "x" * 1000}) == {"pad": "x" * 1000}
        finally:
            client.close()
        assert all(closed_by_server(sock, 5.0) for sock in strangers)
    finally:
        for sock in strangers:
            sock.close()
    assert reads == [1]


def test_strangers_unfinished_heads_share_one_budget_and_the_oldest_are_cut(echo_server):
    """64 strangers each park 32 KiB of a head that never ends (2 MiB) in a server whose read-ahead budget is
    1 MiB: the oldest are cut (their connections closed) so that what is held stays in the budget, the newest
    stay open, and a token holder is served."""
    server, _ = echo_server(read_ahead_bytes=1024 * 1024)
    part = b"GET /ping HTTP/1.1\r\nX-Pad: " + b"p" * (32 * 1024)
    strangers = []
    try:
        for _ in range(64):
            sock = socket.create_connection(address(server), timeout=5)
            sock.sendall(part)
            strangers.append(sock)
        client = HttpClient(server.url, TOKEN, timeout=5.0, max_retries=0)
        try:
            assert client.post("/echo", {"a": 1}) == {"a": 1}
        finally:
            client.close()
        # each connection's bytes were read before the next was opened, so whether one was cut is settled
        # by the time the token holder's answer came; a cut connection reads its end at once
        cut = ended(strangers, 0.5)
        assert sum(cut) >= 64 - 32, f"only {sum(cut)} of 64 heads cut: more than the 1 MiB budget is held"
        assert cut[:16] == [True] * 16, f"the oldest heads were not the ones cut: {cut}"
        assert not any(cut[-8:]), f"the newest heads were cut: {cut}"
    finally:
        for sock in strangers:
            sock.close()


def test_one_address_holds_at_most_its_cap_of_connections_without_the_token(echo_server):
    """With ``max_connections_per_peer`` 16, a 17th connection from 127.0.0.1 that has shown no token is closed
    at once; connections that showed the token do not count (a worker's keep-alive connections go on); once the
    strangers leave, new connections are accepted again."""
    server, _ = echo_server(max_connections_per_peer=16)
    workers = [HttpClient(server.url, TOKEN, timeout=5.0, max_retries=0) for _ in range(4)]
    strangers = []
    try:
        for worker in workers:  # each proves its connection: it no longer counts against 127.0.0.1
            assert worker.post("/echo", {"w": 1}) == {"w": 1}
        for _ in range(16):
            strangers.append(socket.create_connection(address(server), timeout=5))
        eventually(lambda: server.server.open_connections >= 20, timeout=10, message="16 strangers accepted")
        extra = socket.create_connection(address(server), timeout=5)
        strangers.append(extra)
        assert closed_by_server(extra, 5.0), "a 17th connection without the token was kept open"
        assert not closed_by_server(strangers[0], 0.2), "a stranger within the cap was closed"
        for worker in workers:  # their keep-alive connections still serve
            assert worker.post("/echo", {"w": 2}) == {"w": 2}
    finally:
        for sock in strangers:
            sock.close()
        for worker in workers:
            worker.close()
    eventually(lambda: server.server.open_connections <= 4, timeout=10, message="the strangers' connections closed")
    with socket.create_connection(address(server), timeout=5) as sock:
        sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert read_answer(sock).startswith(b"HTTP/1.1 200")


# ---- a coordinator under 2,000 strangers' connections ---------------------------------------------------------
STRANGERS = 2000
RSS_GROWTH_BOUND_MIB = 160  # the read-ahead budget (16 MiB) + ~30 KiB a connection of cheroot's objects and buffers
THREAD_GROWTH_BOUND = 2  # request threads are a fixed pool: a stranger never costs one


def proc_status(pid: int, key: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


@pytest.fixture
def coordinator_process(tmp_path):
    """A `parallel-rl coordinator` subprocess with the cluster token whose cap per address is past the attack
    (the budget, not the cap, must hold the memory); yields (url, process, log path)."""
    log_path = tmp_path / "coordinator.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "parallel_rl",
                "coordinator",
                "-c",
                "configs/cartpole_dqn_parallel.py",
                "--port",
                "0",
                "--shared-dir",
                str(tmp_path / "shared"),
                "--set",
                f"parallel.coordinator.max_connections_per_peer={2 * STRANGERS}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PARALLEL_RL_TOKEN": TOKEN},
        )
    try:
        found = eventually(
            lambda: proc.poll() is None and re.search(r"REST API: (http://\S+)/api/v1", log_path.read_text()),
            timeout=120,
            interval=0.1,
            message=f"the coordinator's URL in {log_path}",
        )
        yield found.group(1), proc, log_path
    finally:
        proc.kill()
        proc.wait(10)


class Strangers:
    """``STRANGERS`` connections without the token, a quarter each: idle, trickling a head a byte at a time,
    announcing a 100 MB body and trickling it, announcing a body with ``Expect: 100-continue``. Those the server
    closes are opened again, until ``stop``."""

    PLANS = [
        b"",
        b"GET /api/v1/cluster HTTP/1.1\r\nHost: x\r\nX-Pad: ",
        b"POST /api/v1/collectors HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000000\r\n\r\n{",
        b"POST /api/v1/collectors HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n",
    ]

    def __init__(self, url: str):
        host, port = url.split("//")[1].split(":")
        self.address = (host, int(port))
        self.socks = [None] * STRANGERS
        self.opened = self.closed_by_server = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self, i: int) -> None:
        try:
            sock = socket.create_connection(self.address, timeout=5)
            sock.sendall(self.PLANS[i % 4])
            sock.setblocking(False)
            self.socks[i] = sock
            self.opened += 1
        except OSError:
            self.socks[i] = None

    def _run(self) -> None:
        for i in range(STRANGERS):
            if self.stop.is_set():
                return
            self._open(i)
        while not self.stop.wait(0.5):
            for i, sock in enumerate(self.socks):
                if sock is None:
                    self._open(i)
                    continue
                try:
                    if sock.recv(65536) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    pass
                except OSError:
                    sock.close()
                    self.socks[i] = None
                    self.closed_by_server += 1
                    continue
                if i % 4:
                    try:
                        sock.send(b"x")
                    except OSError:
                        pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        for sock in self.socks:
            if sock is not None:
                sock.close()


def test_two_thousand_strangers_leave_a_coordinator_its_memory_threads_and_leases(coordinator_process, slaves):  # noqa: F811
    """2,000 connections without the token (idle, trickling heads, trickling 100 MB bodies, ``Expect:
    100-continue``) against a real coordinator: its RSS grows by less than RSS_GROWTH_BOUND_MIB, its threads stay
    the fixed pool, a worker's heartbeats keep its lease (never marked lost) and a token holder's calls are
    answered throughout, each within the client's timeout."""
    url, proc, log_path = coordinator_process
    collector = slaves("collector", url)
    assert collector.got_task.wait(30), "the collector got no task"
    client = HttpClient(url, TOKEN, timeout=5.0, max_retries=0)
    rss_before = proc_status(proc.pid, "VmRSS") / 1024
    threads_before = proc_status(proc.pid, "Threads")
    strangers = Strangers(url)
    strangers.thread.start()
    rss_peak, threads_peak, states = rss_before, threads_before, set()
    try:
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:
            workers = client.get("/api/v1/collectors")["collectors"]  # a token holder's call, within 5 s
            states.update(w["state"] for w in workers if w["worker_id"] == collector.worker_id)
            rss_peak = max(rss_peak, proc_status(proc.pid, "VmRSS") / 1024)
            threads_peak = max(threads_peak, proc_status(proc.pid, "Threads"))
            time.sleep(0.1)  # not a synchronisation: the probes' pace
        opened, turned_away = strangers.opened, strangers.closed_by_server
    finally:
        strangers.close()
        client.close()
    assert opened >= STRANGERS, f"only {opened} connections opened"
    growth = rss_peak - rss_before
    assert growth < RSS_GROWTH_BOUND_MIB, f"RSS grew {growth:.0f} MiB under {STRANGERS} strangers' connections"
    assert threads_peak - threads_before <= THREAD_GROWTH_BOUND, (threads_before, threads_peak)
    assert states <= {"busy", "idle"}, f"the collector's states under the attack: {states}"
    assert turned_away > 0, "no stranger announcing a body was turned away"
    assert proc.poll() is None
    log = log_path.read_text()
    assert "Traceback" not in log, log[-3000:]
