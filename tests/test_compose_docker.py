"""docker-compose.yml under a real Docker engine: the image is built and every role runs in a container.

What tests/test_compose.py simulates with local processes, done for real: `docker compose up --build`
with the repository's file, inspected from the host through the coordinator's port published on
127.0.0.1 only; collectors scaled up register themselves, a stopped one deregisters with nothing lost;
a learner killed as a crash kills it (SIGKILL from outside the engine, like the OOM killer) is restarted
by its restart policy and training still reaches the stop value; the coordinator (--linger) keeps
serving after the end; `docker compose down -v` leaves nothing behind.

Needs a Docker engine with Compose v2 and the base image: `.ci/docker.sh` (run by `make test`) installs
what is missing when root with apt-get; otherwise the test fails saying what to install.
The learner joins after the collector operations (`--scale learner=0` first), so that they happen
while the run is young: CartPole is solved within a few hundred updates.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests

from tests.support import eventually

# cold (engine, base image and torch layer to make) it takes minutes on 2 cores; warm, a few
pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parent.parent
DOCKER_SH = ROOT / ".ci" / "docker.sh"
BUILD_INPUTS = ROOT / ".docker-build"  # staged per run, ignored by git, removed at the end
TORCH_WHEEL_GLOB = "torch-2.13.0*.whl"


def sh(*args: str, timeout: float, env: dict | None = None, check: bool = True) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc.stdout


def docker_ready() -> None:
    """Engine, Compose v2 and the base image, installed by .ci/docker.sh when missing (a no-op when present)."""
    if shutil.which("docker") is None and os.geteuid() != 0:
        pytest.fail(
            "the compose test needs Docker: install Docker Engine and the Compose v2 plugin "
            "(Debian: apt-get install docker.io, then .ci/docker.sh compose), or run `make test` as root"
        )
    proc = subprocess.run([str(DOCKER_SH), "all"], capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        pytest.fail(
            f"the compose test needs a Docker engine with Compose v2 and python:3.11-slim; "
            f".ci/docker.sh could not provide them:\n{proc.stderr[-2000:]}"
        )


def stage_build_inputs() -> dict:
    """Build arguments for this machine: torch from a local wheelhouse when pip has one (PIP_FIND_LINKS),
    and the machine's CA bundle (TLS proxies); both staged into the build context, never committed."""
    BUILD_INPUTS.mkdir(exist_ok=True)
    args = {}
    cafile = ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"
    if os.path.exists(cafile):
        shutil.copyfile(cafile, BUILD_INPUTS / "ca.pem")
        args["EXTRA_CA_CERTS"] = ".docker-build/ca.pem"
    for links in os.environ.get("PIP_FIND_LINKS", "").split():
        wheels = sorted(Path(links).glob(TORCH_WHEEL_GLOB)) if os.path.isdir(links) else []
        if wheels:
            (BUILD_INPUTS / "wheels").mkdir(exist_ok=True)
            target = BUILD_INPUTS / "wheels" / wheels[-1].name
            if not target.exists():
                try:
                    os.link(wheels[-1], target)  # no copy of 190 MB when on the same filesystem
                except OSError:
                    shutil.copyfile(wheels[-1], target)
            args["TORCH_WHEELHOUSE"] = ".docker-build/wheels"
            break
    return args


class Project:
    """One compose project (a unique name per run) driven through the repository's docker-compose.yml."""

    def __init__(self, build_args: dict):
        self.name = f"prl-test-{uuid.uuid4().hex[:8]}"
        self.env = {**os.environ, **build_args, "PARALLEL_RL_TOKEN": uuid.uuid4().hex, "PARALLEL_RL_PORT": "0"}
        self.env.pop("PARALLEL_RL_CONFIG", None)

    def compose(self, *args: str, timeout: float = 120) -> str:
        return sh(
            "docker",
            "compose",
            "-p",
            self.name,
            "-f",
            str(ROOT / "docker-compose.yml"),
            *args,
            timeout=timeout,
            env=self.env,
        )

    def containers(self, service: str | None = None, all_: bool = True) -> list:
        label = f"label=com.docker.compose.project={self.name}"
        args = ["docker", "ps", "-q", "--filter", label] + (["-a"] if all_ else [])
        if service:
            args += ["--filter", f"label=com.docker.compose.service={service}"]
        ids = sh(*args, timeout=30).split()
        return json.loads(sh("docker", "inspect", *ids, timeout=30)) if ids else []

    def leftovers(self) -> dict:
        label = f"label=com.docker.compose.project={self.name}"
        return {
            kind: sh("docker", kind, "ls", "-q", "--filter", label, timeout=30).split()
            for kind in ("container", "network", "volume")
        }


def address(container: dict) -> str:
    (net,) = container["NetworkSettings"]["Networks"].values()
    return f"http://{net['IPAddress']}:9000"


def test_compose_cluster_in_docker():
    docker_ready()
    project = Project(stage_build_inputs())
    try:
        run_cluster(project)
    finally:
        try:
            project.compose("down", "-v", "--remove-orphans", "--timeout", "10", timeout=120)
        finally:
            shutil.rmtree(BUILD_INPUTS, ignore_errors=True)
    assert project.leftovers() == {"container": [], "network": [], "volume": []}


