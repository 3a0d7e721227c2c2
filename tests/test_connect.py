"""A worker's registration (issues 40.3, 41.7, 41.9): connecting answers at once and the slave builds its envs
and model afterwards, reporting when it is ready; a registration of an address still pending is the same worker;
messages queued across a re-registration are sent again under the new id; a bad config in the connect body is a
400 naming the key. Real coordinators and slaves on 127.0.0.1, real CLI processes."""

import pytest
import requests

from tests.support import eventually

from tests.test_coordinator import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}


# ---- 41.9: the connect body's config ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "config, key",
    [
        ({"env": 5}, "env"),
        ({"policy": "dqn"}, "policy"),
        ({"policy": {"other": []}}, "policy.other"),
        ({"policy": {"other": {"replay_buffer": 1}}}, "policy.other.replay_buffer"),
    ],
)
def test_a_connect_whose_config_has_a_section_of_the_wrong_type_is_a_400_naming_it(tmp_path, config, key):
    """`"config": {"env": 5}` used to be a 500 (AttributeError: 'int' object has no attribute 'get')."""
    from parallel_rl.collector.shell import CollectorSlave

    slave = CollectorSlave("http://127.0.0.1:9", token=TOKEN, shared_dir=str(tmp_path / "shared"))
    slave.server.start()
    try:
        answer = requests.post(
            slave.address + "/slave/v1/connect",
            headers=AUTH,
            timeout=5,
            json={"worker_id": "collector-1", "config": config},
        )
        assert answer.status_code == 400, answer.text
        message = answer.json()["error"]["message"]
        assert f"{key} must be a dict" in message, message
        assert slave.worker_id is None and not slave.connected.is_set()
    finally:
        slave.close()


# ---- 40.3: connecting does not wait for the set-up ------------------------------------------------------------
def test_workers_whose_set_up_outlasts_the_connect_timeout_register_and_train(cli, tmp_path):
    """Every env takes 3 s to build, the connect call times out after 2 s. The slaves used to build their envs
    and model inside the connect call: it timed out (422), each restart did the same, and the run failed with
    nothing trained. Connecting answers at once; the workers build afterwards and report when they are ready."""
    from tests.test_cluster import TOY_CONFIG

    config = tmp_path / "slow.py"
    config.write_text(
        TOY_CONFIG.replace(
            'env_id="parallel_rl/Counting-v0", env_kwargs=dict(episode_length=5)',
            'env_id="parallel_rl_test/Slow-v0", import_names=["tests.slow_env"], '
            "env_kwargs=dict(episode_length=5, build_seconds=3.0)",
        )
    )
    assert "Slow-v0" in config.read_text()
    run = cli(
        "run",
        "run",
        "-c",
        str(config),
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "parallel.worker.request_timeout=2.0",
    )
    assert run.wait(150) == 0, run.output()[-3000:]
    output = run.output()
    assert "refused to connect" not in output and "already registered" not in output, output[-3000:]


def test_a_registration_of_an_address_still_pending_is_the_same_worker(coordinator_factory):
    """A slave registers again while the coordinator is still connecting to it (its first registration timed
    out on a loaded box, or a person adds it meanwhile): that used to be a 409 (`already registered
    (connecting)`), and a slave started with --coordinator died of it. It is the same worker: same id, one entry."""
    import threading

    from tests.test_coordinator import ScriptedSlave, api

    entered, release, connects = threading.Event(), threading.Event(), []

    class HeldInConnect(ScriptedSlave):
        def on_connect(self, *args):
            connects.append(args[0])
            entered.set()
            release.wait(10)  # the test holds the connect calls until the second registration is in
            super().on_connect(*args)

    coordinator, server = coordinator_factory()
    slave = HeldInConnect("collector", server.url)
    starting = threading.Thread(target=slave.start, daemon=True)
    try:
        starting.start()
        assert entered.wait(10)
        again = {}
        second = threading.Thread(
            target=lambda: again.update(
                answer=api(server, "/collectors", method="POST", json={"address": slave.address})
            ),
            daemon=True,
        )
        second.start()
        eventually(
            lambda: len(connects) == 2 or "answer" in again,
            timeout=15,
            message="the second registration connecting (or answered)",
        )
        release.set()
        second.join(15)
        starting.join(15)
        answer = again["answer"]
        assert answer.status_code == 201, answer.text
        assert answer.json()["worker_id"] == slave.worker_id
        assert [w["worker_id"] for w in api(server, "/collectors").json()["collectors"]] == [slave.worker_id]
    finally:
        release.set()
        slave.close()


