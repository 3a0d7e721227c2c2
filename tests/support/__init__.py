"""Helpers the test modules share: waiting on public state with a deadline, a fake policy, a small cluster config
on the toy env, CLI processes, HTTP look-ups. Fixtures stay in tests/conftest.py."""

from __future__ import annotations

import socket

import numpy as np
import requests


class ConstantPolicy:
    """A fake policy: always the same action (deterministic rewards on the toy env)."""

    def __init__(self, action: int = 1):
        self.action = action
        self.calls = []

    def forward(self, obs, **kwargs):
        self.calls.append(kwargs)
        return np.full(len(obs), self.action, dtype=np.int64)


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
        "env": {
            "env_id": "parallel_rl/Counting-v0",
            "env_kwargs": {"episode_length": 5},
            "collector_env_num": 2,
            "evaluator_env_num": 2,
            "n_evaluator_episode": 2,
            "stop_value": 4.0,
        },
        "policy": {"model": {"hidden_size_list": [16]}, "nstep": 1},
        "parallel": {
            "coordinator": {"heartbeat_ttl": 2.0, "chunk_grace_seconds": 0.0, "long_poll_slots": 8},
            "worker": {"heartbeat_interval": 0.2, "request_timeout": 2.0, "max_retries": 1},
            "commander": {"collector_task_env_steps": 64, "max_env_steps_per_update": 0.0, "allowance_grant": 16},
            "collector": {"chunk_size": 16},
        },
    }
    for section, values in parallel.items():
        user["parallel"].setdefault(section, {}).update(values)
    return compile_config(user)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a process that must be told its port before it starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, path):
    """GET ``url + path`` and return its JSON body (5 s deadline)."""
    return requests.get(url + path, timeout=5).json()


class CliProcess:
    """A `python -m parallel_rl ...` process whose output goes to a file (a full pipe never blocks it).
    ``new_session``: in a session (and process group) of its own, as a shell starts a job, so that a test can
    press Ctrl-C on it (``os.killpg(pid, SIGINT)``) without signalling pytest. ``prefix``: the command that runs
    it (e.g. ``ip netns exec NS``: :mod:`tests.support.hosts`); ``program``: another program than parallel_rl's."""

    def __init__(
        self,
        tmp_path,
        name: str,
        *args: str,
        env: dict | None = None,
        cwd=None,
        new_session: bool = False,
        prefix: tuple = (),
        program: tuple = (),
    ):
        import os
        import subprocess
        import sys

        self.name = name
        self.log_path = tmp_path / f"{name}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [*prefix, *(program or (sys.executable, "-m", "parallel_rl")), *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=new_session,
        )

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
                raise AssertionError(
                    f"{self.name} exited ({self.proc.returncode}) before printing {pattern!r}:\n{self.output()[-3000:]}"
                )
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

    def send_signal(self, signum: int) -> None:
        """Signal the parallel_rl process itself."""
        self.proc.send_signal(signum)

    def stop(self):
        import signal

        if self.proc.poll() is None:
            self.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except Exception:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


def damaged(blob: bytes, changes) -> bytes:
    """``blob`` after ``changes`` (a fuzzer's draws): ``("truncate", fraction)`` cuts it to that fraction of its
    length, ``("flip", [(where, mask), ...])`` XORs the byte at each fraction ``where`` of its length with ``mask``."""
    blob = bytearray(blob)
    for change in changes:
        if change[0] == "truncate":
            blob = blob[: int(change[1] * len(blob))]
        elif blob:
            for where, mask in change[1]:
                blob[int(where * len(blob))] ^= mask
    return bytes(blob)
