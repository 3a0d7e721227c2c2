"""The HTTP transport under hostile clients and hostile inputs (issue #23: items 2, 7, 11, 12, 13): real
servers on 127.0.0.1 with OS-picked ports, real sockets, real subprocesses."""
import json

import pytest
import requests

from parallel_rl.interaction.http import LEASE_HEADER
from tests.conftest import eventually
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
    return requests.post(f"{server.url}/api/v1{path}", data=data, timeout=10,
                         headers={**AUTH, LEASE_HEADER: worker.coordinator.lease, "Content-Type": "application/json"})


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
        (sample, {"worker_id": learner.worker_id, "batch_size": 4, "wait": 0.01,
                  "priorities": {"index": [0], "uid": [0], "priority": [HUGE]}}),
        (sample, {"worker_id": learner.worker_id, "batch_size": 4, "wait": 0.01,
                  "priorities": {"index": [HUGE], "uid": [0], "priority": [1.0]}}),
        (metadata, '{"messages": %s}' % deep),
    ]
    for path, body in cases:
        worker = learner if path == sample else collector
        assert_json_4xx(post_as(server, worker, path, body), f"{path} {str(body)[:80]}")
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
        answer = post_as(server, collector, metadata, {"messages": [
            {"type": "task_done", "task_id": evaluator.task_id, "result": {"eval_episode_return_mean": mean}}]})
        assert answer.status_code == 200, answer.text
        refused = answer.json()["refused"]
        assert len(refused) == 1 and refused[0]["code"] == "bad_request", refused
        assert "eval_episode_return_mean" in refused[0]["message"]
    answer = post_as(server, collector, metadata, {"messages": [
        {"type": "task_done", "task_id": evaluator.task_id, "result": {"eval_episode_return_mean": None,
                                                                        "episodes": 0}}]})
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
        proc = cli(role, role, "-c", "configs/cartpole_dqn.py", "--port", str(port),
                   "--shared-dir", str(tmp_path / "shared"), *extra, env={"PARALLEL_RL_TOKEN": "t"})
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
    from parallel_rl.interaction.http import HttpClient, ServerThread

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
