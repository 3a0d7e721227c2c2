"""Operating a cluster whose roles run as separate processes (the docker-compose way)."""

import json
import re
import signal

import pytest
import requests

from parallel_rl.storage import SharedStorage
from tests.support import eventually, free_port
from tests.test_cluster import TOY_CONFIG

TOKEN = "ops-token"
ENV = {"PARALLEL_RL_TOKEN": TOKEN}


@pytest.fixture
def cluster(cli, tmp_path):
    """A coordinator process on the toy env (unreachable stop value) and helpers to add roles."""
    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    shared = str(tmp_path / "shared")
    coordinator = cli(
        "coordinator",
        "coordinator",
        "-c",
        str(config),
        "--port",
        "0",
        "--shared-dir",
        shared,
        "--set",
        "env.stop_value=1000",
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        env=ENV,
    )
    url = coordinator.wait_line(r"^REST API: (http://127\.0\.0\.1:\d+)/api/v1$").group(1)

    class Cluster:
        api = url + "/api/v1"

        def start(self, role, name, *extra):
            p = cli(name, role, "--coordinator", url, "--shared-dir", shared, *extra, env=ENV)
            return p

        def get(self, path):
            return requests.get(self.api + path, timeout=5).json()

    c = Cluster()
    c.coordinator, c.url, c.coordinator_shared = coordinator, url, shared
    return c


def workers(cluster, kind, state=None):
    return [w for w in cluster.get(f"/{kind}s")[f"{kind}s"] if state is None or w["state"] == state]


def test_the_coordinator_puts_its_start_up_objects_out_of_the_garbage_collectors_way(cluster):
    """A full collection walks every tracked object holding the GIL: start-up's (~60k in the coordinator) are
    frozen once it serves, so that those pauses (up to ~200 ms with 256 collectors calling) shrink."""
    frozen = cluster.coordinator.wait_line(r"(\d+) start-up objects frozen out of the garbage collector's way")
    assert int(frozen.group(1)) > 10_000


def test_new_learner_resumes_from_the_latest_checkpoint(cluster):
    cluster.start("collector", "collector-a")
    learner = cluster.start("learner", "learner-a")
    eventually(lambda: cluster.get("/cluster")["train_iter"] >= 60, timeout=60, message="learner trained 60 iters")
    learner.proc.send_signal(signal.SIGKILL)
    learner.wait(10)
    failed = eventually(
        lambda: cluster.get("/tasks?kind=learner&state=failed")["tasks"],
        timeout=15,
        message="learner task failed after the TTL",
    )
    assert "learner-1 lost" in failed[0]["error"]
    assert workers(cluster, "learner")[0]["state"] == "lost"
    # ask the storage module, as the new learner will (a learner killed mid-write can leave a .tmp- file)
    saved = SharedStorage(cluster.coordinator_shared).learner_states.latest()
    assert saved is not None
    buffer_before = cluster.get("/buffers")["buffers"][0]["size"]
    cluster.start("learner", "learner-b")
    resumed = eventually(
        lambda: [t for t in cluster.get("/tasks?kind=learner&state=running")["tasks"]],
        timeout=60,
        message="a new learner task",
    )[0]
    assert resumed["spec"] == {"resume": True} and resumed["replaces"] == failed[0]["task_id"]
    assert resumed["worker_id"] == "learner-2"
    # the new learner starts from the saved iteration (its optimizer state included), not from 0
    assert eventually(lambda: resumed_iter(cluster, resumed["task_id"]), timeout=30) >= saved
    assert cluster.get("/buffers")["buffers"][0]["size"] >= buffer_before  # the buffer survived


def resumed_iter(cluster, task_id):
    return cluster.get(f"/tasks/{task_id}")["progress"].get("train_iter")


def test_sigterm_collector_hands_back_its_task_and_deregisters(cluster):
    collector = cluster.start("collector", "collector-a")
    cluster.start("learner", "learner-a")
    busy = eventually(lambda: workers(cluster, "collector", "busy"), timeout=60, message="busy collector")[0]
    task_id = busy["current_task"]
    eventually(lambda: cluster.get("/buffers")["buffers"][0]["pushed"] > 0, timeout=30, message="data pushed")
    collector.proc.send_signal(signal.SIGTERM)
    assert collector.wait(20) == 0
    assert workers(cluster, "collector")[0]["state"] == "gone"
    task = cluster.get(f"/tasks/{task_id}")
    assert task["state"] in ("cancelled", "finished")
    assert cluster.get("/buffers")["buffers"][0]["size"] > 0  # what it wrote stays
    assert re.search(r"deregistered", collector.output())


