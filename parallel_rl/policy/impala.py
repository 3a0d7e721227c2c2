"""IMPALA (Espeholt et al. 2018): an actor-critic trained on V-trace targets.

The actor-critic, its acting (``forward_collect`` records the behaviour policy's ``logp`` and ``value``),
observation and reward normalisation and the minibatch loop are PPO's (:mod:`.ppo`); what differs:

- the targets (:meth:`IMPALAPolicy.learning_targets`): V-trace (:mod:`.vtrace`) with the learner's policy
  and critic as they are before each epoch, against the behaviour policy's recorded ``logp``, truncated at
  ``learn.rho_bar`` and ``learn.c_bar``; the value loss regresses to ``v_s``;
- the policy loss: the policy gradient ``-rho_s * A_s * log pi(a_s | x_s)`` with the V-trace advantage
  (which carries ``rho_s``), plus PPO's entropy bonus (``learn.entropy_weight``).

APPO (:mod:`.appo`) keeps these targets and uses PPO's clipped surrogate instead of the plain gradient.
"""

from __future__ import annotations

from typing import Dict

import numpy as np
import torch
from easydict import EasyDict

from ..data.flows import ASYNC
from ..errors import ConfigError
from .defaults import impala_default_config
from .ppo import LearnBatch, PPOPolicy
from .vtrace import vtrace


class IMPALAPolicy(PPOPolicy):
    flow = ASYNC  # its default (policy.flow="async"); the instance follows policy.flow, as PPO's does
    retarget_every_epoch = True  # the learner's policy moves between epochs; V-trace corrects for it

    @classmethod
    def default_config(cls) -> EasyDict:
        return impala_default_config()

    def __init__(self, cfg: EasyDict, *args, **kwargs):
        learn = cfg.learn
        if not (learn.rho_bar > 0 and learn.c_bar > 0):
            raise ConfigError(
                f"policy.learn.rho_bar and policy.learn.c_bar truncate importance weights and must be "
                f"> 0 (1.0 in the paper), got rho_bar={learn.rho_bar} c_bar={learn.c_bar}"
            )
        super().__init__(cfg, *args, **kwargs)

    @torch.no_grad()
    def learning_targets(self, segment: Dict[str, np.ndarray], batch: LearnBatch):
        """(V-trace policy-gradient advantages, V-trace value targets ``v_s``) as tensors; V(x) is the critic's
        now, on ``obs`` and ``next_obs``."""
        x = self.row_features(batch)  # the observations, or a recurrent core's features
        dist = self.model.dist(x, batch.action_mask)
        target_logp = self.model.log_prob(dist, batch.action)
        value = self.model.value(x).cpu().numpy()
        next_value = self.next_values(segment, value)
        learn = self.cfg.learn
        out = vtrace(
            segment["logp"],
            target_logp.cpu().numpy(),
            batch.reward,
            value,
            next_value.astype(np.float64),
            segment["done"],
            segment["end"],
            segment["env_id"],
            self.cfg.discount_factor,
            learn.rho_bar,
            learn.c_bar,
            learn.lambda_,
        )
        as_tensor = lambda x: torch.as_tensor(x, dtype=torch.float32, device=self.device)  # noqa: E731
        return as_tensor(out.pg_advantage), as_tensor(out.vs)

    def policy_loss(self, logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor):
        """The policy-gradient loss (the advantage carries rho_s), and the fraction of rows whose importance
        weight was truncated at ``rho_bar`` (PPO's ``clip_fraction`` slot)."""
        with torch.no_grad():
            truncated = (torch.exp(logp - old_logp) > self.cfg.learn.rho_bar).float().mean()
        return -(logp * adv).mean(), truncated
