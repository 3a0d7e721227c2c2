"""Shared fixtures: configs on the deterministic toy env, temp experiment dirs."""

from __future__ import annotations

import pytest
from hypothesis import settings

from parallel_rl.config import compile_config
from parallel_rl.envs import EnvManager
from tests.support import CliProcess, ConstantPolicy, eventually, toy_cluster_config  # noqa: F401 (re-exported)

# hypothesis: a property test that names no example count of its own takes the profile's. "suite" (loaded here)
# keeps each to a few seconds on a loaded 2-core box; `pytest --hypothesis-profile long` runs 40x as many
settings.register_profile("suite", max_examples=150, deadline=None)
settings.register_profile("long", max_examples=6000, deadline=None)
settings.load_profile("suite")


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """The test process runs torch as every parallel_rl process does (`system.torch_num_threads`, 1): with
    torch's default threads a small net's forward ran ~45x slower on this 2-core box when it was busy."""
    from parallel_rl.runtime import set_torch_threads

    set_torch_threads(1)


@pytest.fixture(autouse=True)
def own_cpu_claims(tmp_path, monkeypatch):
    """The `run`s a test starts claim their learners' CPUs among themselves (parallel_rl.entry.placement), not
    against the runs of tests beside it (pytest-xdist) or of anything else on the machine."""
    monkeypatch.setenv("PARALLEL_RL_CPU_CLAIMS", str(tmp_path / "cpu-claims"))


@pytest.fixture
def toy_env():
    """4 copies of parallel_rl/Counting-v0 with 5-step episodes."""
    env = EnvManager("parallel_rl/Counting-v0", 4, seed=0, env_kwargs={"episode_length": 5})
    yield env
    env.close()


@pytest.fixture
def constant_policy():
    return ConstantPolicy(1)


@pytest.fixture
def cfg(tmp_path):
    return compile_config({"exp_name": str(tmp_path / "exp")})


def _coordinators(tmp_path, cls):
    """Start ``cls`` coordinators (REST on 127.0.0.1, port picked by the OS); all closed at the end."""
    from coordinator_app import serve_coordinator
    from parallel_rl.storage import SharedStorage

    started = []

    def make(cfg=None, token="test-token", **parallel):
        cfg = cfg or toy_cluster_config(tmp_path, **parallel)
        coordinator = cls(cfg, SharedStorage(str(tmp_path / "shared")), token)
        server = serve_coordinator(coordinator, "127.0.0.1", 0).start()
        coordinator.start()
        started.append((coordinator, server))
        return coordinator, server

    yield make
    for coordinator, server in started:
        coordinator.close(notify_workers=False)
        server.close()


@pytest.fixture
def coordinator_factory(tmp_path):
    """Start coordinators (REST on 127.0.0.1, port picked by the OS); all closed at the end."""
    from parallel_rl.coordinator import Coordinator

    yield from _coordinators(tmp_path, Coordinator)


@pytest.fixture
def ding_coordinator_factory(tmp_path):
    """The same, of DI-engine's ``Coordinator`` (``parallel_rl.worker``: ours with its ``deal_with_*`` callbacks)."""
    from parallel_rl.worker import Coordinator

    yield from _coordinators(tmp_path, Coordinator)


@pytest.fixture
def cli(tmp_path):
    """Start CLI processes; every one is stopped (SIGTERM, then SIGKILL) at the end."""
    started = []

    def start(name: str, *args: str, env: dict | None = None, cwd=None) -> CliProcess:
        p = CliProcess(tmp_path, name, *args, env=env, cwd=cwd)
        started.append(p)
        return p

    yield start
    for p in reversed(started):
        p.stop()


@pytest.fixture
def network(tmp_path):
    """Hosts for a test (tests/support/hosts.py): network namespaces on a private bridge, all removed at the end
    (skipped with the reason where namespaces cannot be made)."""
    from tests.support.hosts import Network

    with Network(tmp_path) as net:
        yield net
