"""The protocol's dataclasses (parallel_rl/protocol/) and the coordinator's message table, without sockets."""

import os
import re

import numpy as np
import pytest

from parallel_rl import protocol
from parallel_rl.errors import ProtocolViolation
from parallel_rl.protocol import (
    MESSAGES,
    Chunk,
    ChunkDamaged,
    Games,
    Heartbeat,
    LearnInfo,
    MetadataBatch,
    Policy,
    Registration,
    SampleAnswer,
    SampleRequest,
    StorageReport,
    TaskCancelled,
    TaskDone,
    TaskFailed,
)
from tests.conftest import toy_cluster_config

FAILING = StorageReport(healthy=False, faults=3, error="writing a chunk failed: ENOSPC", since=1.7e9)
EXAMPLES = [
    Chunk(chunk="c-1", size=8, policy_version=-1),
    Chunk(chunk="c-2", size=8, policy_version=3, env_steps=8, episode_returns=[1.0, -2.5], task_id="collector-000001"),
    TaskDone(task_id="evaluator-000002", result={"eval_episode_return_mean": 4.0, "episodes": 2}),
    TaskCancelled(task_id="collector-000001", error="stopped before it started"),
    TaskFailed(task_id="learner-000003", error="OSError: ENOSPC", storage=FAILING),
    Policy(version=2**53),
    LearnInfo(train_iter=7, info={"loss": 0.5, "q_value": None, "resumed": True}, task_id="learner-000003"),
    Games(task_id="collector-000001", opponent="v12", win=3, loss=1, player="main"),
    ChunkDamaged(chunk="c-3", error="BadZipFile: not a zip file"),
    MetadataBatch(
        messages=[{"type": "policy", "version": 1}], wait_for_allowance=1.0, policy_version=4, loaded_version=4
    ),
    Heartbeat(
        problems=["learner-data thread died"],
        tasks=["collector-000001"],
        ranks=[{"rank": 0, "pid": 12, "state": "running"}],
        storage=FAILING,
    ),
    Heartbeat(),
    SampleRequest(
        worker_id="learner-1",
        batch_size=64,
        batches=4,
        train_iter=9,
        wait=0.5,
        encoding="base64",
        priorities={"index": [1], "uid": [2], "priority": [0.5]},
    ),
    SampleRequest(worker_id="learner-1", batches=4),  # no batch_size: the coordinator's flow's
    SampleAnswer(
        chunks=["c-1"],
        batches=[{"chunk": [0], "row": [3], "index": [7], "uid": [9], "weight": [1.0]}],
        control={"stop": False},
    ),
    SampleAnswer(chunks=[], batches=[], retry_after=1.0),
    Registration(address="http://127.0.0.1:9000", worker_id="collector-7"),
    Registration(),  # `parallel-rl run` starts one more
    FAILING,
]


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_reads_back_what_it_wrote(message):
    assert type(message).from_json(message.to_json()) == message
    if isinstance(message, protocol.Message):
        assert message.to_json()["type"] == message.TYPE
        assert protocol.parse_message(message.to_json()) == message


def test_every_message_type_has_an_example_and_a_check_apply_pair():
    from parallel_rl.coordinator.messages import MessageTable

    assert set(MESSAGES) == {type(m).TYPE for m in EXAMPLES if isinstance(m, protocol.Message)}
    assert set(MessageTable.PAIRS) == set(MESSAGES)
    assert all(cls.SENDERS and set(cls.SENDERS) <= set(protocol.ROLES) for cls in MESSAGES.values())


def test_unknown_fields_are_ignored():
    assert Policy.from_json({"type": "policy", "version": 3, "signed_by": "a newer learner"}) == Policy(version=3)


def chunk(**fields):
    return {"type": "chunk", "chunk": "c-1", "size": 4, "policy_version": -1, "env_steps": 4, **fields}


