"""A latency-bound env: every ``step`` and ``reset`` takes ``latency_ms`` of wall time, asleep.

It stands for a simulator on another machine, a robot or a game server: the caller waits for the answer
without using CPU. Any gymnasium env becomes one with the config key ``env.step_latency_ms`` (0: off), which
:meth:`~parallel_rl.envs.env_manager.EnvManager.from_cfg` applies to each sub-env. With it a 2-core box hosts
tens of collector processes, so the coordinator, the chunk traffic and the control plane are tested under real
workers (``benchmarks/async.py``).

A call takes ``latency_ms`` in all (the env's own compute counts toward it, as a remote simulator's would),
never less. In a vector env the latencies add up as the vector env steps its sub-envs: ``SyncVectorEnv``
(``env.vector_mode`` auto or sync) steps them one after another, so one vector step takes ``num_envs × L``
(a client calling its simulators in turn); ``AsyncVectorEnv`` (``env.vector_mode="async"``) steps each in its
own process, so they overlap and a vector step takes about ``L`` (at the cost of a process per sub-env).
``env.evaluator_vector_mode`` picks the evaluators' mode apart from the collectors'.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym

from ..errors import ConfigError


class LatencyWrapper(gym.Wrapper):
    """``env`` whose ``step`` and ``reset`` each take at least ``latency_ms`` milliseconds, sleeping."""

    def __init__(self, env: gym.Env, latency_ms: float):
        if not 0 <= latency_ms < 60_000:
            raise ConfigError(f"env.step_latency_ms must be in [0, 60000), got {latency_ms!r}")
        super().__init__(env)
        self.latency = float(latency_ms) / 1000.0

    def step(self, action: Any):
        deadline = time.perf_counter() + self.latency
        result = self.env.step(action)
        _sleep_until(deadline)
        return result

    def reset(self, **kwargs: Any):
        deadline = time.perf_counter() + self.latency
        result = self.env.reset(**kwargs)
        _sleep_until(deadline)
        return result


def _sleep_until(deadline: float) -> None:
    """Sleep until ``deadline`` (perf_counter): ``time.sleep`` may wake early on some systems, so loop."""
    while (left := deadline - time.perf_counter()) > 0:
        time.sleep(left)