def test_collector_back_at_the_same_address_registers_again(cluster):
    port = str(free_port())
    first = cluster.start("collector", "collector-a", "--port", port)
    eventually(lambda: workers(cluster, "collector", "busy"), timeout=60, message="busy collector")
    first.proc.send_signal(signal.SIGKILL)
    first.wait(10)
    eventually(lambda: workers(cluster, "collector", "lost"), timeout=15, message="collector lost")
    second = cluster.start("collector", "collector-b", "--port", port)
    again = eventually(lambda: workers(cluster, "collector", "busy"), timeout=60, message="busy again")[0]
    assert again["worker_id"] == "collector-2" and again["address"].endswith(":" + port)
    assert second.proc.poll() is None


def test_people_cli_add_remove_and_inspect(cluster, cli, tmp_path):
    cluster.start("learner", "learner-a")
    # a collector started without --coordinator waits to be added
    lone = cli("lone", "collector", "--port", "0", "--shared-dir", str(tmp_path / "shared"), env=ENV)
    address = lone.wait_line(r"^collector: serving on (http://\S+)$").group(1)
    people = {"PARALLEL_RL_COORDINATOR": cluster.url, **ENV}

    def run(name, *args):
        p = cli(name, *args, env=people)
        assert p.wait(30) == 0, p.output()
        return p.output()

    # client options go before or after the sub-command; --json for machines, tables for people
    added = json.loads(run("add", "--json", "collectors", "add", address))
    assert added["worker_id"] == "collector-1" and added["address"] == address
    eventually(lambda: workers(cluster, "collector", "busy"), timeout=30, message="added collector gets a task")
    first = cluster.get("/tasks?kind=collector")["tasks"][0]
    assert first["started_at"] - added["registered_at"] < 2.0  # a new collector gets work within 2 s
    table = run("list", "collectors")
    assert re.search(r"^WORKER_ID\s+ADDRESS\s+STATE", table, re.M)
    assert re.search(rf"^collector-1\s+{re.escape(address)}\s+busy", table, re.M)
    status = run("status", "status")
    assert re.search(r"^\s+state: running$", status, re.M)
    assert re.search(r"^\s+started_at: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", status, re.M), status
    assert re.search(r"^\s+uptime: (\d+m )?\d+s$", status, re.M), status
    tasks = run("tasks", "tasks", "--kind", "collector")
    assert re.search(r"^collector-[0-9a-f]{6}-\d{6}\s+collector\s+running\s+collector-1", tasks, re.M)
    removed = run("remove", "collectors", "remove", "collector-1", "--coordinator", cluster.url)
    assert re.search(rf"^collector-1\s+{re.escape(address)}\s+(leaving|gone)", removed, re.M), removed
    eventually(lambda: workers(cluster, "collector")[0]["state"] == "gone", timeout=20, message="removed")
    count = len(cluster.get("/tasks?kind=collector")["tasks"])
    assert lone.proc.poll() is None  # started without --coordinator: it stays up, waiting to be added again
    assert len(cluster.get("/tasks?kind=collector")["tasks"]) == count  # no new task reached it
    bad = cli("bad", "collectors", "remove", "collector-9", env=people)
    assert bad.wait(30) == 2 and "no collector 'collector-9'" in bad.output()  # bad input, as `runs` (was 1)
    assert len(bad.output().strip().splitlines()) == 1, bad.output()
    down = cli("down", "status", "--coordinator", "http://127.0.0.1:9", env=people)  # nothing listens there
    assert down.wait(60) == 2 and len(down.output().strip().splitlines()) == 1, down.output()


