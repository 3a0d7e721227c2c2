"""The control plane under faults and hostile input (issue #16): one regression test per finding, and a
property-based fuzz of worker messages. Real coordinator over HTTP on 127.0.0.1, real slave shells."""

import itertools
import json
import math
import os
import re
import threading

import numpy as np
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parallel_rl.errors import ConfigError
from parallel_rl.transport import LEASE_HEADER, ApiError
from tests.support import eventually, toy_cluster_config
from tests.test_coordinator import TOKEN, ScriptedSlave, slaves  # noqa: F401  (fixture)
from tests.test_operations import cluster  # noqa: F401  (fixture)

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def post_metadata(server, worker, messages, lease=None):
    """A metadata batch as ``worker`` (with its lease unless another is given); the raw response."""
    return requests.post(
        f"{server.url}/api/v1/workers/{worker.worker_id}/metadata",
        json={"messages": messages},
        headers={**AUTH, LEASE_HEADER: lease or worker.coordinator.lease},
        timeout=5,
    )


def chunk_message(collector, task_id, name, rows, size=None, **extra):
    collector.storage.chunks.write(name, {"obs": np.zeros((rows, 1), np.float32), "action": np.zeros(rows, np.int64)})
    return {
        "type": "chunk",
        "task_id": task_id,
        "chunk": name,
        "size": rows if size is None else size,
        "policy_version": -1,
        "env_steps": rows,
        "episode_returns": [],
        **extra,
    }


