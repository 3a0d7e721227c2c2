"""docker-compose.yml and the Dockerfile, tested without a Docker engine (tests/test_compose_docker.py
runs them under a real one).

1. Structure: parse both files and check what `docker compose up --scale collector=N` relies on.
2. Equivalence: start each service's command with its environment as a local process (service
   host names mapped to 127.0.0.1, ports remapped, the volume a temp dir) and check that the
   cluster forms, trains, and that stopping a collector deregisters it.
"""

import re
import signal

import pytest
import requests
import yaml

from tests.support import eventually, free_port

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_structure(compose):
    services = compose["services"]
    assert set(services) == {"coordinator", "learner", "collector"}
    assert "shared" in compose["volumes"]
    for name, svc in services.items():
        assert svc["image"] == "parallel-rl:latest"
        # one service builds the image (three would build it three times in parallel), the others run it
        assert ("build" in svc) == (name == "coordinator")
        assert "shared:/shared" in svc["volumes"], name
        command = svc["command"]
        assert command[0] == name
        assert command[command.index("--shared-dir") + 1] == "/shared"
        assert command[command.index("--host") + 1] == "0.0.0.0"
        env = svc["environment"]
        assert env["PARALLEL_RL_TOKEN"].startswith("${PARALLEL_RL_TOKEN:?")  # required, never baked in
        assert "PARALLEL_RL_CONFIG" in env
        assert env["PARALLEL_RL_COORDINATOR"] == "http://coordinator:8000"
        assert "healthcheck" in svc and int(svc["stop_grace_period"].rstrip("s")) >= 10
    coordinator = services["coordinator"]
    assert coordinator["build"]["context"] == "."
    assert set(coordinator["build"]["args"]) == {"TORCH_WHEELHOUSE", "EXTRA_CA_CERTS"}  # from the environment
    assert coordinator["ports"] == ["127.0.0.1:${PARALLEL_RL_PORT:-8000}:8000"]  # published on this host only
    assert "--linger" in coordinator["command"]  # REST, /metrics and the dashboard outlive the run
    assert services["learner"]["restart"] == "on-failure"  # a crashed learner comes back and resumes
    assert "/api/v1/health" in " ".join(coordinator["healthcheck"]["test"])
    for name in ("learner", "collector"):
        assert services[name]["depends_on"]["coordinator"]["condition"] == "service_healthy"
        assert "/slave/v1/health" in " ".join(services[name]["healthcheck"]["test"])
    collector = services["collector"]
    assert "container_name" not in collector and "ports" not in collector  # --scale collector=N works
    assert "--advertise" not in collector["command"]  # each replica advertises its own address


def test_dockerfile():
    text = (ROOT / "Dockerfile").read_text()
    # build (torch, dependencies), project and venv (from build), runtime on a clean base
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["python:3.11-slim", "build", "build", "python:3.11-slim"]
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in text
    torch_lines = [line for line in text.splitlines() if "torch" in line and "pip install" in line]
    assert len(torch_lines) == 2  # from the CPU index by default, from TORCH_WHEELHOUSE when given
    assert all("-c constraints.txt" in line and "torch==2.13.0" in line for line in torch_lines)
    assert any('--index-url "$TORCH_INDEX_URL"' in line for line in torch_lines)
    assert re.search(r"^USER (?!root)\w+$", text, re.M)
    assert re.search(r'^ENTRYPOINT \["parallel-rl"\]$', text, re.M)
    assert all("-c constraints.txt" in line for line in text.splitlines() if "pip install" in line)
    assert "torch==2.13.0" in (ROOT / "constraints.txt").read_text()


def interpolate(value: str, env: dict) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error}."""

    def sub(m):
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        if op == ":-":
            return arg
        raise AssertionError(f"${{{name}}} is required: {arg}")

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", sub, value)


def local_command(svc: dict, port_map: dict, shared: str) -> list:
    """The service's command as a local process would run it."""
    out = []
    for arg in svc["command"]:
        arg = arg.replace("0.0.0.0", "127.0.0.1").replace("http://coordinator:8000", port_map["url"])
        arg = port_map.get(arg, arg) if out and out[-1] == "--port" else arg
        out.append(shared if arg == "/shared" else arg)
    return out


def test_services_run_as_local_processes(compose, cli, tmp_path):
    coordinator_port = str(free_port())
    port_map = {"8000": coordinator_port, "9000": "0", "url": f"http://127.0.0.1:{coordinator_port}"}
    shared = str(tmp_path / "shared")
    host_env = {"PARALLEL_RL_TOKEN": "compose-token"}
    procs = {}

    def start(name: str, replica: str):
        svc = compose["services"][name]
        env = {
            k: interpolate(v, host_env).replace("http://coordinator:8000", port_map["url"])
            for k, v in svc["environment"].items()
        }
        extra = (
            ["--set", "env.stop_value=100000", "--set", f"exp_name={tmp_path / 'exp'}"] if name == "coordinator" else []
        )
        procs[replica] = cli(replica, *local_command(svc, port_map, shared), *extra, env=env)
        return procs[replica]

    coordinator = start("coordinator", "coordinator")
    coordinator.wait_line(rf"^REST API: http://127\.0\.0\.1:{coordinator_port}/api/v1$")
    api = port_map["url"] + "/api/v1"
    start("learner", "learner")
    start("collector", "collector-1")
    start("collector", "collector-2")  # --scale collector=2

    def busy(kind):
        return [w for w in requests.get(f"{api}/{kind}s", timeout=5).json()[f"{kind}s"] if w["state"] == "busy"]

    eventually(
        lambda: len(busy("collector")) == 2 and len(busy("learner")) == 1, timeout=90, message="the cluster formed"
    )
    collectors = busy("collector")
    assert len({w["address"] for w in collectors}) == 2  # each replica advertises its own address
    eventually(
        lambda: requests.get(f"{api}/cluster", timeout=5).json()["train_iter"] > 50, timeout=60, message="training"
    )
    # `docker compose stop collector` sends SIGTERM: the replica deregisters and exits 0
    procs["collector-2"].proc.send_signal(signal.SIGTERM)
    assert procs["collector-2"].wait(30) == 0
    states = sorted(w["state"] for w in requests.get(f"{api}/collectors", timeout=5).json()["collectors"])
    assert states == ["busy", "gone"]
    assert requests.get(port_map["url"] + "/metrics", timeout=5).status_code == 200
