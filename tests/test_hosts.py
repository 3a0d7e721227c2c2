"""Roles on separate network hosts (issue 43 items 2 and 5): each role in a Linux network namespace of its own, with
an address of its own on a private bridge (tests/support/hosts.py), PID 1 of a PID namespace of its own and a TMPDIR
of its own; the hosts share only the data directory. The test process itself cannot reach the hosts: every REST
call is made from another host, as a user on another machine makes it.

What Kubernetes (deploy/k8s, checked offline by tests/test_k8s.py) assumes and these tests now check with real
hosts: the coordinator serves on the address it binds and is reached by that address (the `coordinator` Service
name stands for it), workers register themselves (`--coordinator`) and the coordinator calls them back at the
address they advertise (`--advertise http://$(POD_IP):9000`), a worker advertising a loopback address is refused
with an error that says so, and every role answers its health endpoint (the readiness probes) across hosts."""

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.support import eventually
from tests.support.hosts import ENV, TOKEN, start_coordinator, start_roles, start_worker
from tests.test_cluster import TOY_CONFIG

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def toy_config(tmp_path):
    path = tmp_path / "toy.py"
    path.write_text(TOY_CONFIG)
    return str(path)


def test_a_host_reaches_another_by_its_address_and_iptables_cuts_it_off(network, tmp_path, toy_config):
    """The harness: a coordinator bound to host A's address answers host B; an iptables rule inside A (the
    partition tests' tool) then drops B's packets, and B's request fails."""
    if shutil.which("iptables") is None:
        pytest.skip("no iptables: apt-get install iptables (make netns)")
    a, b = network.host("a"), network.host("b")
    assert a.address != b.address
    _, url = start_coordinator(a, toy_config, tmp_path / "shared", tmp_path, "--set", "env.stop_value=1000")
    assert b.get_json(f"{url}/api/v1/health") == {"status": "ok"}
    a.run(["iptables", "-A", "INPUT", "-s", b.address, "-j", "DROP"])
    with pytest.raises(AssertionError, match="timed out"):
        b.get_json(f"{url}/api/v1/health", timeout=1.0)


def test_roles_on_four_hosts_train_to_the_stop_value_and_answer_rest_from_a_fifth(network, tmp_path, toy_config):
    """The toy run on four hosts reaches its stop value; host E then finds every worker by its own host's address
    over REST, each collector task done by one of the two collectors, and `parallel-rl status` from E answers.
    Both collectors (PID 1 each, one host name) log their evaluations to tensorboard/evaluator in files of their
    own (they wrote one file, each truncating the other's)."""
    a, b, c, d, e = (network.host(name) for name in "abcde")
    shared = tmp_path / "shared"
    coordinator, url = start_coordinator(a, toy_config, shared, tmp_path, "--linger")
    for host in (c, d):
        start_worker(host, "collector", url, shared, name=f"collector-{host.name}")
    # the learner last, once both collectors registered: the toy run can solve before a slow collector's registration,
    # which a run that is over lets go at once
    eventually(
        lambda: len(e.get_json(f"{url}/api/v1/collectors")["collectors"]) == 2,
        timeout=60 + 30,  # a worker retries its first registration for 60 s
        interval=0.5,
        message="both collectors registered",
    )
    start_worker(b, "learner", url, shared, name="learner")
    coordinator.wait_line(r"^coordinator: solved", timeout=90 + 60)  # the toy config's budget (max_seconds) and more
    workers = e.get_json(f"{url}/api/v1/workers")["workers"]
    assert {w["pid"] for w in workers} == {1}, workers  # each PID 1 of a PID namespace of its own
    addresses = {w["kind"]: set() for w in workers}
    for w in workers:
        addresses[w["kind"]].add(re.sub(r":\d+$", "", w["address"]))
    assert addresses == {
        "learner": {f"http://{b.address}"},
        "collector": {f"http://{c.address}", f"http://{d.address}"},
    }, workers
    # the toy run may solve before the second collector's first task: each task was done by one of the two
    finished = e.get_json(f"{url}/api/v1/tasks?kind=collector")["tasks"]
    assert finished and {t["worker_id"] for t in finished} <= {
        w["worker_id"] for w in workers if w["kind"] == "collector"
    }
    status = e.run([sys.executable, "-m", "parallel_rl", "status", "--coordinator", url, "--json"])
    assert json.loads(status.stdout)["state"] == "solved", status.stdout
    coordinator.stop()
    assert coordinator.proc.returncode == 0, coordinator.output()[-3000:]
    # one event file per collector (both registered, above): two that open their loggers in one second wrote one
    assert len(list((tmp_path / "shared" / "tensorboard" / "evaluator").glob("events.out.tfevents.*"))) == 2