# ---- 1. outbox death -------------------------------------------------------------------------------
def test_nan_in_learn_info_goes_as_null_and_the_outbox_lives_on(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory()
    learner = slaves("learner", server.url, run=False)
    learner.send_metadata(
        {"type": "learn_info", "train_iter": 3, "info": {"loss": math.nan, "q": math.inf}}, urgent=True
    )
    assert learner.outbox.flush(5.0)
    learner.send_metadata({"type": "learn_info", "train_iter": 4, "info": {"loss": 0.5}}, urgent=True)
    assert learner.outbox.flush(5.0)
    eventually(lambda: coordinator.train_iter == 4, message="the message after the NaN applied")
    assert learner.outbox.alive
    summary = requests.get(server.url + "/api/v1/cluster", timeout=5).json()
    assert summary["learn_info"] == {"loss": 0.5}


def test_a_dead_worker_thread_is_reported_and_ends_the_slave(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(10)

    def broken_control(control):
        raise RuntimeError("a bug in the control handler")

    collector.on_control = broken_control  # the outbox thread calls it after every answer
    collector.send_metadata({"type": "task_done", "task_id": "nope"}, urgent=True)
    eventually(lambda: collector.fatal_error, message="the slave's fatal error")
    # the outbox or the heartbeat thread (both hand answers to on_control) died of it: reported, and fatal
    assert "thread died" in collector.fatal_error and "a bug in the control handler" in collector.fatal_error
    health = requests.get(collector.address + "/slave/v1/health", timeout=5).json()
    assert health["status"] == "degraded" and any("thread died" in p for p in health["problems"])


# ---- 2. learner data thread death ----------------------------------------------------------------
def test_a_store_fault_fails_the_learner_data_thread_with_its_reason(
    coordinator_factory,
    slaves,  # noqa: F811
    tmp_path,
):
    """A fault of the store (here the chunk directory replaced by a file: ENOTDIR, as a vanished NFS mount) ends
    the data thread with its reason, and the learner's task fails with it (a damaged chunk only loses its rows:
    tests/test_reliability_data.py)."""
    from parallel_rl.data.flows import REPLAY
    from parallel_rl.learner.pipeline import DataPipeline, PipelineSection

    cfg = toy_cluster_config(tmp_path, learner={"min_buffer_size": 8})
    cfg.policy.learn.batch_size = 4  # the coordinator's: the pipeline names none
    coordinator, server = coordinator_factory(cfg)
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(10)
    collector.write_chunk(collector.received[0].task_id, "c-bad", n=8)
    learner = slaves("learner", server.url, run=False)
    data = tmp_path / "shared" / "data"
    data.rename(data.with_name("data.away"))  # after the chunk was announced
    data.write_bytes(b"not a directory")
    section = PipelineSection(prefetch=2, cache_slots=8, chunk_rows=16)
    pipeline = DataPipeline(section, REPLAY, learner.coordinator, learner.worker_id, learner.storage).start()
    try:
        error = eventually(lambda: pipeline.error, message="the data thread's error")
    finally:
        pipeline.stop()
    assert "learner-data thread died" in error and "c-bad" in error and "ENOTDIR" in error
    assert pipeline.damaged_chunks == 0


# ---- 3. poison batches ---------------------------------------------------------------------------
def test_a_refused_message_is_named_and_the_rest_of_its_batch_applies(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(10)
    task_id = collector.received[0].task_id
    batch = [
        chunk_message(collector, task_id, "p-1", 4),
        {"type": "chunk", "task_id": task_id, "chunk": "p-2", "size": -5, "policy_version": -1},
        chunk_message(collector, task_id, "p-3", 4),
    ]
    answer = post_metadata(server, collector, batch)
    assert answer.status_code == 200, answer.text
    refused = answer.json()["refused"]
    assert [(r["index"], r["type"], r["code"]) for r in refused] == [(1, "chunk", "bad_request")]
    assert "size" in refused[0]["message"]
    assert coordinator.env_steps == 8 and coordinator.replay.count() == 8
    # through the slave's outbox: the refused message is dropped (and counted), the next one still goes
    collector.send_metadata(
        {"type": "chunk", "task_id": task_id, "chunk": "p-4", "size": 0, "policy_version": -1}, urgent=True
    )
    assert collector.outbox.flush(5.0)
    collector.send_metadata(chunk_message(collector, task_id, "p-5", 4), urgent=True)
    assert collector.outbox.flush(5.0)
    assert coordinator.env_steps == 12 and collector.outbox.dropped == 1


def test_a_malformed_batch_applies_nothing(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(10)
    good = chunk_message(collector, collector.received[0].task_id, "m-1", 4)
    body = json.dumps({"messages": [good, {"type": "chunk", "size": math.nan}]})  # NaN is not JSON
    answer = requests.post(
        f"{server.url}/api/v1/workers/{collector.worker_id}/metadata",
        data=body,
        headers={**AUTH, LEASE_HEADER: collector.coordinator.lease, "Content-Type": "application/json"},
        timeout=5,
    )
    assert answer.status_code == 400 and "NaN" in answer.json()["error"]["message"]
    assert coordinator.env_steps == 0 and coordinator.replay.count() == 0


# ---- 4. ids, leases and ownership ----------------------------------------------------------------
def test_task_messages_only_from_the_owner_and_calls_only_with_the_lease(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory()
    owner = slaves("collector", server.url)
    assert owner.got_task.wait(10)
    other = slaves("collector", server.url)
    assert other.got_task.wait(10)
    task_id = owner.received[0].task_id
    answer = post_metadata(server, other, [{"type": "task_done", "task_id": task_id}]).json()
    assert answer["refused"][0]["code"] == "forbidden" and other.worker_id in answer["refused"][0]["message"]
    assert coordinator.tasks.get(task_id).state.value == "running"
    # the owner's id with another worker's lease, or with none, is not the owner
    assert (
        post_metadata(
            server, owner, [{"type": "task_done", "task_id": task_id}], lease=other.coordinator.lease
        ).status_code
        == 404
    )
    beat = requests.post(f"{server.url}/api/v1/workers/{owner.worker_id}/heartbeat", json={}, headers=AUTH, timeout=5)
    assert beat.status_code == 404
    assert coordinator.tasks.get(task_id).state.value == "running"
    assert post_metadata(server, owner, [{"type": "task_done", "task_id": task_id}]).json()["refused"] == []
    assert coordinator.tasks.get(task_id).state.value == "finished"


# ---- 5. no open door -----------------------------------------------------------------------------
def test_a_slave_refuses_to_start_without_a_token(tmp_path, caplog):
    from parallel_rl.collector.shell import CollectorSlave

    with pytest.raises(ConfigError, match="--insecure-no-token"):
        CollectorSlave(shared_dir=str(tmp_path))
    slave = CollectorSlave(shared_dir=str(tmp_path), insecure_no_token=True)
    try:
        assert "WITHOUT A CLUSTER TOKEN" in caplog.text
    finally:
        slave.close()


# ---- 6. resource limits --------------------------------------------------------------------------
def test_an_oversized_body_is_refused_before_it_is_buffered(coordinator_factory):
    import socket

    coordinator, server = coordinator_factory(coordinator={"max_body_bytes": 64 * 1024})
    with socket.create_connection((server.host, server.port), timeout=5) as sock:
        # a token holder's (a stranger's body is refused before its size matters: tests/test_strangers.py)
        sock.sendall(
            b"POST /api/v1/workers/collector-1/metadata HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + TOKEN.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n{"
        )
        answer = sock.recv(200)  # never sent the gigabyte: a server that waits for it times out here
    assert answer.startswith(b"HTTP/1.1 413"), answer


def test_idle_connections_and_stalled_requests_leave_heartbeats_answered(coordinator_factory, slaves):  # noqa: F811
    """Hundreds of open keep-alive connections cost nothing until they send; a client that stops in the
    middle of its body holds one server thread until the server's timeout, not the server."""
    import socket

    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(10)
    idle = [socket.create_connection((server.host, server.port), timeout=5) for _ in range(200)]
    stalled = [socket.create_connection((server.host, server.port), timeout=5) for _ in range(8)]
    try:
        for sock in stalled:  # 100 bytes promised, 1 sent
            sock.sendall(
                b"POST /api/v1/workers/collector-1/metadata HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            )
        for _ in range(20):  # each within its 3 s timeout, no retry
            control = collector.coordinator.post(
                f"/api/v1/workers/{collector.worker_id}/heartbeat", {}, timeout=3, retries=0
            )
            assert control["state"] in ("idle", "busy")
    finally:
        for sock in idle + stalled:
            sock.close()


def start_long_polls(collector, n):
    """``n`` threads each long-polling as ``collector`` (a throttled collector's wait: nothing will allow
    collecting for 8 s); returns the list their answers go to, and the threads."""
    answers = []

    def long_poll():
        answers.append(
            collector.coordinator.post(
                f"/api/v1/workers/{collector.worker_id}/metadata",
                {"messages": [], "wait_for_allowance": 8.0},
                timeout=15,
            )
        )

    pollers = [threading.Thread(target=long_poll) for _ in range(n)]
    for t in pollers:
        t.start()
    return answers, pollers


def test_long_polls_give_up_their_turn_so_batches_are_still_applied(coordinator_factory, slaves):  # noqa: F811
    """A metadata request is served in one of ADMITTED turns, and a long-poll gives its turn back before it
    waits: more long-polls than turns leave batches answered at once, not after the long-polls."""
    from parallel_rl.coordinator.flow_control import ADMITTED

    coordinator, server = coordinator_factory(
        commander={"max_env_steps_per_update": 4.0, "warmup_env_steps": 0},
        coordinator={"long_poll_slots": ADMITTED + 1},
    )
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(10)
    answers, pollers = start_long_polls(collector, ADMITTED + 2)
    # every slot waiting, one more answered at once: each took its turn and gave it back
    eventually(lambda: any("retry_after" in a for a in answers), timeout=5, message="a long-poll beyond the slots")
    answer = collector.coordinator.post(
        f"/api/v1/workers/{collector.worker_id}/metadata",
        {"messages": [chunk_message(collector, collector.received[0].task_id, "t-1", 4)]},
        timeout=3,
        retries=0,
    )
    assert answer["refused"] == [] and coordinator.replay.count() == 4
    coordinator.finish("stopped", "test over")  # ends the waits
    for t in pollers:
        t.join(15)
    assert len(answers) == ADMITTED + 2


def test_heartbeats_are_answered_while_every_long_poll_slot_is_taken(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory(commander={"max_env_steps_per_update": 4.0, "warmup_env_steps": 0})
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(10)
    answers, pollers = start_long_polls(collector, 24)  # more than all 16 + 8 server threads
    eventually(lambda: sum("retry_after" in a for a in answers) >= 16, message="long-polls beyond the slots")
    for _ in range(5):  # with every slot taken, heartbeats still find a thread
        control = collector.coordinator.post(
            f"/api/v1/workers/{collector.worker_id}/heartbeat", {}, timeout=3, retries=0
        )
        assert control["state"] in ("idle", "busy")
    assert coordinator.flow.long_polls_refused >= 16
    coordinator.finish("stopped", "test over")  # ends the waits
    for t in pollers:
        t.join(15)
    assert len(answers) == 24


# ---- 7. trusted numbers --------------------------------------------------------------------------
def test_numbers_and_roles_in_messages_are_checked(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(10)
    task_id = collector.received[0].task_id
    bad = [
        chunk_message(collector, task_id, "n-1", 4, size=1000),  # 4 rows on disk, 1000 announced
        chunk_message(collector, task_id, "n-2", 4, size=10**13),
        chunk_message(collector, task_id, "n-3", 4, env_steps=-100),
        chunk_message(collector, task_id, "n-4", 4, policy_version=7),  # never published
        chunk_message(collector, task_id, "n-5", 4, episode_returns=[1.0] * 5),  # more episodes than steps
        {"type": "policy", "version": 5},  # collectors do not publish policies
        {"type": "learn_info", "train_iter": 10**6, "info": {}},
    ]
    refused = post_metadata(server, collector, bad).json()["refused"]
    assert [r["index"] for r in refused] == list(range(len(bad))), refused
    assert [r["code"] for r in refused[-2:]] == ["forbidden", "forbidden"]
    assert "1000" in refused[0]["message"] and "-100" in refused[2]["message"]
    assert coordinator.env_steps == 0 and coordinator.train_iter == 0 and coordinator.policy_version == -1
    assert coordinator.replay.count() == 0


def test_wrong_sizes_are_refused_once_the_workers_chunk_layout_is_known(coordinator_factory, slaves):  # noqa: F811
    """After a worker's first chunk the coordinator checks the next ones by their size in bytes; a wrong
    announced size, a truncated file and another set of columns still have their headers read."""
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(10)
    task_id = collector.received[0].task_id
    good = [chunk_message(collector, task_id, f"g-{k}", rows) for k, rows in enumerate((4, 7, 64, 4, 1))]
    assert post_metadata(server, collector, good).json()["refused"] == []
    truncated = chunk_message(collector, task_id, "t-1", 8)
    path = collector.storage.chunks.path("t-1")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 16)
    collector.storage.chunks.write(
        "o-1", {"obs": np.zeros((4, 1), np.float32), "action": np.zeros(4, np.int64), "reward": np.zeros(4, np.float32)}
    )
    bad = [
        chunk_message(collector, task_id, "b-1", 4, size=5),  # 4 rows on disk, 5 announced
        chunk_message(collector, task_id, "b-2", 64, size=63),
        chunk_message(collector, task_id, "b-3", 1, size=10**6),
        truncated,
        {**good[0], "chunk": "o-1", "size": 6},  # other columns, 4 rows, 6 announced
    ]
    refused = post_metadata(server, collector, bad).json()["refused"]
    assert [r["index"] for r in refused] == list(range(len(bad))), refused
    assert "4 rows on disk" in refused[0]["message"] and "63" in refused[1]["message"]
    assert coordinator.env_steps == 4 + 7 + 64 + 4 + 1
    # the other columns with their right size are a new layout, and then checked by size in turn
    again = [{**good[0], "chunk": "o-1", "size": 4}, chunk_message(collector, task_id, "b-4", 4, size=5)]
    refused = post_metadata(server, collector, again).json()["refused"]
    assert [r["index"] for r in refused] == [1], refused
    assert coordinator.env_steps == 4 + 7 + 64 + 4 + 1 + 4


# ---- 8. retries that double work -----------------------------------------------------------------
def test_a_retried_assignment_runs_the_task_once(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(10)
    task = collector.received[0]
    again = requests.post(
        collector.address + "/slave/v1/tasks",
        headers=AUTH,
        timeout=5,
        json={"task_id": task.task_id, "kind": task.kind, "spec": task.spec},
    )
    assert again.status_code == 202 and again.json()["duplicate"] is True
    collector.finish[task.task_id].set()
    eventually(lambda: coordinator.tasks.get(task.task_id).state.value == "finished", message="task finished")
    eventually(lambda: len(collector.received) >= 2, message="the next task")
    assert [t.task_id for t in collector.received].count(task.task_id) == 1


class PickySlave(ScriptedSlave):
    """Refuses its first task (400: it cannot run it); takes the next. (A 409, busy ending an earlier task, puts
    the task back instead: tests/test_coordinator.py)"""

    refused = 0

    def validate_task(self, task):
        if not self.refused:
            self.refused += 1
            raise ApiError(400, "bad_request", "cannot run this one")


def test_a_task_refused_by_a_slave_fails_but_the_worker_stays(coordinator_factory):
    coordinator, server = coordinator_factory()
    picky = PickySlave("collector", server.url)
    picky.start()
    threading.Thread(target=picky.run, daemon=True).start()
    try:
        assert picky.got_task.wait(10)
        failed = [t for t in coordinator.tasks.list() if t.state.value == "failed"]
        assert len(failed) == 1 and "cannot run this one" in failed[0].error
        assert coordinator.membership.get_worker(picky.worker_id).state.value == "busy"
        # the same worker, never marked lost (not a new registration after a loss)
        assert [w.worker_id for w in coordinator.workers.list()] == [picky.worker_id]
        assert coordinator.workers.counts()["collector"]["lost"] == 0
    finally:
        for ev in picky.finish.values():
            ev.set()
        picky.request_stop()
        picky.close()


# ---- fuzz: hostile worker messages ---------------------------------------------------------------
numbers = (
    st.integers(-(2**70), 2**70)
    | st.sampled_from([0, 1, 4, -1, 2**53, 2**63])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.none()
    | st.booleans()
    | st.text(max_size=4)
)
chunk_specs = st.fixed_dictionaries(
    {
        "type": st.just("chunk"),
        "rows": st.integers(1, 6),
        "size": st.one_of(st.just("rows"), numbers),
        "policy_version": numbers | st.just(-1),
        "env_steps": numbers | st.just("rows"),
        "episode_returns": st.lists(numbers, max_size=3),
        "file": st.sampled_from(["written", "missing", "../escape"]),
    }
)
other_messages = st.fixed_dictionaries(
    {"type": st.sampled_from(["task_done", "task_failed", "task_cancelled", "policy", "learn_info", "x"])},
    optional={
        "task_id": st.sampled_from(["own", "other", "collector-999999"]) | numbers,
        "version": numbers,
        "train_iter": numbers,
        "info": st.dictionaries(st.text(max_size=3), numbers),
        "result": st.none() | st.dictionaries(st.text(max_size=3), numbers),
        "error": numbers,
    },
)


@pytest.fixture
def fuzz_cluster(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    learner = slaves("learner", server.url, run=False)
    assert collector.got_task.wait(10)
    return coordinator, server, collector, learner, itertools.count()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(chunk_specs | other_messages, max_size=4), raw_nan=st.booleans(), as_learner=st.booleans())
def test_fuzz_hostile_worker_messages(fuzz_cluster, specs, raw_nan, as_learner):
    """NaN/inf, negative and huge numbers, wrong roles, foreign tasks, chunk files whose size does not match:
    no 5xx, no dead thread, nothing applied from a refused message or batch."""
    coordinator, server, collector, learner, counter = fuzz_cluster
    sender = learner if as_learner else collector
    own_task = collector.received[0].task_id
    messages, expected_steps = [], 0
    for spec in specs:
        msg = {k: v for k, v in spec.items() if k not in ("rows", "file")}
        if spec["type"] == "chunk":
            name = f"f-{next(counter)}"
            rows = spec["rows"]
            if spec["file"] == "written":
                collector.storage.chunks.write(name, {"obs": np.zeros((rows, 1), np.float32)})
            msg["chunk"] = name if spec["file"] != "../escape" else "../escape"
            msg["size"] = rows if spec["size"] == "rows" else spec["size"]
            msg["env_steps"] = rows if spec["env_steps"] == "rows" else spec["env_steps"]
            msg["task_id"] = own_task
        elif msg.get("task_id") in ("own", "other"):
            msg["task_id"] = own_task if msg["task_id"] == "own" else "learner-000000"
        messages.append(msg)
    before = (
        coordinator.env_steps,
        coordinator.replay.count(),
        coordinator.policy_version,
        coordinator.train_iter,
        coordinator.episodes,
    )
    running = {t.task_id for t in coordinator.tasks.list(state="running")}
    response = requests.post(
        f"{server.url}/api/v1/workers/{sender.worker_id}/metadata",
        data=json.dumps({"messages": messages}, allow_nan=True),
        headers={**AUTH, LEASE_HEADER: sender.coordinator.lease, "Content-Type": "application/json"},
        timeout=5,
    )
    assert response.status_code < 500, response.text
    after = (
        coordinator.env_steps,
        coordinator.replay.count(),
        coordinator.policy_version,
        coordinator.train_iter,
        coordinator.episodes,
    )
    if response.status_code != 200:
        assert after == before, response.text  # a refused batch applies nothing
    else:
        refused = {r["index"] for r in response.json()["refused"]}
        for i, msg in enumerate(messages):
            if i not in refused and msg["type"] == "chunk":
                expected_steps += msg.get("env_steps", 0)
                assert not as_learner and isinstance(msg["size"], int) and msg["size"] >= 1
            if i not in refused and msg["type"] in ("policy", "learn_info"):
                assert as_learner
            if i not in refused and msg["type"].startswith("task_"):
                assert msg["task_id"] == own_task and not as_learner
        assert after[0] == before[0] + expected_steps and after[0] >= before[0]
        if all(i in refused for i, m in enumerate(messages) if m["type"].startswith("task_")):
            assert running <= {t.task_id for t in coordinator.tasks.list(state="running")}
    for slave in (collector, learner):
        assert slave.outbox.alive and not slave.fatal_error
    assert not collector.problems and not learner.problems
    assert requests.get(server.url + "/api/v1/cluster", timeout=5).status_code == 200


# ---- 9. durability -------------------------------------------------------------------------------
def test_a_corrupt_newest_learner_state_falls_back_to_the_one_before(tmp_path):
    import torch

    from parallel_rl.storage import SharedStorage

    storage = SharedStorage(str(tmp_path / "shared"))
    storage.learner_states.save(100, {"train_iter": 100, "policy": {"w": torch.ones(2)}})
    storage.learner_states.save(200, {"train_iter": 200, "policy": {"w": torch.zeros(2)}})
    with open(storage.learner_states.path(200), "r+b") as f:  # torn or rotten on the disk
        f.truncate(40)
    version, state = storage.learner_states.latest_good()
    assert version == 100 and state["train_iter"] == 100 and state["policy"]["w"].tolist() == [1.0, 1.0]


# ---- 10. smaller: signals, final reports, adoption by address, forgotten workers, shared dirs ----------
def descendants_of_run(run_pid: int) -> list:
    """Live processes started by the `run` launcher ``run_pid`` (they carry its pid in their environment),
    found whether or not they were re-parented after the launcher exited."""
    import os

    from tests.test_cluster import alive

    marker = f"PARALLEL_RL_PARENT_PID={run_pid}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
            except OSError:
                continue
            if marker in environ and alive(int(entry)):
                found.append(int(entry))
    return found


def signal_barrage(proc, signals, pause: float = 0.01, deadline: float = 60.0) -> int:
    """Send ``signals`` (cycled) to ``proc`` every ``pause`` s until it exits; its exit code (fails after
    ``deadline`` s)."""
    import time

    paced = threading.Event()  # never set: a paced barrage, not a wait for state
    end = time.monotonic() + deadline
    for sig in itertools.cycle(signals):
        if proc.poll() is not None:
            return proc.returncode
        assert time.monotonic() < end, f"still running {deadline}s into a barrage of {signals}"
        proc.send_signal(sig)
        paced.wait(pause)


@pytest.mark.parametrize("moment", ["children starting", "mid-run"])
def test_repeated_signals_at_awkward_moments_end_the_run_cleanly(cli, tmp_path, moment):
    """SIGINT/SIGTERM sent again and again (while the children start, during the shutdown they trigger):
    the run ends in bounded time with the first signal's exit code (130 SIGINT, 143 SIGTERM) and leaves no
    process behind. The signal handler does nothing but wake a watcher thread, so no signal can land
    inside a lock the handler needs."""
    import signal

    from tests.test_cluster import TOY_CONFIG, busy_collectors, start_run

    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    run, url = start_run(cli, tmp_path, str(config), "--set", "env.stop_value=1000")
    if moment == "children starting":  # right after the REST line: the children are being spawned
        first, code = signal.SIGTERM, 143
    else:
        eventually(lambda: busy_collectors(url, 2), timeout=60, message="two busy collectors")
        first, code = signal.SIGINT, 130
    assert signal_barrage(run.proc, [first, signal.SIGINT, signal.SIGTERM]) == code, run.output()[-3000:]
    assert f"interrupted ({first.name})" in run.output()
    assert eventually(lambda: not descendants_of_run(run.pid), timeout=10, message="no process left")


def test_a_second_run_on_a_shared_directory_in_use_fails_and_wipes_nothing(cli, tmp_path):
    """`run` holds a lock on its shared directory for its life: a second `run` (fresh or --resume) on it
    exits 2 at once naming the holder's pid, and deletes nothing of the first run's."""
    import signal

    from parallel_rl.storage import SharedStorage
    from tests.support import get
    from tests.test_cluster import TOY_CONFIG, start_run

    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    shared = tmp_path / "shared"
    # no time budget: the first run must still be running when the second ones are done (SIGINT ends it)
    first, url = start_run(
        cli,
        tmp_path,
        str(config),
        "--set",
        "env.stop_value=1000",
        "--shared-dir",
        str(shared),
        "--set",
        "parallel.commander.max_seconds=0",
    )
    eventually(lambda: get(url, "/cluster")["train_iter"] > 0, timeout=60, message="the first run training")
    store = SharedStorage(str(shared))
    chunks = set(store.chunks.names())  # written ones: a chunk being written is a temporary file until renamed
    assert chunks
    for args in (["--shared-dir", str(shared)], ["--resume", str(shared)]):
        second = cli("second", "run", "-c", str(config), "--set", f"exp_name={tmp_path / 'exp2'}", *args)
        assert second.wait(30) == 2, second.output()[-2000:]
        assert re.search(rf"is in use by pid {first.pid} on \S+ \(parallel-rl run", second.output()), second.output()
        assert "REST API" not in second.output()
    assert get(url, "/buffers")["buffers"][0]["evicted"] == 0  # so every chunk file is still wanted
    assert chunks <= set(store.chunks.names())
    assert first.proc.poll() is None and get(url, "/cluster")["state"] == "running"
    first.proc.send_signal(signal.SIGINT)
    assert first.wait(30) == 130
    # the lock ends with its run: the directory can be resumed now
    again = cli(
        "again",
        "run",
        "-c",
        str(config),
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--resume",
        str(shared),
        "--set",
        "env.stop_value=1000",
    )
    again.wait_line(r"^REST API: ")
    again.proc.send_signal(signal.SIGINT)
    assert again.wait(30) == 130


class RecordingServer:
    """A little HTTP server on 127.0.0.1 that is not ours: it records every request (path, headers, body)
    and answers ``reply`` (status, body)."""

    def __init__(self, status: int, body: bytes):
        import http.server

        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                outer.requests.append((self.command, self.path, dict(self.headers), self.rfile.read(length)))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


JUNK = b"<html>internal admin page: db password hunter2</html>"


@pytest.mark.parametrize(
    "status, body",
    [
        (200, JUNK),  # anything at all
        (500, JUNK),
        (200, json.dumps({"status": "ok", "kind": "collector", "pid": 1}).encode()),  # looks like a collector
        (200, json.dumps({"status": "ok", "kind": "collector", "pid": 1, "proof": "0" * 64}).encode()),
    ],
)
def test_adding_a_collector_sends_no_token_to_a_stranger_and_echoes_nothing(coordinator_factory, status, body):
    """`POST /api/v1/collectors` with the address of a server that is not one of our slaves: 422, the token
    and the config never leave the coordinator, and the answer says nothing of what the stranger sent."""
    from tests.test_coordinator import TOKEN, api

    coordinator, server = coordinator_factory()
    stranger = RecordingServer(status, body)
    try:
        response = api(server, "/collectors", "POST", {"address": stranger.url})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"] in ("unreachable", "unproven")
        message = response.json()["error"]["message"]
        assert "hunter2" not in message and "html" not in message and "proof" not in message, message
        assert stranger.requests, "the coordinator never asked"
        for method, path, headers, sent in stranger.requests:
            assert method == "GET" and path.startswith("/slave/v1/health?challenge="), path
            assert "Authorization" not in headers and TOKEN not in json.dumps(headers) and TOKEN.encode() not in sent
        assert coordinator.workers.list() == []
    finally:
        stranger.close()


def test_a_slave_with_another_token_is_not_adopted_and_a_real_one_is(
    coordinator_factory,
    slaves,  # noqa: F811
    tmp_path,
):
    """The challenge tells our slaves from strangers: one holding another token is refused before anything is
    sent to it; ours is refused under another name than the address it advertises (a relay could pose as
    it) and adopted under its own."""
    from parallel_rl.collector.shell import CollectorSlave
    from tests.test_coordinator import api

    coordinator, server = coordinator_factory()
    theirs = CollectorSlave(token="another-token", shared_dir=str(tmp_path / "shared"))
    ours = slaves("collector", None, run=False)  # holds the cluster token; waits to be added
    try:
        theirs.start()
        response = api(server, "/collectors", "POST", {"address": theirs.address})
        assert response.status_code == 422 and response.json()["error"]["code"] == "unproven", response.text
        assert "did not prove it holds the cluster token" in response.json()["error"]["message"]
        alias = ours.address.replace("127.0.0.1", "localhost")
        response = api(server, "/collectors", "POST", {"address": alias})
        assert response.status_code == 422 and "advertises another address" in response.json()["error"]["message"]
        assert not theirs.connected.is_set() and not ours.connected.is_set()
        response = api(server, "/collectors", "POST", {"address": ours.address})
        assert response.status_code == 201, response.text
        assert ours.connected.is_set()
        assert [w.address for w in coordinator.workers.list()] == [ours.address]
    finally:
        theirs.request_stop()
        theirs.close()


def open_sockets() -> int:
    """Sockets this test process holds open (the coordinator, the slaves and their clients all live here)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:  # closed meanwhile
            pass
    return count


def test_ended_workers_are_forgotten_and_their_connections_closed(coordinator_factory, slaves):  # noqa: F811
    """Many join/leave cycles (one slave added by URL and removed again and again): the registry lists at
    most ``max_ended_workers`` ended workers and forgets them after ``worker_retention``; their connections
    are closed, so the process's open sockets stay bounded."""
    from tests.test_coordinator import api

    coordinator, server = coordinator_factory(coordinator={"worker_retention": 2.0, "max_ended_workers": 3})
    slave = slaves("learner", None)

    def cycle() -> str:
        added = api(server, "/learners", "POST", {"address": slave.address})
        assert added.status_code == 201, added.text
        worker_id = added.json()["worker_id"]
        assert slave.connected.wait(10)
        assert api(server, f"/learners/{worker_id}", "DELETE").status_code == 200

        def gone() -> bool:  # gone, or gone and already forgotten
            answer = api(server, f"/learners/{worker_id}")
            return (answer.status_code == 404 or answer.json()["state"] == "gone") and not slave.connected.is_set()

        eventually(gone, message=f"{worker_id} gone")
        return worker_id

    cycle()
    eventually(lambda: api(server, "/learners").json()["learners"] == [], message="the first entry forgotten")
    baseline = open_sockets()
    for _ in range(20):
        cycle()
        # at most max_ended_workers, and the one that ended since the control loop's last sweep
        assert len(api(server, "/learners").json()["learners"]) <= 3 + 1
    eventually(lambda: api(server, "/learners").json()["learners"] == [], message="every entry forgotten")
    assert api(server, "/cluster").json()["workers_forgotten"] == 21
    # what may stay open: the slave's one client to the coordinator (a few pooled keep-alive connections, and
    # the server's ends of them); one pool left open per cycle would add 2 sockets a cycle, 40 here
    eventually(lambda: open_sockets() <= baseline + 16, message=f"open sockets back near {baseline}")


def test_a_stopping_coordinator_waits_for_the_workers_final_reports(cluster):  # noqa: F811
    """`parallel-rl coordinator` stopped (SIGTERM) while its workers run tasks lets them go and keeps serving
    until those tasks have reported (bounded by final_report_timeout): the state it saves last holds every
    task ended, with counters equal to what the workers reported in their task results."""
    import signal

    from parallel_rl.storage import SharedStorage

    coordinator, url, shared = cluster.coordinator, cluster.url, cluster.coordinator_shared
    roles = [cluster.start(role, f"{role}-{n}") for n, role in enumerate(("learner", "collector", "collector"))]

    def training_with_both_collectors() -> bool:
        # both collectors registered and busy: a collector still importing torch when the coordinator stops (a
        # loaded box) was never let go, and retries its first registration for 60 s (what it promises)
        state = requests.get(f"{url}/api/v1/cluster", timeout=5).json()
        return state["train_iter"] >= 30 and state["workers"]["collector"]["busy"] == 2

    eventually(training_with_both_collectors, timeout=90, message="training with both collectors")
    coordinator.proc.send_signal(signal.SIGTERM)
    assert coordinator.wait(30) == 0, coordinator.output()[-3000:]
    for role in roles:
        assert role.wait(30) == 0, role.output()[-2000:]
    meta, _ = SharedStorage(shared).states.latest()
    tasks = [t for t in meta["tasks"]["tasks"] if t["worker_id"]]
    assert tasks and all(t["state"] in ("finished", "cancelled") for t in tasks), [
        (t["task_id"], t["state"], t["error"]) for t in tasks
    ]
    collected = sum(t["result"]["env_steps"] for t in tasks if t["kind"] == "collector")
    assert meta["counters"]["env_steps"] == collected > 0
    learned = [t["result"]["train_iter"] for t in tasks if t["kind"] == "learner"]
    assert meta["counters"]["train_iter"] == max(learned) >= 30


# ---- ids carry a coordinator incarnation -----------------------------------------------------------
def test_a_stale_task_end_from_an_earlier_coordinator_cannot_end_a_new_task(cli, tmp_path, slaves):  # noqa: F811
    """Two coordinator processes, one after the other, on one shared directory (the second fresh): the
    same worker (same id) gets the first task of each. Its stale `task_done` for the first coordinator's
    task, replayed to the second, is refused and ends nothing: task ids carry the incarnation."""
    import signal

    from tests.test_cluster import TOY_CONFIG
    from tests.test_coordinator import TOKEN

    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    shared = str(tmp_path / "shared")
    first_ids = []
    for n, extra in enumerate([[], ["--fresh"]]):
        coordinator = cli(
            f"coordinator-{n}",
            "coordinator",
            "-c",
            str(config),
            "--port",
            "0",
            "--shared-dir",
            shared,
            "--set",
            "env.stop_value=1000",
            "--set",
            f"exp_name={tmp_path / 'exp'}",
            *extra,
            env={"PARALLEL_RL_TOKEN": TOKEN},
        )
        url = coordinator.wait_line(r"^REST API: (http://127\.0\.0\.1:\d+)/api/v1$").group(1)
        worker = slaves("collector", url, worker_id="collector-1")
        assert worker.got_task.wait(30) and worker.worker_id == "collector-1"
        first_ids.append(worker.received[0].task_id)
        if n == 0:
            coordinator.proc.send_signal(signal.SIGKILL)
            coordinator.wait(10)
            worker.request_stop()
            worker.close()
    stale, current = first_ids
    assert stale != current
    answer = requests.post(
        f"{url}/api/v1/workers/collector-1/metadata",
        json={"messages": [{"type": "task_done", "task_id": stale, "result": {}}]},
        headers={**AUTH, LEASE_HEADER: worker.coordinator.lease},
        timeout=5,
    ).json()
    assert [r["code"] for r in answer["refused"]] == ["not_found"]
    task = requests.get(f"{url}/api/v1/tasks/{current}", timeout=5).json()
    assert task["state"] == "running" and task["worker_id"] == "collector-1"
