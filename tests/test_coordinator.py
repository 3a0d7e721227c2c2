"""The coordinator with real HTTP on 127.0.0.1 and scripted slaves built on the real slave shell."""

import os
import threading
import time

import numpy as np
import pytest
import requests

from parallel_rl.errors import RemoteError
from parallel_rl.transport import ApiError, pack_array, unpack_array
from parallel_rl.slave.slave import Slave, SlaveTask
from tests.support import eventually, toy_cluster_config

TOKEN = "test-token"


class ScriptedSlave(Slave):
    """Runs tasks the test scripts: records them, writes chunks on demand, finishes when told."""

    def __init__(self, kind, coordinator_url, **kw):
        self.kind = kind
        super().__init__(coordinator_url, token=TOKEN, request_timeout=2.0, max_retries=1, **kw)
        self.received = []
        self.got_task = threading.Event()
        self.finish = {}

    def validate_task(self, task):
        pass

    def stop_task(self, task_id):
        self.finish.setdefault(task_id, threading.Event()).set()  # a stop ends the scripted wait at once
        return super().stop_task(task_id)

    def execute(self, task: SlaveTask):
        import torch

        self.torch_threads = torch.get_num_threads()  # as the task's thread sees it
        self.received.append(task)
        release = self.finish.setdefault(task.task_id, threading.Event())
        self.got_task.set()
        release.wait(timeout=30)
        return {"completed": not task.stop.is_set(), **task.spec}

    def write_chunk(self, task_id, name, n=8, version=0, first=0):
        """A chunk whose obs column counts up from ``first`` (so a sampled row says where it came from),
        collected with policy ``version`` (whose checkpoint is on the shared disk, as in a real run)."""
        if version >= 0 and not os.path.exists(self.storage.policies.path(version)):
            self.storage.policies.save(version, {})
        self.storage.chunks.write(
            name, {"obs": np.arange(first, first + n, dtype=np.float32)[:, None], "action": np.zeros(n, np.int64)}
        )
        self.send_metadata(
            {
                "type": "chunk",
                "task_id": task_id,
                "chunk": name,
                "size": n,
                "policy_version": version,
                "env_steps": n,
                "episode_returns": [1.0],
            },
            urgent=True,
        )
        self.outbox.flush(5.0)

    def announce_policy(self, version):
        """A learner's policy announcement, with its checkpoint on the shared disk."""
        self.storage.policies.save(version, {})
        self.send_metadata({"type": "policy", "version": version}, urgent=True)
        self.outbox.flush(5.0)


@pytest.fixture
def slaves():
    made = []

    def make(kind, url, run=True, **kw):
        slave = ScriptedSlave(kind, url, **kw)
        made.append(slave)
        slave.start()
        if run:
            threading.Thread(target=slave.run, daemon=True).start()
        return slave

    yield make
    for slave in made:
        for ev in slave.finish.values():
            ev.set()
        slave.request_stop()
        slave.close()


