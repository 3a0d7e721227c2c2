"""The coordinator's state on the shared disk: snapshots, resume, damaged files."""

import json
import logging

import numpy as np
import pytest

from tests.support import eventually
from tests.test_coordinator import api, slaves  # noqa: F401 (fixture)


def restarted(coordinator):
    """A second coordinator on the first one's shared directory, resumed from what it saved."""
    from parallel_rl.coordinator import Coordinator, create_parallel_commander
    from parallel_rl.storage import SharedStorage

    other = Coordinator(
        coordinator.cfg,
        SharedStorage(coordinator.storage.root),
        token=coordinator.token,
        commander=create_parallel_commander(coordinator.cfg),
    )
    return other


def test_saved_state_is_resumed_whole(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(30)
    task_id = collector.received[0].task_id
    collector.write_chunk(task_id, "c-a", n=8, version=1)
    collector.write_chunk(task_id, "c-b", n=4, version=2)
    coordinator.eval_history.append(
        {"t": 1.0, "policy_version": 2, "env_steps": 12, "train_iter": 0, "eval_return": 3.5}
    )
    uptime = coordinator.uptime
    path = coordinator.snapshots.save_state()
    assert path and path.startswith(coordinator.storage.state_dir)

    other = restarted(coordinator)
    assert other.snapshots.resume() and other.snapshots.resumed_from == coordinator.storage.states.seqs()[-1]
    assert other.env_steps == 12 and other.episodes == 2 and other.replay.count() == 12
    assert other.summary()["train_return"] == coordinator.summary()["train_return"] == 1.0  # its episode window too
    assert [t.to_dict() for t in other.tasks.list()] == [t.to_dict() for t in coordinator.tasks.list()]
    assert other.eval_history == coordinator.eval_history
    # the worker keeps its id and is active again (re-adopted when it heartbeats)
    saved = other.membership.get_worker(collector.worker_id)
    assert saved.state.value == "busy" and saved.current_task == task_id and saved.env_steps == 12
    assert other.summary()["started_at"] == coordinator.started_at and other.uptime >= uptime
    # replay references stay valid: the same chunks come back from a sample
    assert sorted(other.replay.sample(4, 4, 0)["chunks"]) in (["c-a"], ["c-b"], ["c-a", "c-b"])
    # a chunk announced again after the restart (a retried message) is not counted twice
    other.handle_metadata(
        collector.worker_id,
        [{"type": "chunk", "task_id": task_id, "chunk": "c-b", "size": 4, "policy_version": 2, "env_steps": 4}],
        lease=collector.coordinator.lease,
    )  # the worker's lease survived the restart
    assert other.env_steps == 12 and other.replay.count() == 12
    # new tasks and workers do not reuse saved ids
    assert other.tasks.create(other.tasks.list()[0].kind, {}).task_id not in {
        t.task_id for t in coordinator.tasks.list()
    }


def test_snapshots_are_written_periodically_and_at_close(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory(coordinator=dict(snapshot_interval=0.1))
    first = eventually(lambda: coordinator.storage.states.seqs(), timeout=5, message="a periodic snapshot")
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(30)
    collector.write_chunk(collector.received[0].task_id, "c-a", n=8)
    eventually(lambda: api(server, "/cluster").json()["state_saved_at"], timeout=5, message="state_saved_at")
    coordinator.close(notify_workers=False)
    seqs = coordinator.storage.states.seqs()
    assert len(seqs) == 2 and seqs[-1] > first[-1]  # older ones are pruned: the newest and its fallback stay
    other = restarted(coordinator)
    assert other.snapshots.resume() and other.env_steps == 8 and other.snapshots.resumed_from == seqs[-1]


def test_a_damaged_newest_snapshot_falls_back_to_the_one_before(coordinator_factory, slaves, caplog):  # noqa: F811
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(30)
    task_id = collector.received[0].task_id
    collector.write_chunk(task_id, "c-a", n=8)
    coordinator.snapshots.save_state()
    collector.write_chunk(task_id, "c-b", n=4)
    coordinator.snapshots.save_state()
    storage = coordinator.storage
    older, newest = storage.states.seqs()
    json_path, npz_path = storage.states.paths(newest)
    with open(npz_path, "r+b") as f:  # truncated: a torn write, a full disk
        f.truncate(100)
    other = restarted(coordinator)
    with caplog.at_level(logging.WARNING):
        assert other.snapshots.resume()
    assert other.snapshots.resumed_from == older and other.env_steps == 8 and other.replay.count() == 8
    assert npz_path in caplog.text and "falling back" in caplog.text


def test_no_loadable_snapshot_is_refused_naming_the_files(coordinator_factory):
    from parallel_rl.errors import StorageError

    coordinator, _ = coordinator_factory()
    coordinator.snapshots.save_state()
    json_path, _ = coordinator.storage.states.paths(coordinator.storage.states.seqs()[-1])
    with open(json_path, "w") as f:
        f.write('{"format": 1, "seq": ')  # cut short
    with pytest.raises(StorageError, match=f"no loadable coordinator state.*{json_path}.*--fresh"):
        restarted(coordinator).snapshots.resume()


def test_a_state_of_a_newer_format_is_refused(coordinator_factory):
    from parallel_rl.errors import StateFormatError

    coordinator, _ = coordinator_factory()
    coordinator.snapshots.save_state()
    json_path, _ = coordinator.storage.states.paths(coordinator.storage.states.seqs()[-1])
    with open(json_path) as f:
        meta = json.load(f)
    with open(json_path, "w") as f:
        json.dump({**meta, "format": 99}, f)
    with pytest.raises(
        StateFormatError, match=f"{json_path}: coordinator state format 99, this parallel_rl reads format 1"
    ):
        restarted(coordinator).snapshots.resume()


def test_state_files_hold_no_pickle(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(30)
    collector.write_chunk(collector.received[0].task_id, "c-a", n=8)
    coordinator.snapshots.save_state()
    _, npz_path = coordinator.storage.states.paths(coordinator.storage.states.seqs()[-1])
    with np.load(npz_path, allow_pickle=False) as npz:  # raises on an object array
        assert all(npz[k].dtype != object for k in npz.files)


def test_tasks_that_changed_while_the_coordinator_was_down_are_settled_by_the_first_heartbeat(
    coordinator_factory, slaves
):  # noqa: F811
    """A snapshot cannot know what happened after it: a task that ended then reported its end to the old
    process (the new one would wait for it forever: a run whose evaluation never comes back never solves), and a
    task the old process issued then is unknown to the new one. The worker's heartbeat says which tasks it
    holds; the resumed coordinator fails the first (to issue it again) and asks the worker to stop the second."""
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(30)
    first = collector.received[0].task_id
    assert coordinator.snapshots.save_state()
    # after the snapshot: the first task ends (reported to this process), a second one is issued
    collector.finish[first].set()
    eventually(lambda: len(collector.received) >= 2, timeout=30, message="a second task")
    second = collector.received[1].task_id
    # the worker lets go of the first once its end is reported, which may come a moment after the second arrived
    eventually(lambda: collector.held_task_ids() == [second], timeout=30, message="only the second task held")

    other = restarted(coordinator)
    assert other.snapshots.resume()
    assert other.tasks.get(first).state.value == "running" and other.tasks.get(second) is None
    # the resumed process's ids never repeat one the old process issued after the snapshot (the worker, which
    # deduplicates task ids, would acknowledge such a task and never run it)
    assert other.tasks.create(other.tasks.get(first).kind, {}).task_id not in {first, second}
    worker = other.membership.heartbeat(
        collector.worker_id, collector.coordinator.lease, tasks=collector.held_task_ids()
    )
    task = other.tasks.get(first)
    assert task.state.value == "failed" and "no longer runs it" in task.error
    assert worker.current_task is None and worker.state.value == "idle"
    control = other.flow.control_for(worker)
    assert control["cancel_tasks"] == [second]
    collector.on_control(control)  # what the slave does with the heartbeat's answer
    eventually(lambda: second not in collector.held_task_ids(), timeout=10, message="the unknown task stopped")
    assert collector.finish[second].is_set()
    # a heartbeat without the field (an older worker) changes nothing; later heartbeats find nothing to settle
    assert other.membership.heartbeat(collector.worker_id, collector.coordinator.lease).worker_id == collector.worker_id
    assert (
        other.flow.control_for(other.membership.heartbeat(collector.worker_id, collector.coordinator.lease, tasks=[]))[
            "cancel_tasks"
        ]
        == []
    )
