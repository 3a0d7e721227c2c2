"""The HTTP layer: auth, typed errors, timeouts and retries against real servers on 127.0.0.1."""

import json
import socket
import threading
import time

import pytest
from flask import Flask, jsonify, request

from parallel_rl.errors import AuthError, PeerUnavailableError, ProtocolError, RemoteError
from parallel_rl.transport import ApiError, HttpClient, ServerThread, check_token, install_json_errors
from parallel_rl.slave.slave import Outbox


@pytest.fixture
def server():
    app = Flask("test")
    install_json_errors(app)
    release = threading.Event()

    @app.post("/secret")
    def secret():
        check_token("s3cret")
        return jsonify({"ok": True})

    @app.get("/slow")
    def slow():
        release.wait(5)
        return jsonify({"ok": True})

    @app.get("/garbage")
    def garbage():
        return "<html>not json</html>", 200

    @app.get("/boom")
    def boom():
        raise RuntimeError("kaput")

    @app.get("/conflict")
    def conflict():
        raise ApiError(409, "conflict", "already there")

    srv = ServerThread(app).start()
    yield srv
    release.set()
    srv.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_token_required_and_checked(server):
    with pytest.raises(AuthError, match="missing cluster token"):
        HttpClient(server.url).post("/secret")
    with pytest.raises(AuthError, match="wrong cluster token"):
        HttpClient(server.url, token="nope").post("/secret")
    assert HttpClient(server.url, token="s3cret").post("/secret") == {"ok": True}


def test_typed_errors(server):
    client = HttpClient(server.url)
    with pytest.raises(RemoteError) as exc:
        client.get("/conflict")
    assert exc.value.status == 409 and exc.value.code == "conflict"
    with pytest.raises(RemoteError) as exc:
        client.get("/nowhere")
    assert exc.value.status == 404 and exc.value.code == "not_found"
    with pytest.raises(RemoteError) as exc:
        client.get("/boom")
    assert exc.value.status == 500 and "kaput" in exc.value.message


def test_garbage_answer_is_a_protocol_error(server):
    with pytest.raises(ProtocolError, match="non-JSON"):
        HttpClient(server.url).get("/garbage")


def test_timeout_is_bounded(server):
    client = HttpClient(server.url, timeout=0.3, max_retries=1, backoff=0.05)
    start = time.monotonic()
    with pytest.raises(PeerUnavailableError, match="2 attempt"):
        client.get("/slow")
    assert time.monotonic() - start < 3.0


def test_refused_connection_is_bounded():
    client = HttpClient(f"http://127.0.0.1:{free_port()}", timeout=0.5, max_retries=2, backoff=0.05)
    start = time.monotonic()
    with pytest.raises(PeerUnavailableError, match="3 attempt"):
        client.get("/x")
    assert time.monotonic() - start < 3.0


def test_outbox_batches_and_retries():
    sent, controls = [], []
    fail = {"n": 1}
    done = threading.Event()

    def send(batch):
        if fail["n"]:
            fail["n"] -= 1
            raise PeerUnavailableError("down")
        sent.append(list(batch))
        done.set()
        return {"policy_version": len(sent)}

    outbox = Outbox(send, controls.append, flush_interval=0.05)
    for i in range(5):
        outbox.put({"type": "chunk", "i": i})
    assert outbox.flush(timeout=5.0)
    outbox.close()
    assert [m["i"] for batch in sent for m in batch] == [0, 1, 2, 3, 4]  # nothing lost, order kept
    assert len(sent) <= 2  # batched, not one call per message
    assert controls and controls[-1]["policy_version"] == len(sent)
    assert outbox.failures == 1


def test_a_connections_next_request_is_served_by_the_thread_that_answered_the_last_one():
    """A thread waits ``linger`` s after its answer for the connection's next request, instead of handing the
    connection back to cheroot's selector thread (which made a busy coordinator's REST API wait ~150 ms). The
    pool's threads take turns otherwise: without it 20 calls meet several threads."""
    app = Flask("threads")

    @app.get("/thread")
    def thread():
        return jsonify({"thread": threading.get_ident()})

    srv = ServerThread(app, threads=8, linger=5.0).start()  # a client of this test calls well within 5 s
    client = HttpClient(srv.url, timeout=10, max_retries=0)
    try:
        assert len({client.get("/thread")["thread"] for _ in range(20)}) == 1
        other = HttpClient(srv.url, timeout=10, max_retries=0)  # another connection: another thread
        assert other.get("/thread")["thread"] != client.get("/thread")["thread"]
        other.close()
    finally:
        client.close()  # the lingering thread sees the connection end and lets it go
        srv.close()


def test_requests_sent_together_on_one_connection_are_all_answered_in_order():
    """Pipelined requests arrive in one read: the server's socket reader must say it still holds the next one
    (``has_data``), since the socket itself has nothing more to read. With ``linger=0`` nothing else would
    serve them: the connection would wait in the selector for bytes that never come."""
    app = Flask("pipelined")

    @app.post("/echo")
    def echo():
        return jsonify(request.get_json())

    srv = ServerThread(app, threads=4, linger=0.0).start()
    host, port = srv.url.split("//")[1].split(":")
    bodies = [b'{"n": %d, "pad": "%s"}' % (i, b"x" * (100 * i)) for i in range(3)]
    wire = b"".join(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(b), b)
        for b in bodies
    )
    try:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(wire)
            received = b""
            while received.count(b"HTTP/1.1 200") < 3 or not received.rstrip().endswith(b"}"):
                data = sock.recv(65536)  # a timeout (10 s) fails the test
                assert data, received
                received += data
        answers = [json.loads(part[part.index(b"{") :]) for part in received.split(b"HTTP/1.1 ")[1:]]
        assert [a["n"] for a in answers] == [0, 1, 2]
        assert [len(a["pad"]) for a in answers] == [0, 100, 200]
    finally:
        srv.close()


def test_closing_a_server_does_not_wait_for_a_request_stuck_in_the_app():
    app = Flask("stuck")
    entered, release = threading.Event(), threading.Event()

    @app.get("/stuck")
    def stuck():
        entered.set()
        release.wait(60)  # a handler that would outlive any sane shutdown
        return jsonify({"ok": True})

    srv = ServerThread(app).start()
    caller = threading.Thread(target=lambda: HttpClient(srv.url, timeout=60, max_retries=0).get("/stuck"), daemon=True)
    caller.start()
    try:
        assert entered.wait(10)
        closer = threading.Thread(target=srv.close, kwargs={"timeout": 0.5}, daemon=True)
        closer.start()
        closer.join(10)  # close waits 0.5 s for the request, then lets it be
        assert not closer.is_alive()
        with pytest.raises(PeerUnavailableError):  # the port no longer takes calls
            HttpClient(srv.url, timeout=2, max_retries=0).get("/stuck")
    finally:
        release.set()
        caller.join(10)
