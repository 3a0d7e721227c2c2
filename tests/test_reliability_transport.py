"""The HTTP transport under hostile clients and hostile inputs (issue #23: items 2, 7, 11, 12, 13): real
servers on 127.0.0.1 with OS-picked ports, real sockets, real subprocesses."""

import json

import pytest
import requests

from parallel_rl.transport import LEASE_HEADER
from tests.support import eventually
from tests.test_coordinator import TOKEN, slaves  # noqa: F401  (fixture)

AUTH = {"Authorization": f"Bearer {TOKEN}"}
HUGE = 10**400  # an integer past float range: json.dumps writes it, float() of it raises OverflowError


def assert_json_4xx(response, what: str):
    """``response`` is a 4xx with the one JSON error shape (never a 500)."""
    assert 400 <= response.status_code < 500, f"{what}: HTTP {response.status_code} {response.text[:300]}"
    error = response.json()["error"]
    assert isinstance(error["code"], str) and isinstance(error["message"], str), (what, error)


def post_as(server, worker, path, body):
    """``body`` (an object, or raw JSON text) posted to ``path`` as ``worker``, with its lease."""
    data = body if isinstance(body, str) else json.dumps(body)
    return requests.post(
        f"{server.url}/api/v1{path}",
        data=data,
        timeout=10,
        headers={**AUTH, LEASE_HEADER: worker.coordinator.lease, "Content-Type": "application/json"},
    )


# ---- 13. authenticated hostile inputs are 4xx, never 500 ---------------------------------------------------
def test_numbers_past_float_range_and_deep_nesting_are_4xx_json(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    learner = slaves("learner", server.url, run=False)
    assert collector.got_task.wait(10)
    metadata = f"/workers/{collector.worker_id}/metadata"
    sample = "/buffers/default/sample"
    deep = "[" * 50_000 + "]" * 50_000
    cases = [
        (metadata, {"messages": [], "wait_for_allowance": HUGE}),
        (metadata, {"messages": [], "wait_for_allowance": -HUGE}),
        (sample, {"worker_id": learner.worker_id, "batch_size": 4, "wait": HUGE}),
        (
            sample,
            {
                "worker_id": learner.worker_id,
                "batch_size": 4,
                "wait": 0.01,
                "priorities": {"index": [0], "uid": [0], "priority": [HUGE]},
            },
        ),
        (
            sample,
            {
                "worker_id": learner.worker_id,
                "batch_size": 4,
                "wait": 0.01,
                "priorities": {"index": [HUGE], "uid": [0], "priority": [1.0]},
            },
        ),
        (metadata, '{"messages": %s}' % deep),
    ]
    for path, body in cases:
        worker = learner if path == sample else collector
        assert_json_4xx(post_as(server, worker, path, body), f"{path} {str(body)[:80]}")
    # messages carrying numbers past float range are refused one by one, in a 200 answer
    task_id = collector.received[0].task_id
    for worker, message in [
        (
            collector,
            {
                "type": "chunk",
                "task_id": task_id,
                "chunk": "c-1",
                "size": 4,
                "policy_version": -1,
                "env_steps": 4,
                "episode_returns": [HUGE],
            },
        ),
        (learner, {"type": "learn_info", "train_iter": 1, "info": {"loss": HUGE}}),
    ]:
        answer = post_as(server, worker, f"/workers/{worker.worker_id}/metadata", {"messages": [message]})
        assert answer.status_code == 200, answer.text[:300]
        assert [r["code"] for r in answer.json()["refused"]] == ["bad_request"], answer.text[:300]
    # a heartbeat reads its body leniently (a body that is not JSON counts as none): never a 500
    for body in ('{"problems": %s}' % deep, deep):
        answer = post_as(server, collector, f"/workers/{collector.worker_id}/heartbeat", body)
        assert answer.status_code == 200 and answer.json()["state"] in ("idle", "busy"), answer.text[:300]
    # the coordinator lives on: a plain heartbeat is answered
    assert post_as(server, collector, f"/workers/{collector.worker_id}/heartbeat", {}).status_code == 200


def test_an_evaluator_result_without_a_usable_mean_never_fails_the_request(coordinator_factory, slaves):  # noqa: F811
    """A mean of null is what an evaluator sends when no episode finished (NaN goes as null): the task ends,
    no eval return is recorded. A mean that is not a number is refused with 400, naming the field."""
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(10)
    learner = slaves("learner", server.url, run=False)
    learner.announce_policy(0)
    evaluator = eventually(lambda: collector.inbox.take(lambda t: t.kind == "evaluator"), message="evaluator task")
    metadata = f"/workers/{collector.worker_id}/metadata"
    for mean in ("high", [1.0], HUGE, True):
        answer = post_as(
            server,
            collector,
            metadata,
            {
                "messages": [
                    {"type": "task_done", "task_id": evaluator.task_id, "result": {"eval_episode_return_mean": mean}}
                ]
            },
        )
        assert answer.status_code == 200, answer.text
        refused = answer.json()["refused"]
        assert len(refused) == 1 and refused[0]["code"] == "bad_request", refused
        assert "eval_episode_return_mean" in refused[0]["message"]
    answer = post_as(
        server,
        collector,
        metadata,
        {
            "messages": [
                {
                    "type": "task_done",
                    "task_id": evaluator.task_id,
                    "result": {"eval_episode_return_mean": None, "episodes": 0},
                }
            ]
        },
    )
    assert answer.status_code == 200 and answer.json()["refused"] == [], answer.text
    summary = requests.get(f"{server.url}/api/v1/cluster", headers=AUTH, timeout=5).json()
    assert summary["state"] == "running" and summary["last_eval_return"] is None
    task = requests.get(f"{server.url}/api/v1/tasks/{evaluator.task_id}", headers=AUTH, timeout=5).json()
    assert task["state"] == "finished"


# ---- 11. a taken port is one line and exit 2 -----------------------------------------------------------
@pytest.mark.parametrize("role", ["coordinator", "collector"])
def test_a_role_on_a_taken_port_says_so_in_one_line_and_exits_2(cli, tmp_path, role):
    import socket

    holder = socket.socket()  # another process's listening socket, as an earlier coordinator that still runs
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    extra = ["--coordinator", "http://127.0.0.1:9"] if role == "collector" else []
    try:
        proc = cli(
            role,
            role,
            "-c",
            "configs/cartpole_dqn.py",
            "--port",
            str(port),
            "--shared-dir",
            str(tmp_path / "shared"),
            *extra,
            env={"PARALLEL_RL_TOKEN": "t"},
        )
        assert proc.wait(60) == 2, proc.output()
    finally:
        holder.close()
    lines = proc.output().strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], proc.output()
    assert f"127.0.0.1:{port}" in lines[0] and "in use" in lines[0] and "--port" in lines[0], lines[0]