def test_a_set_up_that_fails_is_reported_with_its_reason_and_the_worker_ends(coordinator_factory):
    """The set-up fails after connect answered: the slave reports why (one line), the coordinator lets the worker
    go with that reason among its problems, and a slave started with --coordinator exits with it."""
    import threading

    from tests.test_coordinator import ScriptedSlave, api

    class CannotBuild(ScriptedSlave):
        def setup(self, cfg):
            raise RuntimeError("no such ROM: pong.bin (a test)")

    coordinator, server = coordinator_factory()
    slave = CannotBuild("collector", server.url).start()
    runner = threading.Thread(target=slave.run, daemon=True)
    try:
        runner.start()
        runner.join(20)
        assert not runner.is_alive(), "the slave that cannot set up lives on"
        assert "no such ROM: pong.bin (a test)" in slave.fatal_error
        (worker,) = api(server, "/collectors").json()["collectors"]
        assert worker["state"] == "gone"
        assert any("no such ROM: pong.bin (a test)" in p for p in worker["problems"]), worker
        assert coordinator.tasks.list(kind="collector", state="running") == []
    finally:
        slave.close()


# ---- 41.7: messages kept across a re-registration ----------------------------------------------------------------
def test_chunks_announced_around_a_lost_lease_are_all_indexed_after_the_collector_registers_again(cli, tmp_path):
    """The collector is silent past its lease (SIGSTOP: a pause, as of a coordinator stopped 13 s, starves it of
    its lease alike): the coordinator marks it lost, and resumed, the collector gets 404 and registers again under
    a new id. Its queued chunk announcements used to be dropped (404, then "not connected" while it registered
    again): a 13 s pause left 23 of 98 chunk files unindexed, later swept as orphans. They are kept and sent under
    the new id: every chunk file written is indexed."""
    import os
    import signal

    from tests.support import free_port, get
    from tests.test_cluster import TOY_CONFIG

    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    shared = tmp_path / "shared"
    port = str(free_port())
    url = f"http://127.0.0.1:{port}"
    env = {"PARALLEL_RL_TOKEN": TOKEN}
    coordinator = cli(
        "coordinator",
        "coordinator",
        "-c",
        str(config),
        "--port",
        port,
        "--shared-dir",
        str(shared),
        "--set",
        "env.stop_value=1000",
        "--set",
        "parallel.commander.max_seconds=300",
        "--set",
        "parallel.commander.max_env_steps_per_update=0",  # no learner: unthrottled
        "--set",
        "policy.other.replay_buffer.replay_buffer_size=1000000",  # nothing evicted
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        env=env,
    )
    coordinator.wait_line(r"^REST API: ")
    collector = cli("collector", "collector", "--coordinator", url, "--shared-dir", str(shared), env=env)
    eventually(lambda: get(url, "/api/v1/buffers")["buffers"][0]["chunks"] >= 5, timeout=60, message="collecting")
    (first,) = get(url, "/api/v1/collectors")["collectors"]

    def state_of(worker_id):
        return {w["worker_id"]: w["state"] for w in get(url, "/api/v1/collectors")["collectors"]}[worker_id]

    collector.proc.send_signal(signal.SIGSTOP)
    try:  # silent past its lease (2 s), its last chunk announcements queued or in flight
        eventually(lambda: state_of(first["worker_id"]) == "lost", timeout=60, message="the stopped collector lost")
    finally:
        collector.proc.send_signal(signal.SIGCONT)

    def registered_again():
        workers = get(url, "/api/v1/collectors")["collectors"]
        return [w for w in workers if w["worker_id"] != first["worker_id"] and w["state"] == "busy"]

    try:
        eventually(registered_again, timeout=60, message="the collector registered again and busy")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {get(url, '/api/v1/collectors')}\n{collector.output()[-4000:]}") from None
    collector.stop()  # its last chunk announced, its outbox flushed
    assert collector.proc.returncode == 0, collector.output()[-3000:]
    files = sorted(f for f in os.listdir(shared / "data") if f.endswith(".npz"))
    indexed = get(url, "/api/v1/buffers")["buffers"][0]["chunks"]
    # (the old task's end report is dropped on purpose: the coordinator failed that task when it lost the worker)
    dropped = [
        line
        for line in collector.output().splitlines()
        if "dropping" in line and "tasks of an earlier registration" not in line
    ]
    assert indexed == len(files), (indexed, len(files), dropped[:5])
    assert not dropped, dropped[:5]