@pytest.mark.parametrize(
    "cls, obj, text",
    [
        (Chunk, chunk(size=0), "field 'size' must be in [1, 2147483647], got 0"),
        (Chunk, chunk(size=10**13), "field 'size' must be in"),
        (Chunk, chunk(size=4.0), "field 'size' must be an integer, got 4.0"),
        (Chunk, chunk(size=True), "field 'size' must be an integer, got True"),
        (Chunk, chunk(env_steps=-100), "field 'env_steps' must be in [0, 2147483647], got -100"),
        (Chunk, chunk(env_steps=None), "field 'env_steps' must be an integer, got None"),
        (Chunk, chunk(policy_version=-2), "field 'policy_version' must be in [-1, inf], got -2"),
        (Chunk, {"type": "chunk", "chunk": "c-1", "size": 4}, "field 'policy_version' must be an integer, got None"),
        (Chunk, chunk(episode_returns=[1.0] * 5), "episode_returns must be at most env_steps=4 finite numbers"),
        (Chunk, chunk(episode_returns=[10**400]), "episode_returns must be at most env_steps=4 finite numbers"),
        (Chunk, chunk(chunk=7), "field 'chunk' must be a string, got 7"),
        (Chunk, chunk(task_id=5), "field 'task_id' must be a string, got 5"),
        (TaskDone, {"type": "task_done"}, "field 'task_id' must be a string, got None"),
        (
            TaskDone,
            {"type": "task_done", "task_id": "t", "result": [1]},
            "'result' must be an object and 'error' a string, got list and NoneType",
        ),
        (TaskFailed, {"type": "task_failed", "task_id": "t", "error": 3}, "'error' a string, got dict and int"),
        (
            TaskFailed,
            {"type": "task_failed", "task_id": "t", "storage": {"healthy": "no", "faults": 1}},
            "'storage.healthy' must be true or false",
        ),
        (
            TaskFailed,
            {"type": "task_failed", "task_id": "t", "storage": {"healthy": False, "faults": -1}},
            "'storage.faults' must be a count",
        ),
        (Policy, {"type": "policy", "version": 2**53 + 1}, "field 'version' must be in [0, 9007199254740992]"),
        (Policy, {"type": "policy"}, "field 'version' must be an integer, got None"),
        (LearnInfo, {"type": "learn_info", "train_iter": -1}, "field 'train_iter' must be in [0, 9007199254740992]"),
        (
            LearnInfo,
            {"type": "learn_info", "train_iter": 1, "info": {"loss": "big"}},
            "'info' must map names to finite numbers or null",
        ),
        (Games, {"type": "games", "task_id": "t", "opponent": "x" * 65}, "field 'opponent' must be a player name"),
        (Games, {"type": "games", "task_id": "t", "opponent": "bot", "win": -1}, "field 'win' must be in"),
        (
            ChunkDamaged,
            {"type": "chunk_damaged", "chunk": "c-1"},
            "field 'error' must be a string saying what is wrong with the chunk, got NoneType",
        ),
        (MetadataBatch, {}, "missing field 'messages'"),
        (MetadataBatch, {"messages": {}}, "field 'messages' must be list, got dict"),
        (MetadataBatch, {"messages": [], "wait_for_allowance": 10**400}, "field 'wait_for_allowance' must be a number"),
        (MetadataBatch, {"messages": [], "policy_version": True}, "field 'policy_version' must be int, got bool"),
        (Heartbeat, {"problems": "a"}, "field 'problems' must be a list of strings"),
        (Heartbeat, {"tasks": ["t"] * 1001}, "field 'tasks' must be a list of at most 1000 task ids"),
        (Heartbeat, {"ranks": [{"rank": 0, "pid": 1}]}, "field 'ranks' must be a list of at most 1024 objects"),
        (Heartbeat, {"storage": []}, "'storage' must be an object"),
        (SampleRequest, {"worker_id": "learner-1", "batch_size": "64"}, "field 'batch_size' must be int, got str"),
        (SampleRequest, {"worker_id": "learner-1", "batch_size": 0}, "need 1 <= batch_size <= 65536"),
        (
            SampleRequest,
            {"worker_id": "learner-1", "batch_size": 4, "encoding": "xml"},
            "field 'encoding' must be 'json' or 'base64', got 'xml'",
        ),
        (SampleRequest, {"batch_size": 4}, "missing field 'worker_id'"),
        (Registration, {"address": 5}, "field 'address' must be str, got int"),
        (Registration, {"address": "http://h:1", "worker_id": 3}, "field 'worker_id' must be str, got int"),
    ],
)
def test_refusals_name_the_field(cls, obj, text):
    with pytest.raises(ProtocolViolation) as refused:
        cls.from_json(obj)
    assert text in str(refused.value)
    assert (refused.value.http_status, refused.value.code) == (400, "bad_request")