# ---- 12. answer sizes are capped ------------------------------------------------------------------------
def test_an_oversized_answer_is_a_clear_error_and_is_not_read_whole():
    """A peer's answer over the client's ``max_answer_bytes`` raises ProtocolError naming the limit, whether
    it declares its length or streams without one; the client is not made to read it all (the streaming
    answer below counts what it sent: a client that read it whole would take its 64 MiB)."""
    from flask import Flask, Response, jsonify

    from parallel_rl.errors import ProtocolError
    from parallel_rl.transport import HttpClient, ServerThread

    app = Flask("big")
    sent = []

    @app.get("/declared")
    def declared():
        return jsonify({"pad": "x" * (3 * 1024 * 1024)})

    @app.get("/streamed")
    def streamed():
        def body():
            yield b'{"pad": "'
            for _ in range(64):  # 64 MiB at most
                sent.append(1)
                yield b"x" * (1024 * 1024)
            yield b'"}'

        return Response(body(), mimetype="application/json")

    @app.get("/small")
    def small():
        return jsonify({"ok": True})

    srv = ServerThread(app).start()
    client = HttpClient(srv.url, timeout=10, max_retries=0, max_answer_bytes=1024 * 1024)
    try:
        with pytest.raises(ProtocolError, match=r"more than 1048576 bytes \(\d+ declared\)"):
            client.get("/declared")
        with pytest.raises(ProtocolError, match="more than 1048576 bytes.*max_answer_bytes"):
            client.get("/streamed")
        assert len(sent) < 32, f"the client read {len(sent)} MiB of a capped answer"
        assert client.get("/small") == {"ok": True}  # the client still works
        assert HttpClient(srv.url, timeout=10, max_retries=0).get("/declared")["pad"][:3] == "xxx"  # default cap
    finally:
        client.close()
        srv.close()


# ---- 2. idle connections cannot exhaust the coordinator's descriptors -------------------------------------
LOW_NOFILE = 200  # the coordinator's open-file limit in these tests: its derived cap is 136 connections

LAUNCHER = (
    "import resource, runpy, sys; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, ({n}, resource.getrlimit(resource.RLIMIT_NOFILE)[1])); "
    "sys.argv = ['parallel-rl'] + sys.argv[1:]; runpy.run_module('parallel_rl', run_name='__main__')"
)


