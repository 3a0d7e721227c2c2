"""DI-engine's comm interfaces, factories and NaiveCollector against a live coordinator."""

import threading

import pytest
import torch  # noqa: F401  (imported up front: a first import inside the slave's task thread takes seconds on a busy box)

from parallel_rl.errors import ConfigError
from parallel_rl.collector.shell import CollectorSlave
from parallel_rl.learner.shell import LearnerSlave
from parallel_rl.worker import (
    BaseCommCollector,
    BaseCommLearner,
    BaseParallelCollector,
    NaiveCollector,
    create_comm_collector,
    create_comm_learner,
)
from parallel_rl.collector.cluster import ClusterCollector

from .support import eventually

TOKEN = "test-token"


def test_flask_fs_slaves_implement_the_comm_interfaces():
    assert issubclass(CollectorSlave, BaseCommCollector)
    assert issubclass(LearnerSlave, BaseCommLearner)
    assert issubclass(NaiveCollector, BaseCommCollector)
    assert issubclass(ClusterCollector, BaseParallelCollector)


def test_create_comm_collector_and_learner_build_our_flask_fs_classes():
    collector = create_comm_collector(
        {"type": "flask_fs", "import_names": [], "host": "127.0.0.1", "port": 0, "token": TOKEN}
    )
    learner = create_comm_learner({"type": "flask_fs", "host": "127.0.0.1", "port": 0, "token": TOKEN})
    try:
        assert type(collector) is CollectorSlave and type(learner) is LearnerSlave
        assert collector.collector_uid is None  # not connected yet
        assert learner.hooks4call == []
    finally:
        collector.close()
        learner.close()


def test_create_comm_collector_builds_a_users_class_registered_by_import_names(tmp_path, monkeypatch):
    (tmp_path / "my_comm_module.py").write_text(
        "from parallel_rl.worker import NaiveCollector, register_comm_collector\n"
        "@register_comm_collector('my_comm')\n"
        "class MyCollector(NaiveCollector):\n"
        "    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    collector = create_comm_collector(
        {"type": "my_comm", "import_names": ["my_comm_module"], "port": 0, "token": TOKEN}
    )
    try:
        assert type(collector).__name__ == "MyCollector" and isinstance(collector, BaseCommCollector)
    finally:
        collector.close()


def test_unknown_comm_type_is_a_clear_error_listing_the_registered_ones():
    with pytest.raises(
        ConfigError, match=r"unknown comm_collector type 'flsk_fs'.*known: flask_fs, (my_comm, )?naive\)"
    ):
        create_comm_collector({"type": "flsk_fs"})
    with pytest.raises(ConfigError, match=r"unknown comm_learner type 'nope'.*known: flask_fs"):
        create_comm_learner({"type": "nope"})
    with pytest.raises(ConfigError, match="import_names: cannot import 'no_such_module_xyz'"):
        create_comm_collector({"type": "naive", "import_names": ["no_such_module_xyz"]})


def test_naive_collector_joins_a_live_coordinator_and_relays_one_task(coordinator_factory):
    coordinator, server = coordinator_factory()
    naive = create_comm_collector({"type": "naive", "coordinator_url": server.url, "token": TOKEN, "max_tasks": 1})
    naive.start()
    runner = threading.Thread(target=naive.run, daemon=True)
    runner.start()
    done = eventually(
        lambda: [t.to_dict() for t in coordinator.tasks.list(kind="collector", state="finished")],
        message="relayed collector task finished",
    )
    assert done[0]["result"] == {"relayed": {"env_steps": 64}}
    assert naive.relayed == [{"task_id": done[0]["task_id"], "spec": {"env_steps": 64}}]
    runner.join(10)
    assert not runner.is_alive()  # max_tasks=1: it deregistered and returned


def test_increase_and_decrease_collector_are_the_rest_add_and_remove(coordinator_factory):
    coordinator, server = coordinator_factory()
    naive = NaiveCollector(token=TOKEN).start()  # no coordinator URL: waits to be added
    try:
        worker = coordinator.membership.increase_collector(naive.address)
        assert worker.kind == "collector" and naive.connected.wait(5) and naive.collector_uid == worker.worker_id
        coordinator.membership.decrease_collector(worker.worker_id)
        assert eventually(
            lambda: not coordinator.membership.get_worker(worker.worker_id).state.active, message="collector removed"
        )
    finally:
        naive.close()