def api(server, path, method="GET", json=None, token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return requests.request(method, server.url + "/api/v1" + path, json=json, headers=headers, timeout=5)


def test_self_registered_collector_gets_a_collector_task(coordinator_factory, slaves):
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    task = collector.received[0]
    assert task.kind == "collector" and task.spec == {"env_steps": 64}
    body = api(server, f"/tasks/{task.task_id}").json()
    assert body["state"] == "running" and body["worker_id"] == collector.worker_id and body["attempts"] == 1
    workers = api(server, "/collectors").json()["collectors"]
    assert [(w["worker_id"], w["state"], w["current_task"]) for w in workers] == [
        (collector.worker_id, "busy", task.task_id)
    ]


def test_a_batch_of_chunk_announcements_is_indexed_once_each(coordinator_factory, slaves):
    """One metadata call announcing several chunks (one repeated in the batch, one with a wrong size): each good
    chunk's rows enter the index once, with its own references; counters, the training-episode return and the
    task's progress add up."""
    coordinator, server = coordinator_factory(learner={"min_buffer_size": 10})
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    task = collector.received[0]
    sizes = {"b-1": 3, "b-2": 5, "b-3": 2}
    for name, n in sizes.items():
        collector.storage.chunks.write(
            name, {"obs": np.arange(n, dtype=np.float32)[:, None], "action": np.zeros(n, np.int64)}
        )

    returns = {"b-1": [1.0, 3.0], "b-2": [], "b-3": [5.0]}

    def chunk(name, n):
        return {
            "type": "chunk",
            "task_id": task.task_id,
            "chunk": name,
            "size": n,
            "policy_version": -1,
            "env_steps": n,
            "episode_returns": returns[name],
        }

    assert api(server, "/cluster").json()["train_return"] is None  # no training episode has ended

    answer = collector.coordinator.post(
        f"/api/v1/workers/{collector.worker_id}/metadata",
        {"messages": [chunk("b-1", 3), chunk("b-2", 5), chunk("b-1", 3), chunk("b-3", 7), chunk("b-3", 2)]},
    )
    assert [(r["index"], r["code"]) for r in answer["refused"]] == [(3, "bad_request")]
    buffers = api(server, "/buffers").json()["buffers"]
    assert (buffers[0]["size"], buffers[0]["pushed"], buffers[0]["chunks"]) == (10, 10, 3)
    cluster = api(server, "/cluster").json()
    assert (cluster["env_steps"], cluster["episodes"], cluster["train_return"]) == (10, 3, 3.0)
    assert api(server, f"/tasks/{task.task_id}").json()["progress"] == {"env_steps": 10, "chunks": 3}
    learner = slaves("learner", server.url, run=False)
    seen = set()
    for train_iter in range(1, 4):
        answer = learner.coordinator.post(
            "/api/v1/buffers/default/sample",
            {"worker_id": learner.worker_id, "batch_size": 10, "batches": 1, "train_iter": train_iter},
        )
        batch = answer["batches"][0]
        seen |= {(answer["chunks"][c], r) for c, r in zip(batch["chunk"], batch["row"])}
    assert seen == {(name, row) for name, n in sizes.items() for row in range(n)}


def test_chunks_reach_the_buffer_and_learners_sample_references(coordinator_factory, slaves):
    coordinator, server = coordinator_factory(learner={"min_buffer_size": 8})
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    task = collector.received[0]
    collector.write_chunk(task.task_id, "c-1", n=8, version=3)
    collector.write_chunk(task.task_id, "c-1", n=8, version=3)  # a retried message: counted once
    buffers = api(server, "/buffers").json()["buffers"]
    assert buffers[0]["size"] == 8 and buffers[0]["pushed"] == 8 and buffers[0]["chunks"] == 1
    assert api(server, "/cluster").json()["env_steps"] == 8
    assert api(server, f"/tasks/{task.task_id}").json()["progress"] == {"env_steps": 8, "chunks": 1}
    learner = slaves("learner", server.url, run=False)
    client = learner.coordinator  # the learner's own client: it carries the worker's lease
    answer = client.post(
        "/api/v1/buffers/default/sample",
        {"worker_id": learner.worker_id, "batch_size": 4, "batches": 3, "train_iter": 5},
    )
    assert len(answer["batches"]) == 3 and answer["chunks"] == ["c-1"]
    batch = answer["batches"][0]
    assert batch["chunk"] == [0] * 4 and len(batch["row"]) == 4 and set(batch["row"]) <= set(range(8))
    # the same references packed: little-endian bytes in base64
    packed = client.post(
        "/api/v1/buffers/default/sample",
        {"worker_id": learner.worker_id, "batch_size": 4, "batches": 2, "train_iter": 5, "encoding": "base64"},
    )
    assert packed["chunks"] == ["c-1"] and packed["batches"][0]["row"]["dtype"] == "<i4"
    rows = unpack_array(packed["batches"][0]["row"], np.int64)
    assert len(rows) == 4 and set(rows.tolist()) <= set(range(8))
    # priorities ride along with the next request, as lists or packed
    client.post(
        "/api/v1/buffers/default/sample",
        {
            "worker_id": learner.worker_id,
            "batch_size": 4,
            "batches": 1,
            "train_iter": 6,
            "priorities": {"index": batch["index"], "uid": batch["uid"], "priority": [5.0] * 4},
        },
    )
    assert api(server, "/cluster").json()["train_iter"] == 6
    sampled = packed["batches"][1]
    client.post(
        "/api/v1/buffers/default/sample",
        {
            "worker_id": learner.worker_id,
            "batch_size": 4,
            "batches": 1,
            "train_iter": 7,
            "priorities": {
                "index": sampled["index"],
                "uid": sampled["uid"],
                "priority": pack_array(np.full(4, 5.0), "<f4"),
            },
        },
    )
    with pytest.raises(RemoteError) as bad:
        client.post(
            "/api/v1/buffers/default/sample",
            {
                "worker_id": learner.worker_id,
                "batch_size": 4,
                "batches": 1,
                "priorities": {
                    "index": sampled["index"],
                    "uid": sampled["uid"],
                    "priority": {"dtype": "object", "base64": ""},
                },
            },
        )
    assert bad.value.status == 400 and "priorities" in str(bad.value)
    with pytest.raises(RemoteError, match="finite") as bad:
        client.post(
            "/api/v1/buffers/default/sample",
            {
                "worker_id": learner.worker_id,
                "batch_size": 4,
                "batches": 1,
                "priorities": {
                    "index": sampled["index"],
                    "uid": sampled["uid"],
                    "priority": pack_array(np.full(4, np.nan), "<f4"),
                },
            },
        )
    assert bad.value.status == 400


def test_rows_past_the_end_of_a_chunk_file_are_dropped_not_read_from_another_chunk(tmp_path, caplog):
    """A chunk file holding fewer rows than were indexed (the coordinator's check by size cannot tell every
    crafted file): the rows past its end are dropped, not read from the slot's previous chunk."""
    from parallel_rl.learner.pipeline import RowStore
    from parallel_rl.storage import SharedStorage

    storage = SharedStorage(str(tmp_path))
    storage.chunks.write("long", {"obs": np.arange(100, 108, dtype=np.float32)[:, None]})
    storage.chunks.write("short", {"obs": np.arange(200, 203, dtype=np.float32)[:, None]})
    store = RowStore(storage, slots=1, slot_rows=8)  # one slot: "short" is loaded where "long" was
    cols, keep = store.gather(["long"], np.zeros(2, np.int64), np.array([1, 5]))
    assert keep.all() and cols["obs"][:, 0].tolist() == [101.0, 105.0]
    cols, keep = store.gather(["short"], np.zeros(3, np.int64), np.array([1, 5, 2]))
    assert keep.tolist() == [True, False, True] and cols["obs"][:, 0].tolist() == [201.0, 202.0]
    assert "'short' holds 3 rows, rows up to 5 were asked of it" in caplog.text
    cols, keep = store.gather(["gone"], np.zeros(2, np.int64), np.array([0, 1]))
    assert cols is None and not keep.any()


def test_a_sample_request_without_a_batch_size_is_answered_with_the_coordinators_own(
    coordinator_factory, slaves, tmp_path
):
    # the batch size no longer travels coordinator -> learner -> coordinator: the learners name none, and the
    # coordinator answers with its own flow's (policy.learn.batch_size here)
    cfg = toy_cluster_config(tmp_path, learner={"min_buffer_size": 8})
    cfg.policy.learn.batch_size = 6
    coordinator, server = coordinator_factory(cfg)
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    collector.write_chunk(collector.received[0].task_id, "c-1", n=16)
    learner = slaves("learner", server.url, run=False)
    ask = {"worker_id": learner.worker_id, "batches": 2, "train_iter": 1}
    answer = learner.coordinator.post("/api/v1/buffers/default/sample", ask)
    assert [len(batch["row"]) for batch in answer["batches"]] == [6, 6]
    # a request that names one (a learner of an earlier release, a REST user) still gets it
    answer = learner.coordinator.post("/api/v1/buffers/default/sample", {**ask, "batch_size": 3})
    assert [len(batch["row"]) for batch in answer["batches"]] == [3, 3]


def test_data_pipeline_gathers_the_sampled_rows_and_drops_deleted_ones(coordinator_factory, slaves, tmp_path):
    from parallel_rl.data.flows import REPLAY
    from parallel_rl.learner.pipeline import DataPipeline, PipelineSection

    cfg = toy_cluster_config(tmp_path, learner={"min_buffer_size": 8, "prefetch_batches": 3, "chunk_cache_size": 2})
    cfg.policy.learn.batch_size = 4  # the coordinator's: the pipeline never names one
    coordinator, server = coordinator_factory(cfg)
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    task_id = collector.received[0].task_id
    for i, name in enumerate(["c-a", "c-b", "c-c"]):
        collector.write_chunk(task_id, name, n=8, first=100 * (i + 1))
    learner = slaves("learner", server.url, run=False)
    collector.storage.chunks.delete("c-c")  # indexed, then gone before the learner reads it
    # two cache slots asked for, but a round (3 batches x 4 rows) may touch up to 12 chunks: it gets room for them
    section = PipelineSection.read(cfg, REPLAY)
    assert (section.prefetch, section.cache_slots, section.chunk_rows) == (3, 12, 16)
    pipeline = DataPipeline(section, REPLAY, learner.coordinator, learner.worker_id, collector.storage).start()
    try:
        batches = [eventually(lambda: pipeline.get(timeout=0.2), message="a batch") for _ in range(30)]
    finally:
        pipeline.stop()
    assert pipeline.error is None
    obs = np.concatenate([b["obs"][:, 0] for b in batches])
    assert set(obs.tolist()) <= set(range(100, 108)) | set(range(200, 208))  # the rows of the chunks still there
    assert len(set((obs // 100).tolist())) == 2
    assert pipeline.missing_rows > 0  # rows of c-c were sampled and dropped
    for b in batches:
        assert 1 <= len(b["obs"]) <= 4 and len({len(v) for v in b.values()}) == 1  # columns of one length
        assert b["weight"].dtype == np.float32 and b["index"].dtype == np.int64
    seen = {}  # a buffer slot holds one transition: its index always comes with the same row
    for b in batches:
        for index, value in zip(b["index"].tolist(), b["obs"][:, 0].tolist()):
            assert seen.setdefault(index, value) == value


def test_sample_waits_for_enough_data_then_answers_empty(coordinator_factory, slaves):
    coordinator, server = coordinator_factory(learner={"min_buffer_size": 1000})
    learner = slaves("learner", server.url, run=False)
    answer = learner.coordinator.post(
        "/api/v1/buffers/default/sample", {"worker_id": learner.worker_id, "batch_size": 4, "batches": 2, "wait": 0.2}
    )
    assert answer["batches"] == []


def test_eval_reaching_stop_value_solves(coordinator_factory, slaves):
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    learner = slaves("learner", server.url, run=False)
    learner.announce_policy(0)
    # the scripted collector is busy collecting, so the evaluator task waits in its inbox
    evaluator = eventually(lambda: collector.inbox.take(lambda t: t.kind == "evaluator"), message="evaluator task")
    assert evaluator.spec == {"policy_version": 0, "n_episode": 2}
    collector.report_end(evaluator, "task_done", {"eval_episode_return_mean": 4.0, "episodes": 2})
    assert coordinator.done_event.wait(5)
    summary = api(server, "/cluster").json()
    assert summary["state"] == "solved" and summary["last_eval_return"] == 4.0


def test_evaluations_stay_on_the_collector_that_built_its_evaluator(coordinator_factory, slaves):
    """A collector builds its evaluator (envs, policy) on its first evaluation: the next ones go to it too, not
    to the collector with the fewest tasks done (which made every evaluation pay the build)."""
    coordinator, server = coordinator_factory(commander={"eval_freq": 1})
    collectors = [slaves("collector", server.url) for _ in range(3)]
    for c in collectors:
        assert c.got_task.wait(5)
    learner = slaves("learner", server.url, run=False)
    ran = []
    for version in range(3):
        learner.announce_policy(version)
        found = eventually(
            lambda: [
                (c, t) for c in collectors for t in [c.inbox.take(lambda t: t.kind == "evaluator")] if t is not None
            ],
            message=f"evaluator task of policy {version}",
        )
        ((collector, task),) = found
        assert task.spec["policy_version"] == version
        ran.append(collector.worker_id)
        collector.report_end(task, "task_done", {"eval_episode_return_mean": 1.0, "episodes": 2})  # below 4.0
        eventually(
            lambda: api(server, f"/tasks/{task.task_id}").json()["state"] == "finished", message="evaluation reported"
        )
    assert ran == [ran[0]] * 3


def test_lost_collector_task_fails_and_is_replaced(coordinator_factory, slaves):
    coordinator, server = coordinator_factory()
    doomed = slaves("collector", server.url)
    assert doomed.got_task.wait(5)
    first = doomed.received[0]
    survivor = slaves("collector", server.url)
    assert survivor.got_task.wait(5)
    doomed._stop.set()  # heartbeats stop, like a SIGKILLed process (the lease runs out)
    doomed.server.close()
    failed = eventually(
        lambda: api(server, f"/tasks/{first.task_id}").json()["state"] == "failed",
        timeout=10,
        message="task failed after the TTL",
    )
    assert failed
    worker = api(server, f"/collectors/{doomed.worker_id}").json()
    assert worker["state"] == "lost" and worker["seconds_since_heartbeat"] >= 2.0
    replacement = eventually(
        lambda: [t for t in api(server, "/tasks?kind=collector").json()["tasks"] if t["replaces"] == first.task_id],
        message="replacement task",
    )[0]
    assert replacement["attempts"] >= 1 and replacement["state"] in ("pending", "running")
    for ev in survivor.finish.values():
        ev.set()  # the survivor frees up and takes the replacement
    eventually(
        lambda: api(server, f"/tasks/{replacement['task_id']}").json()["worker_id"] == survivor.worker_id,
        message="replacement on the survivor",
    )


def test_budget_stops_the_run(coordinator_factory, slaves):
    coordinator, server = coordinator_factory(commander={"max_env_step": 8})
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    collector.write_chunk(collector.received[0].task_id, "c-9", n=8)
    assert coordinator.done_event.wait(5)
    assert api(server, "/cluster").json()["state"] == "stopped"


def test_collectors_wait_for_the_learner(coordinator_factory, slaves):
    coordinator, server = coordinator_factory(commander={"max_env_steps_per_update": 4.0, "warmup_env_steps": 8})
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    collector.write_chunk(collector.received[0].task_id, "c-2", n=8)
    client = collector.coordinator  # the collector's own client: it carries the worker's lease
    control = client.post(
        f"/api/v1/workers/{collector.worker_id}/metadata", {"messages": [], "wait_for_allowance": 0.2}
    )["control"]
    assert control["allowed_env_steps"] == 8 and control["env_steps"] == 8  # not allowed: waited, timed out
    learner = slaves("learner", server.url, run=False)
    result = {}

    def wait():
        started = time.monotonic()
        result.update(
            client.post(
                f"/api/v1/workers/{collector.worker_id}/metadata",
                {"messages": [], "wait_for_allowance": 8.0},
                timeout=10,
            )
        )
        result["waited"] = time.monotonic() - started

    waiter = threading.Thread(target=wait)
    waiter.start()
    # 1 iteration frees 4 steps: less than a chunk (16), the collector sleeps on; 4 iterations free 16
    learner.send_metadata({"type": "learn_info", "train_iter": 1, "info": {}}, urgent=True)
    learner.outbox.flush(5)
    learner.send_metadata({"type": "learn_info", "train_iter": 4, "info": {}}, urgent=True)
    waiter.join(10)
    assert result["control"]["allowed_env_steps"] == 24
    assert result["waited"] < 4.0  # woken by the learner's progress, not by the 8 s timeout


def test_a_new_policy_ends_a_throttled_collectors_wait(coordinator_factory, slaves):
    coordinator, server = coordinator_factory(commander={"max_env_steps_per_update": 4.0, "warmup_env_steps": 8})
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    collector.write_chunk(collector.received[0].task_id, "c-2", n=8)  # the allowance is used up
    learner = slaves("learner", server.url, run=False)
    client = collector.coordinator  # the collector's own client: it carries the worker's lease
    result = {}

    def wait(version, seconds=8.0):
        started = time.monotonic()
        result.update(
            client.post(
                f"/api/v1/workers/{collector.worker_id}/metadata",
                {"messages": [], "wait_for_allowance": seconds, "policy_version": version},
                timeout=10,
            )
        )
        result["waited"] = time.monotonic() - started

    waiter = threading.Thread(target=wait, args=(-1,))
    waiter.start()
    learner.announce_policy(20)
    waiter.join(10)
    assert result["control"]["policy_version"] == 20 and result["waited"] < 4.0  # not the 8 s timeout
    assert result["control"]["env_steps"] >= result["control"]["allowed_env_steps"]  # still throttled
    # a collector that knows version 20 waits on: only allowance or a newer policy wakes it
    result.clear()
    waiter = threading.Thread(target=wait, args=(20,))
    waiter.start()
    learner.announce_policy(40)
    waiter.join(10)
    assert result["control"]["policy_version"] == 40 and result["waited"] < 4.0
    wait(40, seconds=0.5)  # nothing newer: it sleeps out its wait
    assert result["waited"] >= 0.5


def test_removed_collector_gets_no_new_tasks(coordinator_factory, slaves):
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url, run=True)
    assert collector.got_task.wait(5)
    task, worker_id = collector.received[0], collector.worker_id
    response = api(server, f"/collectors/{worker_id}", method="DELETE")
    assert response.status_code == 200 and response.json()["state"] in ("leaving", "gone")
    eventually(
        lambda: api(server, f"/tasks/{task.task_id}").json()["state"] == "cancelled", message="running task wrapped up"
    )
    eventually(lambda: api(server, f"/collectors/{worker_id}").json()["state"] == "gone", message="collector gone")
    # a self-registered collector that was let go exits its worker loop
    eventually(lambda: collector.stopping, message="collector stopped")
    assert len(collector.received) == 1


def test_adding_a_dead_or_garbage_slave_is_a_clear_error(coordinator_factory):
    from flask import Flask

    from parallel_rl.transport import ServerThread

    coordinator, server = coordinator_factory()
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    response = api(server, "/collectors", method="POST", json={"address": dead})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "unreachable" and "cannot reach" in response.json()["error"]["message"]
    garbage_app = Flask("garbage")
    garbage_app.add_url_rule("/slave/v1/health", "h", lambda: "<html>hello</html>")
    garbage = ServerThread(garbage_app).start()
    try:
        response = api(server, "/collectors", method="POST", json={"address": garbage.url})
        assert response.status_code == 422 and "non-JSON" in response.json()["error"]["message"]
    finally:
        garbage.close()


def test_coordinator_state_round_trip(coordinator_factory, slaves, tmp_path):
    from parallel_rl.coordinator import Coordinator, create_parallel_commander
    from parallel_rl.storage import SharedStorage

    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    collector.write_chunk(collector.received[0].task_id, "c-s", n=8, version=1)
    state = coordinator.state_dict()
    other = Coordinator(
        coordinator.cfg, SharedStorage(str(tmp_path / "shared")), commander=create_parallel_commander(coordinator.cfg)
    )
    other.load_state_dict(state)
    assert other.env_steps == 8 and other.replay.count() == 8
    assert [t.task_id for t in other.tasks.list()] == [t.task_id for t in coordinator.tasks.list()]
    # a new task's number continues after the saved ones, under this process's own incarnation
    number = lambda task_id: int(task_id.rsplit("-", 1)[1])  # noqa: E731
    new = other.tasks.create(other.tasks.list()[0].kind, {}).task_id
    assert number(new) > max(number(t.task_id) for t in coordinator.tasks.list())
    assert new.split("-")[1] == other.tasks.incarnation != coordinator.tasks.incarnation
    assert other.replay.sample(4, 2, 0)["chunks"] == ["c-s"]


def test_task_table_forgets_the_oldest_ended_tasks():
    from parallel_rl.coordinator import TaskKind, TaskState, TaskTable

    table = TaskTable(max_final=3)
    live = table.create(TaskKind.LEARNER, {})
    table.start(live, "learner-1")
    ids = []
    for _ in range(5):
        task = table.create(TaskKind.COLLECTOR, {"env_steps": 1})
        table.start(task, "collector-1")
        table.end(task.task_id, TaskState.FINISHED)
        ids.append(task.task_id)
    assert [t.task_id for t in table.list()] == [live.task_id] + ids[-3:]
    assert table.forgotten == 2 and table.counts()["collector"]["finished"] == 3


def test_workers_take_torch_threads_from_the_coordinators_config(coordinator_factory, slaves):
    coordinator, server = coordinator_factory()
    coordinator.cfg.system.torch_num_threads = 3  # what the coordinator sends on connect (not a default)
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    assert collector.torch_threads == 3


def test_a_removed_worker_that_misses_the_disconnect_call_leaves_on_its_next_heartbeat(coordinator_factory):
    """The coordinator's disconnect call never reaches the slave (lost on the way): the answer to the slave's
    next heartbeat says it is gone, and it leaves as the call would have made it (a self-registered slave
    exits). Before, it went on until the coordinator stopped answering and then exited with an error."""

    class MissesTheCall(ScriptedSlave):
        def on_disconnect(self, reason):
            missed.append(reason)

    missed = []
    coordinator, server = coordinator_factory()
    slave = MissesTheCall("collector", server.url).start()
    runner = threading.Thread(target=slave.run, daemon=True)
    try:
        runner.start()
        assert slave.got_task.wait(30)
        worker_id = slave.worker_id
        assert api(server, f"/collectors/{worker_id}", method="DELETE").status_code == 200
        runner.join(10)  # the task is stopped; a few heartbeats (0.2 s apart) later the slave leaves
        assert not runner.is_alive(), "the slave did not leave"
        assert missed and slave.fatal_error is None and slave.worker_id is None
        assert api(server, f"/collectors/{worker_id}").json()["state"] == "gone"
    finally:
        slave.close()


def test_let_go_while_registering_is_a_normal_end(coordinator_factory):
    """Training ended just as a worker joined: the coordinator adopts it and lets it go at once."""

    class LetGoAtOnce(ScriptedSlave):
        def on_connect(self, *args):
            super().on_connect(*args)
            self._release("training ended")  # what /disconnect runs, done before registration returns

    coordinator, server = coordinator_factory()
    slave = LetGoAtOnce("collector", server.url)
    try:
        slave.start()  # used to raise "registered ... but it never connected back"
        assert slave.stopping and slave.fatal_error is None
    finally:
        slave.close()


def test_a_busy_worker_s_refusal_puts_the_task_back_without_using_an_attempt(coordinator_factory, slaves):
    """A slave that answers 409 (still ending a task it was told to stop) is asked again after a back-off, and
    the same task runs on it with one attempt: busy refusals used to fail the task each time, and a learner's
    three attempts went in milliseconds (the run ended as failed)."""

    class BusyAtFirst(ScriptedSlave):
        refusals = []

        def validate_task(self, task):
            if len(self.refusals) < 2:
                self.refusals.append(task.task_id)
                raise ApiError(409, "conflict", "already running ['learner-old']")

    coordinator, server = coordinator_factory()
    learner = BusyAtFirst("learner", server.url)
    learner.start()
    threading.Thread(target=learner.run, daemon=True).start()
    try:
        assert learner.got_task.wait(20)
        task = learner.received[0]
        assert BusyAtFirst.refusals == [task.task_id, task.task_id]
        body = api(server, f"/tasks/{task.task_id}").json()
        assert body["state"] == "running" and body["attempts"] == 1 and body["worker_id"] == learner.worker_id
        assert not api(server, "/tasks?state=failed").json()["tasks"]
        assert api(server, "/cluster").json()["state"] == "running"
    finally:
        learner.finish.setdefault(learner.received[0].task_id if learner.received else "-", threading.Event()).set()
        learner.request_stop()
        learner.close()


@pytest.mark.parametrize("slots, slot_rows, warned", [(64, 4, True), (256, 4, False), (64, 64, False)])
def test_the_learner_says_when_its_chunk_cache_cannot_hold_the_replay(tmp_path, caplog, slots, slot_rows, warned):
    """Chunks of 4 rows (a learner-paced collector's), rows sampled uniformly: a cache of 256 rows for the replay's
    800 reads a file for most rows and says how to size it; one that holds them all says nothing, also when it was
    sized in chunks of 64 rows (64 x 64: the small chunks take pages of 8 rows, not a 64-row slot each)."""
    from parallel_rl.learner.pipeline import RowStore
    from parallel_rl.storage import SharedStorage

    storage = SharedStorage(str(tmp_path))
    names = [f"c{i}" for i in range(200)]
    for i, name in enumerate(names):  # 200 chunks of 4 rows; a batch's 64 rows from 64 of them
        storage.chunks.write(name, {"obs": np.full((4, 1), i, dtype=np.float32)})
    store = RowStore(storage, slots=slots, slot_rows=slot_rows)
    rng = np.random.default_rng(0)
    for _ in range(400):  # 400 batches of 64 rows
        chunks = rng.choice(names, size=64, replace=False).tolist()
        local = np.arange(64)
        cols, keep = store.gather(chunks, local, rng.integers(0, 4, size=64))
        assert keep.all() and (cols["obs"][:, 0] == [int(chunks[i][1:]) for i in local]).all()
    assert (
        "needed" in caplog.text and "chunk_cache_size x chunk_size about the replay's size" in caplog.text
    ) == warned


def test_the_chunk_cache_returns_the_right_rows_of_chunks_of_any_size_as_it_evicts(tmp_path):
    """Chunks of 1-64 rows in pages of 8 (a chunk of 20 rows spans 3 pages, not next to each other once pages
    were freed and reused), a cache of a fifth of the replay: every gathered row is the row asked for."""
    from parallel_rl.learner.pipeline import RowStore
    from parallel_rl.storage import SharedStorage

    storage = SharedStorage(str(tmp_path))
    rng = np.random.default_rng(1)
    sizes = {f"c{i}": int(rng.integers(1, 65)) for i in range(100)}
    for i, (name, n) in enumerate(sizes.items()):
        storage.chunks.write(
            name, {"obs": (1000 * i + np.arange(n, dtype=np.float32))[:, None], "act": np.full(n, i, dtype=np.int64)}
        )
    store = RowStore(storage, slots=16, slot_rows=64)  # 1,024 rows for ~3,200
    names = list(sizes)
    for _ in range(300):
        chunks = rng.choice(names, size=12, replace=False).tolist()
        local = rng.integers(0, 12, size=48)
        rows = np.array([rng.integers(0, sizes[chunks[i]]) for i in local])
        cols, keep = store.gather(chunks, local, rows)
        index = np.array([int(chunks[i][1:]) for i in local])
        assert keep.all()
        np.testing.assert_array_equal(cols["act"], index)
        np.testing.assert_array_equal(cols["obs"][:, 0], 1000 * index + rows)