@pytest.fixture
def low_limit_coordinator(tmp_path):
    """A `parallel-rl coordinator` subprocess whose open-file limit is LOW_NOFILE; yields (url, process, log)."""
    import os
    import re
    import subprocess
    import sys

    log_path = tmp_path / "coordinator.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                LAUNCHER.format(n=LOW_NOFILE),
                "coordinator",
                "-c",
                "configs/cartpole_dqn.py",
                "--port",
                "0",
                "--shared-dir",
                str(tmp_path / "shared"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PARALLEL_RL_TOKEN": TOKEN},
        )
    try:
        found = eventually(
            lambda: proc.poll() is None and re.search(r"REST API: (http://\S+)/api/v1", log_path.read_text()),
            timeout=60,
            message=f"the coordinator's URL in {log_path}",
        )
        yield found.group(1), proc, log_path
    finally:
        proc.kill()
        proc.wait(10)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    import os

    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_connections_past_the_open_file_limit_leave_the_coordinator_answering(low_limit_coordinator):
    """Twice the coordinator's open-file limit in idle connections (no byte sent, no token): it keeps at
    most its cap open, closing those idle longest, does not spin, logs a line or two, and answers."""
    import socket
    import time

    url, proc, log_path = low_limit_coordinator
    host, port = url.split("//")[1].split(":")
    idle = []
    try:
        for _ in range(2 * LOW_NOFILE):
            idle.append(socket.create_connection((host, int(port)), timeout=5))
        time.sleep(0.5)  # not a synchronisation: the window in which a spinning accept loop would burn CPU
        before = cpu_seconds(proc.pid)
        started = time.monotonic()
        for _ in range(5):  # a heartbeat-like call from a real client, each answered within its timeout
            answer = requests.get(f"{url}/api/v1/health", timeout=5)
            assert answer.status_code == 200, answer.text
        time.sleep(1.0)
        busy = (cpu_seconds(proc.pid) - before) / (time.monotonic() - started)
        assert busy < 0.5, f"the coordinator used {busy:.0%} of a core with idle connections open"
        # it closed idle connections to stay under its limit: the oldest ones read their end
        closed = sum(1 for sock in idle[: LOW_NOFILE // 2] if _closed_by_peer(sock))
        assert closed > 0, "no idle connection was closed"
    finally:
        for sock in idle:
            sock.close()
    assert proc.poll() is None
    log = log_path.read_text()
    assert len(log) < 20_000 and "Traceback" not in log, log[-3000:]


def _closed_by_peer(sock) -> bool:
    import socket

    sock.settimeout(0.01)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:  # reset
        return True


# ---- 7. slow clients (slow-loris) ---------------------------------------------------------------------------
def test_clients_sending_a_byte_at_a_time_hold_no_thread_and_are_cut_at_the_request_deadline():
    """Twelve clients trickle their requests (head or body) a byte every 0.2 s into a server of 4 threads:
    a whole request must arrive within ``request_timeout`` (2 s here), not within 10 s per read; until it
    has arrived it waits without a thread, so a plain client is answered at once meanwhile. A slow body too
    large to wait for without a thread is cut at the same deadline by the thread reading it."""
    import socket
    import threading
    import time

    from flask import Flask, jsonify

    from parallel_rl.transport import HttpClient, ServerThread, install_json_errors, json_body

    app = Flask("slow")
    install_json_errors(app)

    @app.post("/echo")
    def echo():
        return jsonify(json_body())

    @app.get("/ping")
    def ping():
        return jsonify({"ok": True})

    srv = ServerThread(app, threads=4, request_timeout=2.0).start()
    host, port = srv.url.split("//")[1].split(":")
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    body = b'{"pad": "' + b"x" * 40 + b'"}'
    # (sent at once, then trickled): six trickle the head, five a small body, one a body too large to wait for
    plans = (
        [(b"", head % len(body) + body)] * 6
        + [(head % len(body), body)] * 5
        + [(head % 1_000_000, b"{" + b" " * 999_999)]
    )
    socks = [socket.create_connection((host, int(port)), timeout=10) for _ in plans]
    stop = threading.Event()

    def drip():
        queues = []
        for sock, (first, rest) in zip(socks, plans):
            if first:
                sock.sendall(first)
            queues.append(bytearray(rest))
        deadline = time.monotonic() + 8.0
        while not stop.wait(0.2) and time.monotonic() < deadline:
            for sock, queue in zip(socks, queues):
                if queue:
                    try:
                        sock.send(bytes(queue[:1]))
                        del queue[:1]
                    except OSError:  # the server cut it
                        queue.clear()

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    client = HttpClient(srv.url, timeout=1.0, max_retries=0)
    try:
        started = time.monotonic()
        for _ in range(10):  # each within its 1 s timeout while every slow client is still trickling
            assert client.get("/ping") == {"ok": True}
        assert time.monotonic() - started < 1.9
        for i, sock in enumerate(socks):  # each answered 408 and closed by its deadline (2 s), not 10 s
            answer = b""
            while True:
                data = sock.recv(65536)  # a 10 s timeout fails the test
                if not data:
                    break
                answer += data
            assert answer.startswith(b"HTTP/1.1 408"), (i, answer[:200])
        assert time.monotonic() - started < 5.0
        assert client.get("/ping") == {"ok": True}
    finally:
        stop.set()
        dripper.join(10)
        client.close()
        for sock in socks:
            sock.close()
        srv.close()
