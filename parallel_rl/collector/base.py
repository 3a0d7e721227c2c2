"""BaseParallelCollector: what a collector running inside a cluster slave does (DI-engine's base).

A comm collector (:class:`parallel_rl.collector.shell.CollectorSlave`)
drives one of these: it asks for newer policies, collects, writes step data and evaluates.
"""
from __future__ import annotations

import abc
import logging
from typing import Any, Dict, Optional, Tuple

import numpy as np
from easydict import EasyDict

from .serial import CollectStats

logger = logging.getLogger(__name__)


class BaseParallelCollector(abc.ABC):
    @classmethod
    def default_config(cls) -> EasyDict:
        """The configuration a cluster collector reads, with its defaults: the whole run config (``env``,
        ``policy``, ``parallel.collector``), as :func:`parallel_rl.config.assembly.default_config` builds it."""
        from ..config.assembly import default_config

        return default_config()

    # ---- DI-engine's helpers ----------------------------------------------------------------------
    def info(self, s: str) -> None:
        """Log ``s`` as this collector."""
        logger.info("%s: %s", type(self).__name__, s)

    def debug(self, s: str) -> None:
        logger.debug("%s: %s", type(self).__name__, s)

    def error(self, s: str) -> None:
        logger.error("%s: %s", type(self).__name__, s)

    @abc.abstractmethod
    def get_finish_info(self) -> Dict[str, Any]:
        """What the last collection did, under DI-engine's keys."""

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
