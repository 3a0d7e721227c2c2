"""Shared fixtures: configs on the deterministic toy env, temp experiment dirs."""
from __future__ import annotations

import numpy as np
import pytest

from parallel_rl.config import compile_config
from parallel_rl.envs import EnvManager


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """The test process runs torch as every parallel_rl process does (`system.torch_num_threads`, 1): with
    torch's default threads a small net's forward ran ~45x slower on this 2-core box when it was busy."""
    from parallel_rl.runtime import set_torch_threads

    set_torch_threads(1)


@pytest.fixture
def toy_env():
    """4 copies of parallel_rl/Counting-v0 with 5-step episodes."""
    env = EnvManager("parallel_rl/Counting-v0", 4, seed=0, env_kwargs={"episode_length": 5})
    yield env
    env.close()


class ConstantPolicy:
    """A fake policy: always the same action (deterministic rewards on the toy env)."""

    def __init__(self, action: int = 1):
        self.action = action
        self.calls = []

    def forward(self, obs, **kwargs):
        self.calls.append(kwargs)
        return np.full(len(obs), self.action, dtype=np.int64)


@pytest.fixture
def constant_policy():
    return ConstantPolicy(1)


@pytest.fixture
def cfg(tmp_path):
    return compile_config({"exp_name": str(tmp_path / "exp")})


def eventually(predicate, timeout: float = 10.0, interval: float = 0.02, message: str = "condition"):
    """Wait until ``predicate()`` is truthy, checking public state every ``interval``; fail after ``timeout``."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} not reached within {timeout}s")
        time.sleep(interval)


def toy_cluster_config(tmp_path, **parallel):
    """A cluster config on the deterministic toy env, small and fast."""
    from parallel_rl.config import compile_config

    user = {
        "exp_name": str(tmp_path / "exp"),
        "env": {"env_id": "parallel_rl/Counting-v0", "env_kwargs": {"episode_length": 5},
                "collector_env_num": 2, "evaluator_env_num": 2, "n_evaluator_episode": 2, "stop_value": 4.0},
        "policy": {"model": {"hidden_size_list": [16]}, "nstep": 1},
        "parallel": {"coordinator": {"heartbeat_ttl": 2.0, "chunk_grace_seconds": 0.0, "long_poll_slots": 8},
                     "worker": {"heartbeat_interval": 0.2, "request_timeout": 2.0, "max_retries": 1},
                     "commander": {"collector_task_env_steps": 64, "max_env_steps_per_update": 0.0,
                                   "allowance_grant": 16},
                     "collector": {"chunk_size": 16}},
    }
    for section, values in parallel.items():
        user["parallel"].setdefault(section, {}).update(values)
    return compile_config(user)


@pytest.fixture
def coordinator_factory(tmp_path):
    """Start coordinators (REST on 127.0.0.1, port picked by the OS); all closed at the end."""
    from coordinator_app import serve_coordinator
    from parallel_rl.coordinator import Coordinator
    from parallel_rl.storage import SharedStorage

    started = []

    def make(cfg=None, token="test-token", **parallel):
        cfg = cfg or toy_cluster_config(tmp_path, **parallel)
        coordinator = Coordinator(cfg, SharedStorage(str(tmp_path / "shared")), token)
        server = serve_coordinator(coordinator, "127.0.0.1", 0).start()
        coordinator.start()
        started.append((coordinator, server))
        return coordinator, server

    yield make
    for coordinator, server in started:
        coordinator.close(notify_workers=False)
        server.close()


class CliProcess:
    """A `python -m parallel_rl ...` process whose output goes to a file (a full pipe never blocks it)."""

    def __init__(self, tmp_path, name: str, *args: str, env: dict | None = None, cwd=None):
        import os
        import subprocess
        import sys

        self.name = name
        self.log_path = tmp_path / f"{name}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "parallel_rl", *args], stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, **(env or {})}, cwd=cwd)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log_path.read_text()

    def wait_line(self, pattern: str, timeout: float = 60.0):
        """The first match of ``pattern`` in the output, waiting up to ``timeout``."""
        import re

        def find():
            if self.proc.poll() is not None and not re.search(pattern, self.output(), re.M):
                raise AssertionError(f"{self.name} exited ({self.proc.returncode}) before printing "
                                     f"{pattern!r}:\n{self.output()[-3000:]}")
            return re.search(pattern, self.output(), re.M)

        return eventually(find, timeout=timeout, interval=0.05, message=f"{self.name}: {pattern!r}")

    def wait(self, timeout: float = 30.0) -> int:
        import subprocess

        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout} s:\n{self.output()[-3000:]}") from None
        finally:
            self._log.flush()

    def stop(self):
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except Exception:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


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