def test_role_processes_solve_and_all_exit_zero(cli, tmp_path):
    """The docker-compose flow to the end: the coordinator exits 0 when solved and lets every worker go."""
    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    shared = str(tmp_path / "shared")
    port = str(free_port())
    url = f"http://127.0.0.1:{port}"
    # workers first: they wait for the coordinator (as compose replicas may), so every one of them joins
    # before the run can be solved
    workers_ = [
        cli(f"{role}-{i}", role, "--coordinator", url, "--shared-dir", shared, env=ENV)
        for i, role in enumerate(("learner", "collector", "collector"))
    ]
    for worker in workers_:
        worker.wait_line(r"serving on http://")
    coordinator = cli(
        "coordinator",
        "coordinator",
        "-c",
        str(config),
        "--port",
        port,
        "--shared-dir",
        shared,
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "parallel.commander.eval_freq=200",
        env=ENV,
    )
    assert coordinator.wait(120) == 0, coordinator.output()[-2000:]
    assert re.search(r"^coordinator: solved: eval return", coordinator.output(), re.M)
    assert len(re.findall(r"registered (learner|collector)-\d", coordinator.output())) == 3
    for worker in workers_:
        assert worker.wait(30) == 0, worker.output()[-2000:]
        assert "coordinator let us go" in worker.output()


def test_lingering_coordinator_serves_after_the_run(cli, tmp_path):
    """`coordinator --linger` (the compose default): when solved it lets the workers go (they exit 0) and keeps
    serving the REST API, /metrics and the dashboard until SIGTERM; then it exits with the run's outcome."""
    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    shared = str(tmp_path / "shared")
    coordinator = cli(
        "coordinator",
        "coordinator",
        "-c",
        str(config),
        "--port",
        "0",
        "--shared-dir",
        shared,
        "--linger",
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "parallel.coordinator.heartbeat_ttl=10",
        env=ENV,
    )  # no lease lost on a busy machine
    url = coordinator.wait_line(r"^REST API: (http://127\.0\.0\.1:\d+)/api/v1$").group(1)
    workers_ = [
        cli(f"{role}-{i}", role, "--coordinator", url, "--shared-dir", shared, env=ENV)
        for i, role in enumerate(("learner", "collector"))
    ]
    coordinator.wait_line(r"^coordinator: --linger: workers let go; still serving", timeout=120)
    for worker in workers_:
        assert worker.wait(30) == 0, worker.output()[-2000:]
        assert "coordinator let us go" in worker.output()
    summary = requests.get(f"{url}/api/v1/cluster", timeout=5).json()
    assert summary["state"] == "solved" and summary["best_eval_return"] >= summary["stop_value"]
    for kind in ("learner", "collector"):
        assert [w["state"] for w in requests.get(f"{url}/api/v1/{kind}s", timeout=5).json()[f"{kind}s"]] == ["gone"]
    assert requests.get(f"{url}/api/v1/tasks?kind=evaluator&state=finished", timeout=5).json()["total"] >= 1
    assert requests.get(f"{url}/api/v1/tasks?state=running", timeout=5).json()["total"] == 0  # every end reported
    metrics = requests.get(f"{url}/metrics", timeout=5)
    assert metrics.status_code == 200 and "parallel_rl_train_iterations_total" in metrics.text
    dashboard = requests.get(f"{url}/", timeout=5)
    assert dashboard.status_code == 200 and "text/html" in dashboard.headers["Content-Type"]
    # a collector that joins after the end (a compose replica started late) is let go at once
    late = cli("collector-late", "collector", "--coordinator", url, "--shared-dir", shared, env=ENV)
    assert late.wait(60) == 0, late.output()[-2000:]
    assert "coordinator let us go" in late.output()
    assert coordinator.proc.poll() is None  # still serving
    coordinator.proc.send_signal(signal.SIGTERM)
    assert coordinator.wait(30) == 0, coordinator.output()[-2000:]
    assert re.search(r"^coordinator: stopped by SIGTERM \(the run ended solved\)$", coordinator.output(), re.M)


def test_max_tasks_ends_a_worker(cluster):
    collector = cluster.start("collector", "collector-once", "--max-tasks", "1")
    cluster.start("learner", "learner-a")
    assert collector.wait(60) == 0, collector.output()[-2000:]
    assert "done 1 task(s), exiting" in collector.output()
    eventually(lambda: workers(cluster, "collector")[0]["state"] == "gone", timeout=10, message="deregistered")
