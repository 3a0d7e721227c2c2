"""The serial pipeline's commander: what the collector is told each iteration (DI-engine's ``BaseSerialCommander``).

``step()`` reads the learner's and the collector's progress and returns the
collect settings for the next ``collect`` call: ``{"eps": epsilon}`` from the
policy's exploration schedule (``policy.other.eps``, decayed by collected env
steps), or ``{}`` for policies that explore by themselves. The cluster's
commander (``parallel_rl.coordinator.commander``) uses the same schedule.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from easydict import EasyDict

from ..policy.epsilon import exploration_schedule
from .defaults import SerialCommanderSection

logger = logging.getLogger(__name__)


class BaseSerialCommander:
    """``BaseSerialCommander(cfg, learner, collector, evaluator, replay_buffer, policy=None)``.

    ``policy``: one of our policies (its ``cfg`` holds the exploration schedule) or a policy config;
    None gives no settings. ``info`` holds the last ``step``'s inputs (``envstep``, ``train_iter``; not
    the learner's learn info, whose reading would wait for the training device every iteration).
    """

    @classmethod
    def default_config(cls) -> EasyDict:
        """Its section's defaults (:class:`~.defaults.SerialCommanderSection`: no settings)."""
        return SerialCommanderSection.defaults()

    def __init__(self, cfg: Optional[EasyDict], learner, collector, evaluator, replay_buffer, policy: Any = None):
        self.cfg = SerialCommanderSection.load(cfg)
        self._learner, self._collector = learner, collector
        self._evaluator, self._replay_buffer = evaluator, replay_buffer
        self.policy = policy
        self.info: Dict[str, Any] = {}

    @property
    def policy(self) -> Any:
        return self._policy

    @policy.setter
    def policy(self, _policy: Any) -> None:
        """DI-engine's setter: the exploration schedule follows the new policy (or config; None: no settings)."""
        self._policy = _policy
        policy_cfg = getattr(_policy, "cfg", _policy)
        self._epsilon = exploration_schedule(policy_cfg) if policy_cfg is not None else None

    def step(self) -> Dict[str, Any]:
        """The collect settings for the next ``collect`` call (``policy_kwargs``)."""
        envstep = self._collector.envstep
        self.info.update(envstep=envstep, train_iter=self._learner.train_iter)
        if self._epsilon is None:
            return {}
        return {"eps": self._epsilon(envstep)}
