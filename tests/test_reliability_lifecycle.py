"""Reliability of the run's lifecycle (issue 23): what survives a coordinator's restart, how repeated failures end
a run, and how a slave that cannot register again ends."""

import threading

import numpy as np
import pytest
from easydict import EasyDict

from parallel_rl.errors import NotFoundError
from parallel_rl.transport import ApiError
from tests.support import eventually
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
        storage.chunks.write(name, {"obs": np.zeros((8, 1), np.float32)})
        replay.add_chunk(name, 8, 0, "collector-1")
    assert replay.stats()["chunks_pending_delete"] == 1  # c-old's rows were pushed out by c-new's
    state = replay.state_dict()

    resumed = ReplayIndex(buffer_cfg, storage, grace_seconds=0.0)
    resumed.load_state_dict(state)
    assert resumed.stats()["chunks_pending_delete"] == 1
    assert resumed.collect_garbage() == 1
    assert not storage.chunks.exists("c-old") and storage.chunks.exists("c-new")
    assert resumed.count() == 8 and resumed.sample(4, 1, 0)["chunks"] == ["c-new"]


def test_snapshots_hold_no_lease_tokens_yet_workers_are_re_adopted(coordinator_factory, slaves):  # noqa: F811
    """A snapshot (a file on the shared store, 0644) used to hold every worker's lease token: whoever could read
    it could act as any worker. It holds their digests: the restarted coordinator still knows each worker by the
    token it holds, and no other."""
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(30)
    lease = collector.coordinator.lease
    path = coordinator.snapshots.save_state()
    with open(path) as f:
        assert lease not in f.read()

    other = restarted(coordinator)
    assert other.snapshots.resume()
    assert other.membership.heartbeat(collector.worker_id, lease).worker_id == collector.worker_id
    with pytest.raises(NotFoundError) as refused:
        other.membership.heartbeat(collector.worker_id, lease[:-1] + ("A" if lease[-1] != "A" else "B"))
    assert refused.value.http_status == 404


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
        coordinator.snapshots.save_state()
        release.set()
        starting.join(10)

        other = restarted(coordinator)
        assert other.snapshots.resume()
        (saved,) = other.workers.list("collector")
        assert saved.state.value == "setting_up"  # its heartbeats say when it is ready
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
        coordinator.membership.mark_lost(coordinator.membership.get_worker(slave.worker_id), "a test forgets it")
        runner.join(15)
        assert not runner.is_alive(), "the slave lives on, registered nowhere"
        assert len(connects) > 2  # retried, not given up after one try
        assert "could not register again" in slave.fatal_error and "cannot connect again" in slave.fatal_error
    finally:
        slave.close()


# ---- repeated failures -----------------------------------------------------------------------------------------
def test_the_same_error_again_and_again_fails_the_run_with_one_line_after_backing_off(coordinator_factory):
    """Every collector task failed alike (a checkpoint that does not fit the model): the coordinator reissued
    thousands of tasks, env steps stayed 0 and the run never ended. The worker backs off between tasks (doubling),
    and the role's run of the same error (numbers aside) fails the run with one line naming it."""
    import time

    started = []

    class AlwaysFails(ScriptedSlave):
        def execute(self, task):
            started.append(time.monotonic())
            raise RuntimeError(f"size mismatch for layer {len(started)}:\n  copying a param of shape [{len(started)}]")

    coordinator, server = coordinator_factory(worker={"failure_backoff": 0.1}, commander={"max_repeated_failures": 5})
    slave = AlwaysFails("collector", server.url).start()
    threading.Thread(target=slave.run, daemon=True).start()
    try:
        eventually(lambda: coordinator.state == "failed", timeout=20, message="the run failed")
        reason = coordinator.reason
        assert "collector tasks failed 5 times in a row with the same error" in reason, reason
        assert "RuntimeError: size mismatch for layer 5: copying" in reason and "\n" not in reason
        assert len(started) == 5
        gaps = [b - a for a, b in zip(started, started[1:])]
        assert all(gap >= 0.9 * 0.1 * 2**i for i, gap in enumerate(gaps)), gaps  # 0.1, 0.2, 0.4, 0.8 s
    finally:
        slave.close()


def test_a_checkpoint_that_does_not_fit_the_model_fails_the_run_naming_the_file(coordinator_factory):
    """A real collector whose every task fails loading the learner's checkpoint (a size mismatch): the run fails
    with one line naming the error and the file (before: a RuntimeError per task, reissued for ever)."""
    import torch

    from parallel_rl.collector.shell import CollectorSlave

    coordinator, server = coordinator_factory(worker={"failure_backoff": 0.05})
    coordinator.storage.policies.save(0, {"model": {"encoder.0.weight": torch.zeros(3, 3)}})
    slave = CollectorSlave(server.url, token="test-token", request_timeout=2.0, max_retries=1).start()
    threading.Thread(target=slave.run, daemon=True).start()
    try:
        eventually(lambda: coordinator.state == "failed", timeout=30, message="the run failed")
        reason = coordinator.reason
        assert coordinator.storage.policies.path(0) in reason and "does not fit" in reason, reason
        assert "\n" not in reason and coordinator.env_steps == 0
    finally:
        slave.close()


