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

from .defaults import CollectorSection
from .serial import CollectStats

logger = logging.getLogger(__name__)


class BaseParallelCollector(abc.ABC):
    def __init__(self, cfg: EasyDict):
        self.cfg = cfg

    @classmethod
    def default_config(cls) -> EasyDict:
        """The cluster collector's own section of the run config, ``parallel.collector``, with its defaults (as
        DI-engine's ``config``; it reads ``env`` and ``policy`` too, whose defaults come from their components):
        :class:`~.defaults.CollectorSection`."""
        return CollectorSection.defaults()

    # ---- DI-engine's helpers ----------------------------------------------------------------------
    def info(self, s: str) -> None:
        """Log ``s`` as this collector."""
        logger.info("%s: %s", type(self).__name__, s)

    def debug(self, s: str) -> None:
        logger.debug("%s: %s", type(self).__name__, s)

    def error(self, s: str) -> None:
        logger.error("%s: %s", type(self).__name__, s)

    @property
    def policy(self) -> Any:
        """The policy collecting (one of ours, every mode)."""
        return self._policy

    @policy.setter
    def policy(self, _policy: Any) -> None:
        """DI-engine's setter: the collector acts with ``_policy`` from the next collect on."""
        self._policy = _policy
        self._act_with_policy()

    @property
    def env_manager(self) -> Any:
        """DI-engine's name for the collection envs (``env``); assigning one makes the collector step it."""
        return self.env

    @env_manager.setter
    def env_manager(self, _env_manager: Any) -> None:
        self.env = _env_manager
        self._step_env()

    @abc.abstractmethod
    def _act_with_policy(self) -> None:
        """Collect with ``self.policy`` from now on."""

    @abc.abstractmethod
    def _step_env(self) -> None:
        """Collect on ``self.env`` from now on."""

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
    def collect(
        self, n_sample: int, eps: float, random_collect: bool = False
    ) -> Tuple[Dict[str, np.ndarray], CollectStats]:
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
