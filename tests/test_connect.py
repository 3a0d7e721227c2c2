"""A worker's registration (issues 40.3, 41.7, 41.9): connecting answers at once and the slave builds its envs
and model afterwards, reporting when it is ready; a registration of an address still pending is the same worker;
messages queued across a re-registration are sent again under the new id; a bad config in the connect body is a
400 naming the key. Real coordinators and slaves on 127.0.0.1, real CLI processes."""
import pytest
import requests

from tests.test_coordinator import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}


# ---- 41.9: the connect body's config ---------------------------------------------------------------------------
@pytest.mark.parametrize("config, key", [({"env": 5}, "env"), ({"policy": "dqn"}, "policy"),
                                         ({"policy": {"other": []}}, "policy.other"),
                                         ({"policy": {"other": {"replay_buffer": 1}}}, "policy.other.replay_buffer")])
def test_a_connect_whose_config_has_a_section_of_the_wrong_type_is_a_400_naming_it(tmp_path, config, key):
    """`"config": {"env": 5}` used to be a 500 (AttributeError: 'int' object has no attribute 'get')."""
    from parallel_rl.collector.shell import CollectorSlave

    slave = CollectorSlave("http://127.0.0.1:9", token=TOKEN, shared_dir=str(tmp_path / "shared"))
    slave.server.start()
    try:
        answer = requests.post(slave.address + "/slave/v1/connect", headers=AUTH, timeout=5,
                               json={"worker_id": "collector-1", "config": config})
        assert answer.status_code == 400, answer.text
        message = answer.json()["error"]["message"]
        assert f"{key} must be a dict" in message, message
        assert slave.worker_id is None and not slave.connected.is_set()
    finally:
        slave.close()