@pytest.mark.parametrize(
    "obj, text",
    [
        ([1], "each message must be an object with a 'type', got [1]"),
        ({"type": 3}, "each message must be an object with a 'type'"),
        ({"type": "chunks"}, "unknown message type 'chunks' (one of ['chunk', 'chunk_damaged', 'games', "),
    ],
)
def test_a_message_without_a_known_type_is_refused(obj, text):
    with pytest.raises(ProtocolViolation, match=re.escape(text)):
        protocol.parse_message(obj)


def test_the_openapi_schemas_are_the_dataclasses():
    import dataclasses

    from coordinator_app.openapi import openapi_document

    doc = openapi_document("test")
    schemas = doc["components"]["schemas"]
    for cls in [*MESSAGES.values(), *protocol.BODIES]:
        schema = schemas[cls.__name__]
        names = [f.name for f in dataclasses.fields(cls)]
        assert set(schema["properties"]) - {"type"} == set(names), cls
        required = {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        assert set(schema.get("required", [])) - {"type"} == required, cls
    assert schemas["Chunk"]["properties"]["size"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": protocol.MAX_STEPS_PER_MESSAGE,
        "description": "rows in the file",
    }
    assert schemas["Chunk"]["properties"]["task_id"]["nullable"] is True
    body = doc["paths"]["/workers/{worker_id}/metadata"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/MetadataBatch"}
    mapping = schemas["MetadataBatch"]["properties"]["messages"]["items"]["discriminator"]["mapping"]
    assert set(mapping) == set(MESSAGES)
    refs = re.findall(r"'#/components/schemas/(\w+)'", repr(doc))
    assert set(refs) <= set(schemas)


def test_the_protocol_doc_lists_every_message_and_its_fields():
    import dataclasses

    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "protocol.md")) as f:
        rows = [line for line in f if line.startswith("| `")]
    for kind, cls in MESSAGES.items():
        row = next((r for r in rows if f"`{kind}`" in r.split("|")[1]), None)
        assert row is not None, f"docs/protocol.md has no row for {kind!r}"
        fields = row.split("|")[3]
        assert all(f.name in fields for f in dataclasses.fields(cls)), (kind, fields)


# ---- the message table, through a coordinator that serves nothing ---------------------------------------------
@pytest.fixture
def coordinator(tmp_path):
    from parallel_rl.coordinator import Coordinator
    from parallel_rl.storage import SharedStorage

    return Coordinator(
        toy_cluster_config(tmp_path, commander={"max_repeated_failures": 2}),
        SharedStorage(str(tmp_path / "shared")),
        "test-token",
    )


def join(coordinator, kind, n=1):
    """A worker entry as registration makes it (no slave behind it: nothing here calls it), with a task."""
    from parallel_rl.coordinator.tasks import TaskKind

    worker = coordinator.workers.register(kind, f"http://127.0.0.1:{9000 + n}", client=None)
    task = coordinator.tasks.create(TaskKind(kind), {})
    coordinator.tasks.start(task, worker.worker_id)
    return worker, task.task_id