def run_cluster(project: Project) -> None:
    t0 = time.monotonic()
    project.compose("up", "--build", "-d", "--scale", "collector=3", "--scale", "learner=0", timeout=1200)
    print(f"compose test: up --build took {time.monotonic() - t0:.0f} s")
    # the coordinator's port is published on 127.0.0.1 only, and nothing else is published
    host, port = project.compose("port", "coordinator", "8000").strip().rsplit(":", 1)
    assert host == "127.0.0.1"
    api = f"http://127.0.0.1:{port}/api/v1"

    def get(path: str) -> dict:
        return requests.get(api + path, timeout=5).json()

    def busy(kind: str) -> list:
        return [w for w in get(f"/{kind}s")[f"{kind}s"] if w["state"] == "busy"]

    eventually(lambda: len(busy("collector")) == 3, timeout=120, interval=0.2, message="3 collectors busy")
    assert get("/cluster")["state"] == "running"
    assert get("/tasks?kind=collector&state=running")["total"] == 3
    # containers talk on the project's own bridge network only
    (network,) = json.loads(sh("docker", "network", "inspect", f"{project.name}_default", timeout=30))
    assert network["Driver"] == "bridge" and network["Labels"]["com.docker.compose.project"] == project.name
    containers = project.containers()
    assert len(containers) == 4
    for c in containers:
        assert set(c["NetworkSettings"]["Networks"]) == {network["Name"]}, c["Name"]
        published = {p: b for p, b in (c["NetworkSettings"]["Ports"] or {}).items() if b}
        if c["Config"]["Labels"]["com.docker.compose.service"] == "coordinator":
            assert [b["HostIp"] for b in published["8000/tcp"]] == ["127.0.0.1"]
        else:
            assert published == {}, c["Name"]
    assert {w["address"] for w in busy("collector")} == {address(c) for c in project.containers("collector")}

    # --scale collector=5: two more register themselves
    project.compose("up", "-d", "--scale", "collector=5", "--scale", "learner=0", timeout=300)
    eventually(lambda: len(busy("collector")) == 5, timeout=120, interval=0.2, message="5 collectors busy")

    # one collector stopped (SIGTERM, as `docker compose stop` sends) deregisters; nothing it collected is lost
    victim = next(c for c in project.containers("collector") if c["Name"].endswith("-collector-5"))
    victim_address = address(victim)
    sh("docker", "stop", "--time", "30", victim["Id"], timeout=60)
    (stopped,) = json.loads(sh("docker", "inspect", victim["Id"], timeout=30))
    assert stopped["State"]["ExitCode"] == 0, stopped["State"]
    (gone,) = [w for w in get("/collectors")["collectors"] if w["address"] == victim_address]
    assert gone["state"] == "gone"
    tasks = [t for t in get("/tasks?kind=collector&limit=1000")["tasks"] if t["worker_id"] == gone["worker_id"]]
    assert tasks and all(t["state"] in ("finished", "cancelled") for t in tasks)
    assert sum(t["progress"].get("env_steps", 0) for t in tasks) == gone["env_steps"]  # every chunk accounted
    assert len(busy("collector")) == 4

    # the learner joins; a crash (SIGKILL from outside the engine) is survived by its restart policy
    project.compose("up", "-d", "learner", timeout=300)
    eventually(lambda: busy("learner"), timeout=120, interval=0.1, message="learner busy")
    (learner,) = project.containers("learner")
    os.kill(learner["State"]["Pid"], signal.SIGKILL)

    def restarted():
        (c,) = project.containers("learner")
        return c["RestartCount"] >= 1 and c["State"]["Running"] and c

    eventually(restarted, timeout=60, interval=0.2, message="learner container restarted")

    def ended():
        summary = get("/cluster")
        return summary["state"] != "running" and summary

    solved = eventually(ended, timeout=300, interval=0.5, message="training ended")
    assert solved["state"] == "solved", solved
    assert solved["best_eval_return"] >= solved["stop_value"]
    learner_tasks = get("/tasks?kind=learner")["tasks"]
    assert len(learner_tasks) >= 2 and "failed" in [t["state"] for t in learner_tasks]  # the crashed one, replaced
    print(f"compose test: solved after {time.monotonic() - t0:.0f} s; train_iter {solved['train_iter']}")

    # the coordinator serves on (--linger); the workers were let go and exit 0
    def workers_exited():
        workers = [
            c for c in project.containers() if c["Config"]["Labels"]["com.docker.compose.service"] != "coordinator"
        ]
        return all(not c["State"]["Running"] for c in workers) and workers

    for c in eventually(workers_exited, timeout=60, interval=0.5, message="workers exited"):
        assert c["State"]["ExitCode"] == 0, (c["Name"], c["State"])
    (coordinator,) = project.containers("coordinator")
    assert coordinator["State"]["Running"]
    assert requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200
    assert get("/cluster")["state"] == "solved"
    assert get("/tasks?state=running")["total"] == 0