@pytest.mark.slow
@pytest.mark.long  # make test-long: the toy run on four hosts (above) takes the same path in make test
def test_cartpole_solves_with_every_role_on_its_own_host(network, tmp_path):
    """configs/cartpole_dqn_parallel.py on four hosts reaches its stop value (195) within its budget."""
    config = str(REPO / "configs" / "cartpole_dqn_parallel.py")
    _, coordinator, url = start_roles(network, config, tmp_path)
    coordinator.wait_line(r"^coordinator: solved: eval return \d+\.\d >= stop value 195", timeout=300 + 60)


def test_a_collector_bound_to_all_interfaces_advertises_its_address_on_the_route_to_the_coordinator(
    network, tmp_path, toy_config
):
    """`collector --host 0.0.0.0` without --advertise (a container's or a pod's way) advertised its host name's
    address, a loopback one on this machine (and on Debian's 127.0.1.1), and the coordinator on another host
    could not reach it ("cannot reach a collector at http://127.0.0.1:9000"): it advertises the address of its
    interface on the route to the coordinator."""
    a, c, e = network.host("a"), network.host("c"), network.host("e")
    coordinator, url = start_coordinator(a, toy_config, tmp_path / "shared", tmp_path, "--set", "env.stop_value=1000")
    collector = c.cli(
        "collector",
        "collector",
        "--coordinator",
        url,
        "--host",
        "0.0.0.0",
        "--port",
        "9000",
        "--shared-dir",
        str(tmp_path / "shared"),
        env=ENV,
    )
    collector.wait_line(rf"^collector: serving on {re.escape(c.url(9000))}$")

    def busy():
        if collector.proc.poll() is not None:
            raise AssertionError(f"the collector exited:\n{collector.output()[-2000:]}")
        return [w for w in e.get_json(f"{url}/api/v1/collectors")["collectors"] if w["state"] == "busy"]

    (worker,) = eventually(busy, timeout=60, interval=0.5, message="the collector registered and collecting")
    assert worker["address"] == c.url(9000)


def test_a_collector_advertising_loopback_from_another_host_is_told_why_it_cannot_be_reached(
    network, tmp_path, toy_config
):
    """A collector on C started without --host (it binds and advertises 127.0.0.1) registers with a coordinator on
    A: A cannot reach C's loopback. The collector exits with the coordinator's one-line error, which now says that
    its address is a loopback one seen from another host and how to fix it (it only said "cannot reach")."""
    a, c = network.host("a"), network.host("c")
    _, url = start_coordinator(a, toy_config, tmp_path / "shared", tmp_path, "--set", "env.stop_value=1000")
    collector = c.cli("collector", "collector", "--coordinator", url, "--shared-dir", str(tmp_path / "shared"), env=ENV)
    advertised = collector.wait_line(r"^collector: serving on (http://127\.0\.0\.1:\d+)$").group(1)
    code = collector.wait(timeout=60)  # the coordinator's probe (request_timeout, 5 s) and the collector's retries
    assert code == 1, collector.output()[-2000:]
    (line,) = [x for x in collector.output().splitlines() if x.startswith("parallel-rl collector: error")]
    assert f"{advertised} is a loopback address" in line and f"came from {c.address}" in line, line
    assert "--advertise http://ADDRESS:PORT" in line, line


def pod(deployment: dict, host, config: str, shared, tmp_path):
    """The argv, environment and working directory of ``deployment``'s container as Kubernetes would start it on
    ``host``: ``$(VAR)`` expanded, POD_IP the host's address, the token Secret ours, the image's /app/configs file
    ``config``, the /shared volume ``shared``, the /work volume a directory of the pod's own."""
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {}
    for var in c["env"]:
        source = var.get("valueFrom", {})
        env[var["name"]] = (
            var["value"]
            if "value" in var
            else host.address
            if "fieldRef" in source and source["fieldRef"]["fieldPath"] == "status.podIP"
            else TOKEN
        )
    env["PARALLEL_RL_CONFIG"] = config
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg) for arg in c["args"]]
    args = [str(shared) if arg == "/shared" else arg for arg in args]
    assert c["command"] == ["parallel-rl"]
    work = tmp_path / "pods" / host.name
    work.mkdir(parents=True)
    return args, env, work