def send(coordinator, worker, *messages):
    """The refusals (code, message) of one batch."""
    answer = coordinator.handle_metadata(
        worker.worker_id, [m.to_json() if hasattr(m, "to_json") else m for m in messages], lease=worker.lease
    )
    return [(r["index"], r["code"], r["message"]) for r in answer["refused"]]


def test_the_table_checks_against_the_coordinators_state_then_applies(coordinator):
    collector, task_id = join(coordinator, "collector")
    other, other_task = join(coordinator, "collector", 2)
    coordinator.storage.chunks.write("c-1", {"obs": np.zeros((4, 1), np.float32)})
    refused = send(
        coordinator,
        collector,
        Chunk(chunk="c-1", size=4, policy_version=-1, env_steps=4, episode_returns=[2.0], task_id=task_id),
        Chunk(chunk="c-2", size=4, policy_version=-1, task_id=task_id),  # no file
        Chunk(chunk="c-1", size=4, policy_version=5, task_id=task_id),  # never published
        Chunk(chunk="c-1", size=4, policy_version=-1, task_id=other_task),  # another's task
        Chunk(chunk="c-1", size=4, policy_version=-1, task_id="collector-999999"),
        Chunk(chunk="../c-1", size=4, policy_version=-1),
        Policy(version=0),
    )  # collectors publish no policies
    assert [(i, code) for i, code, _ in refused] == [
        (1, "bad_request"),
        (2, "bad_request"),
        (3, "forbidden"),
        (4, "not_found"),
        (5, "bad_request"),
        (6, "forbidden"),
    ]
    assert "'c-2' announced but not on the shared disk" in refused[0][2]
    assert "policy_version 5 was never published (newest -1)" in refused[1][2]
    assert f"{other_task} belongs to {other.worker_id}, not {collector.worker_id}" in refused[2][2]
    assert "'policy' messages come from learners only" in refused[5][2]
    assert (coordinator.env_steps, coordinator.episodes, coordinator.replay.count()) == (4, 1, 4)
    assert coordinator.tasks.get(task_id).progress == {"env_steps": 4, "chunks": 1}
    assert send(coordinator, collector, TaskDone(task_id=task_id, result={"n": 1})) == []
    assert coordinator.tasks.get(task_id).state.value == "finished"


def test_the_table_applies_a_learners_messages(coordinator):
    learner, task_id = join(coordinator, "learner")
    assert [code for _, code, _ in send(coordinator, learner, Policy(version=3))] == ["bad_request"]
    coordinator.storage.policies.save(3, {})
    assert (
        send(coordinator, learner, Policy(version=3), LearnInfo(train_iter=12, info={"loss": 0.25}, task_id=task_id))
        == []
    )
    assert (coordinator.policy_version, coordinator.train_iter, coordinator.learn_info) == (3, 12, {"loss": 0.25})
    assert coordinator.tasks.get(task_id).progress == {"train_iter": 12}


def test_repeated_failures_with_the_same_error_fail_the_run(coordinator):
    worker, first = join(coordinator, "learner")
    assert send(coordinator, worker, TaskFailed(task_id=first, error="checkpoint 17 does not fit")) == []
    assert coordinator.state == "running"
    _, second = join(coordinator, "learner", 2)
    second_worker = coordinator.workers.get(coordinator.tasks.get(second).worker_id)
    assert send(coordinator, second_worker, TaskFailed(task_id=second, error="checkpoint 18 does not fit")) == []
    assert coordinator.state == "failed" and "2 times in a row" in coordinator.reason


def test_a_task_that_failed_on_the_store_backs_its_worker_off(coordinator):
    worker, task_id = join(coordinator, "collector")
    assert send(coordinator, worker, TaskFailed(task_id=task_id, error="OSError", storage=FAILING)) == []
    assert not worker.storage.healthy and worker.storage.failures == 1
    assert coordinator.storage_summary()["workers"] == [worker.worker_id]