def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(tmp_path, caplog):
    """A corrupt top-version policy checkpoint failed every collector task (1,383 failed tasks in 10 s): the
    collector loads the newest loadable one before it, says so once, and evaluates that one when asked to
    evaluate the damaged version."""
    from parallel_rl.storage import SharedStorage
    from parallel_rl.collector.cluster import ClusterCollector
    from tests.support import toy_cluster_config

    storage = SharedStorage(str(tmp_path / "shared"))
    collector = ClusterCollector(toy_cluster_config(tmp_path), storage, seed=0)
    try:
        storage.policies.save(0, collector.policy.model_state_dict())
        with open(storage.policies.path(1), "wb") as f:
            f.write(b"not a checkpoint" * 64)
        assert collector.get_policy_update_info() == 1
        assert collector.update_policy(1) and collector.policy_version == 0
        assert not collector.update_policy(1) and collector.get_policy_update_info() is None
        assert collector.evaluate(1, 2)["policy_version"] == 0
        said = [r.getMessage() for r in caplog.records if "cannot be loaded" in r.getMessage()]
        assert len(said) == 1 and storage.policies.path(1) in said[0]
    finally:
        collector.close()


def test_learner_failures_are_counted_in_a_window_not_for_ever(coordinator_factory):
    """Learner deaths over a run's whole life shared one max_task_attempts (3): the third kill, days apart, failed
    the run. Only the failures within parallel.commander.task_failure_window count."""
    import time

    from parallel_rl.coordinator.tasks import TaskKind, TaskState

    coordinator, _ = coordinator_factory(commander={"max_task_attempts": 3})  # the window: 600 s by default
    task = coordinator.tasks.create(TaskKind.LEARNER, {"resume": True})
    task.attempts = 2  # killed twice before, a day and two days ago
    task.failures = [time.time() - 2 * 86400, time.time() - 86400]
    for _ in range(2):  # and now twice within the window: replaced each time
        coordinator.tasks.start(task, "learner-1")
        coordinator.tasks.end(task.task_id, TaskState.FAILED, error="learner-1 lost: process exited with code -9")
        coordinator.commander.on_task_failed(task)
        assert coordinator.state == "running"
        (task,) = coordinator.tasks.list(state="pending")
        assert task.kind == TaskKind.LEARNER and len(task.failures) in (1, 2)
    coordinator.tasks.start(task, "learner-1")  # a third time within the window: the run fails
    coordinator.tasks.end(task.task_id, TaskState.FAILED, error="learner-1 lost: process exited with code -9")
    coordinator.commander.on_task_failed(task)
    assert coordinator.state == "failed" and "learner task failed 3 times within 600s" in coordinator.reason


@pytest.mark.parametrize(
    "section, values",
    [
        ("commander", {"task_failure_window": -1.0}),
        ("commander", {"max_repeated_failures": -1}),
        ("worker", {"failure_backoff": 2.0, "failure_max_backoff": 1.0}),
    ],
)
def test_failure_limits_out_of_range_are_config_errors(tmp_path, section, values):
    from parallel_rl.errors import ConfigError
    from tests.support import toy_cluster_config

    with pytest.raises(ConfigError, match=f"parallel.{section} needs"):
        toy_cluster_config(tmp_path, **{section: values})


def test_a_run_whose_collector_tasks_all_fail_alike_exits_1_with_one_line(cli, tmp_path):
    """`parallel-rl run` where every collector task fails the same way: it used to reissue tasks for ever (env
    steps 0, thousands of tracebacks) until its time budget; it fails, exit 1, with one line naming the error."""
    import time

    from tests.test_cluster import TOY_CONFIG, child_pids

    config = tmp_path / "broken.py"
    config.write_text(
        TOY_CONFIG.replace(
            'env_id="parallel_rl/Counting-v0"', 'env_id="parallel_rl_test/Broken-v0", import_names=["tests.broken_env"]'
        ).replace("max_seconds=90.0", "max_seconds=60.0")
    )
    started = time.monotonic()
    run = cli("run", "run", "-c", str(config), "--set", f"exp_name={tmp_path / 'exp'}")
    assert run.wait(90) == 1, run.output()[-3000:]
    assert time.monotonic() - started < 50  # not the time budget
    failed = [line for line in run.output().splitlines() if line.startswith("parallel-rl run: failed:")]
    assert len(failed) == 1, run.output()[-3000:]
    assert "collector tasks failed 5 times in a row with the same error" in failed[0]
    assert "RuntimeError: the broken env fails at step 1 (a test)" in failed[0]
    assert child_pids(run.pid) == []


def test_a_store_down_for_seconds_fails_the_learner_often_but_counts_once(coordinator_factory):
    """A read-only blip of a few seconds failed the learner's task 4 times in 4 s (backoff 0.5, 1, 2 s) and, with
    max_task_attempts=3, failed the run; store faults count once per storage_max_backoff seconds of a chain."""
    import requests

    from parallel_rl.errors import StorageFaultError

    coordinator, server = coordinator_factory(
        worker={"storage_backoff": 0.05, "storage_max_backoff": 5.0}, commander={"max_task_attempts": 3}
    )

    class StoreDownLearner(ScriptedSlave):
        def execute(self, task):
            self.received.append(task)
            self.storage.health.fault("OSError: [Errno 30] Read-only file system (injected)")
            raise StorageFaultError("writing a checkpoint: [Errno 30] Read-only file system (injected)")

    learner = StoreDownLearner("learner", server.url)
    learner.start()
    threading.Thread(target=learner.run, daemon=True).start()
    try:
        failed = eventually(
            lambda: (lambda t: t if len(t) >= 5 else None)(
                requests.get(server.url + "/api/v1/tasks?kind=learner&state=failed", timeout=5).json()["tasks"]
            ),
            timeout=30,
            message="five failed learner tasks",
        )
        assert all("Read-only" in t["error"] for t in failed)
        summary = requests.get(server.url + "/api/v1/cluster", timeout=5).json()
        assert summary["state"] == "running", summary
    finally:
        learner.request_stop()
        learner.close()