def test_the_kubernetes_manifests_commands_work_across_hosts(network, tmp_path):
    """Item 5: the commands, environment and probes deploy/k8s renders (tests/test_k8s.py checks them offline) run
    on separate hosts: every role binds 0.0.0.0; the coordinator advertises the Service name `coordinator` (here a
    name in every host's /etc/hosts), which the workers' PARALLEL_RL_COORDINATOR uses; the workers advertise
    http://$(POD_IP):9000. Each role answers its readiness probe's path at its pod address from another host,
    the workers register themselves and take tasks, and the learner trains on what the collectors wrote."""
    from tests.test_k8s import by_kind, render

    try:
        deployments = by_kind(render("overlays/shared-volume"), "Deployment")
    except AssertionError as exc:  # no kubectl: `make test` installs it (make kubectl)
        pytest.skip(f"cannot render deploy/k8s: {str(exc).splitlines()[0]}")
    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG.replace("stop_value=4.0", "stop_value=1000.0"))  # runs until the test is done
    shared = tmp_path / "shared"
    a, b, c, d, e = (network.host(name) for name in "abcde")
    network.name("coordinator", a)  # the Service
    pods = {a: "coordinator", b: "learner", c: "collector", d: "collector"}
    for host, role in pods.items():
        args, env, work = pod(deployments[role], host, str(config), shared, tmp_path)
        host.cli(f"{role}-{host.name}", *args, env=env, cwd=work)
    (port,) = [
        p["containerPort"] for p in deployments["coordinator"]["spec"]["template"]["spec"]["containers"][0]["ports"]
    ]
    url = f"http://coordinator:{port}"

    def probe(host, role):
        """The readiness probe of ``role``'s pod on ``host``, as the kubelet makes it (pod address, named port)."""
        (container,) = deployments[role]["spec"]["template"]["spec"]["containers"]
        (http,) = [
            p["containerPort"]
            for p in container["ports"]
            if p["name"] == container["readinessProbe"]["httpGet"]["port"]
        ]
        try:
            return (
                e.get_json(
                    f"http://{host.address}:{http}{container['readinessProbe']['httpGet']['path']}", timeout=3.0
                )["status"]
                == "ok"
            )
        except AssertionError:  # not serving yet
            return False

    for host, role in pods.items():
        eventually(lambda: probe(host, role), timeout=120, interval=0.5, message=f"{role} on {host.name} ready")

    def working():
        workers = e.get_json(f"{url}/api/v1/workers")["workers"]
        learners = [w for w in workers if w["kind"] == "learner" and w["state"] == "busy"]
        collectors = {w["address"] for w in workers if w["kind"] == "collector" and w["state"] == "busy"}
        return (
            collectors == {c.url(9000), d.url(9000)}
            and learners
            and learners[0]["address"] == b.url(9000)
            and learners[0]["train_iter"] > 0
        )

    eventually(working, timeout=120, interval=0.5, message="collectors collecting and the learner training")


def test_a_coordinator_bound_to_all_interfaces_tells_a_collector_added_by_url_its_address_on_the_route(
    network, tmp_path, toy_config
):
    """`coordinator --host 0.0.0.0` without --advertise told the workers it connects (a collector started without
    --coordinator, added by `parallel-rl collectors add URL` from another host) to reach it at
    http://127.0.0.1:PORT, its own loopback: the collector's heartbeats and chunk announcements went nowhere.
    It tells each one its address on the route to that worker, and the collector's chunks reach the buffer."""
    a, c, e = network.host("a"), network.host("c"), network.host("e")
    coordinator = a.cli(
        "coordinator",
        "coordinator",
        "-c",
        toy_config,
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--shared-dir",
        str(tmp_path / "shared"),
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "env.stop_value=1000",
        "--set",
        "parallel.commander.max_env_steps_per_update=0",
        env=ENV,
    )
    coordinator.wait_line(r"^REST API: ", timeout=120)
    url = a.url(8000)
    collector = c.cli(
        "collector",
        "collector",
        "--host",
        c.address,
        "--port",
        "9000",
        "--shared-dir",
        str(tmp_path / "shared"),
        env=ENV,
    )
    collector.wait_line(r"waiting to be added", timeout=120)
    e.run([sys.executable, "-m", "parallel_rl", "collectors", "add", c.url(9000), "--coordinator", url], env=ENV)
    collector.wait_line(rf"connected as collector-\d+ to {re.escape(url)}$", timeout=60)
    eventually(
        lambda: e.get_json(f"{url}/api/v1/buffers")["buffers"][0]["chunks"] > 0,
        timeout=60,
        interval=0.5,
        message="the added collector's chunks indexed",
    )
