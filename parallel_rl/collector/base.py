"""BaseParallelCollector: what a collector running inside a cluster slave does (DI-engine's base).

A comm collector (:class:`parallel_rl.collector.shell.CollectorSlave`)
drives one of these: it asks for newer policies, collects, writes step data and evaluates.
"""
from __future__ import annotations

import abc
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .serial import CollectStats


class BaseParallelCollector(abc.ABC):
    @property
    @abc.abstractmethod
    def envstep(self) -> int:
        """Env steps taken so far."""

    @abc.abstractmethod
    def get_policy_update_info(self) -> Optional[int]:
        """The newest policy version available, if newer than the one in use."""

    @abc.abstractmethod
    def update_policy(self, version: int) -> bool:
        """Load policy ``version``; False if it is not newer or not available."""

    @abc.abstractmethod
    def collect(self, n_sample: int, eps: float, random_collect: bool = False) -> Tuple[Dict[str, np.ndarray], CollectStats]:
        """``n_sample`` transitions with the current policy (uniformly random actions with ``random_collect``:
        the off-policy warm-up), and what the collection did."""

    @abc.abstractmethod
    def send_stepdata(self, name: str, data: Dict[str, np.ndarray]) -> str:
        """Put a chunk of step data on the shared store; returns where."""

    @abc.abstractmethod
    def evaluate(self, version: int, n_episode: int) -> Dict[str, Any]:
        """Greedy episodes with policy ``version``; the evaluation's info."""

    @abc.abstractmethod
    def close(self) -> None: ...
