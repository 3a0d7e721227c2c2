"""APPO: PPO's clipped surrogate on V-trace advantages, value targets ``v_s`` (Sample Factory's and RLlib's
asynchronous PPO).

The ratio in the surrogate is the learner's policy over the behaviour policy that acted (its ``logp``,
recorded by the collector), clipped at ``1 +- learn.clip_ratio``; advantages and value targets are
IMPALA's V-trace ones (:class:`.impala.IMPALAPolicy`), recomputed before each epoch.
"""

from __future__ import annotations

from easydict import EasyDict

from .defaults import appo_default_config
from .impala import IMPALAPolicy
from .ppo import PPOPolicy


class APPOPolicy(IMPALAPolicy):
    policy_loss = PPOPolicy.policy_loss  # the clipped surrogate, on IMPALA's V-trace targets

    @classmethod
    def default_config(cls) -> EasyDict:
        return appo_default_config()
