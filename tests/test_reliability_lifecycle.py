"""Reliability of the run's lifecycle (issue 23): what survives a coordinator's restart, how repeated failures end
a run, and how a slave that cannot register again ends."""
import threading

import numpy as np
import pytest
from easydict import EasyDict

from parallel_rl.interaction.http import ApiError
from tests.conftest import eventually
from tests.test_coordinator import ScriptedSlave, slaves  # noqa: F401 (fixture)
from tests.test_persistence import restarted


# ---- snapshots and resume ------------------------------------------------------------------------------------
def test_chunks_waiting_out_their_grace_are_deleted_after_a_resume(tmp_path):
    """A chunk evicted from the buffer waits out a grace before its file is deleted; a snapshot taken meanwhile
    used to restore it as indexed but never doomed, so every resume leaked its files."""
    from parallel_rl.coordinator.replay import ReplayIndex
    from parallel_rl.storage import SharedStorage

    storage = SharedStorage(str(tmp_path / "shared"))
    buffer_cfg = EasyDict(type="naive", replay_buffer_size=8)
    replay = ReplayIndex(buffer_cfg, storage, grace_seconds=3600.0)
    for name in ("c-old", "c-new"):
        storage.write_chunk(name, {"obs": np.zeros((8, 1), np.float32)})
        replay.add_chunk(name, 8, 0, "collector-1")
    assert replay.stats()["chunks_pending_delete"] == 1  # c-old's rows were pushed out by c-new's
    state = replay.state_dict()

    resumed = ReplayIndex(buffer_cfg, storage, grace_seconds=0.0)
    resumed.load_state_dict(state)
    assert resumed.stats()["chunks_pending_delete"] == 1
    assert resumed.collect_garbage() == 1
    assert not storage.chunk_exists("c-old") and storage.chunk_exists("c-new")
    assert resumed.count() == 8 and resumed.sample(4, 1, 0)["chunks"] == ["c-new"]


def test_snapshots_hold_no_lease_tokens_yet_workers_are_re_adopted(coordinator_factory, slaves):  # noqa: F811
    """A snapshot (a file on the shared store, 0644) used to hold every worker's lease token: whoever could read
    it could act as any worker. It holds their digests: the restarted coordinator still knows each worker by the
    token it holds, and no other."""
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(30)
    lease = collector.coordinator.lease
    path = coordinator.save_state()
    with open(path) as f:
        assert lease not in f.read()

    other = restarted(coordinator)
    assert other.resume()
    assert other.heartbeat(collector.worker_id, lease).worker_id == collector.worker_id
    with pytest.raises(ApiError) as refused:
        other.heartbeat(collector.worker_id, lease[:-1] + ("A" if lease[-1] != "A" else "B"))
    assert refused.value.status == 404


def test_a_worker_saved_while_connecting_is_reaped_after_a_resume(coordinator_factory):
    """A snapshot taken while the coordinator was connecting to a worker restored it as `connecting` for ever:
    never given a task, never reaped, its address refused with 409. The connect call died with the old process:
    restored, the worker is adopted again when it heartbeats, or reaped when its lease runs out."""
    entered, release = threading.Event(), threading.Event()

    class SlowToConnect(ScriptedSlave):
        def on_connect(self, *args):
            entered.set()
            release.wait(10)
            super().on_connect(*args)

    coordinator, server = coordinator_factory()
    slave = SlowToConnect("collector", server.url)
    starting = threading.Thread(target=slave.start, daemon=True)
    other = None
    try:
        starting.start()
        assert entered.wait(10)
        assert coordinator.workers.counts()["collector"]["connecting"] == 1
        coordinator.save_state()
        release.set()
        starting.join(10)

        other = restarted(coordinator)
        assert other.resume()
        (saved,) = other.workers.list("collector")
        assert saved.state.value == "idle"
        other.start()  # nothing heartbeats to this one: the lease (2 s) runs out
        eventually(lambda: saved.state.value == "lost", timeout=10, message="the restored worker reaped")
    finally:
        release.set()
        if other is not None:
            other.close(notify_workers=False)
        slave.close()


# ---- slaves ----------------------------------------------------------------------------------------------------
def test_a_slave_that_cannot_register_again_retries_then_exits_with_an_error(coordinator_factory):
    """The coordinator forgot a slave (404 on its heartbeat) and the slave's registration fails: it used to try
    once, log, and live on registered nowhere (a zombie: for the learner the run stalled while `run`'s supervisor
    saw a live child). It retries with backoff for a bounded time, then exits with an error."""

    class RefusesASecondConnect(ScriptedSlave):
        reregister_seconds = 2.0

        def on_connect(self, *args):
            connects.append(args[0])
            if len(connects) > 1:
                raise ApiError(400, "bad_request", "cannot connect again (a test)")
            super().on_connect(*args)

        def execute(self, task):
            self.got_task.set()
            task.stop.wait(30)  # ends when the slave is let go
            return {"completed": False}

    connects = []
    coordinator, server = coordinator_factory()
    slave = RefusesASecondConnect("collector", server.url).start()
    runner = threading.Thread(target=slave.run, daemon=True)
    try:
        runner.start()
        assert slave.got_task.wait(30)
        coordinator.mark_lost(coordinator.get_worker(slave.worker_id), "a test forgets it")
        runner.join(15)
        assert not runner.is_alive(), "the slave lives on, registered nowhere"
        assert len(connects) > 2  # retried, not given up after one try
        assert "could not register again" in slave.fatal_error and "cannot connect again" in slave.fatal_error
    finally:
        slave.close()
