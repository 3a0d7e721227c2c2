"""Policies. ``create_policy(cfg, obs_dim, action_num)`` builds one by ``cfg.type``."""
from __future__ import annotations

from ..registry import Registry
from .dqn import DQNPolicy, QNetwork, epsilon_schedule

POLICY_REGISTRY = Registry("policy")
POLICY_REGISTRY.register("dqn", DQNPolicy)


def create_policy(cfg, obs_dim: int, action_num: int, seed=None):
    return POLICY_REGISTRY.build(cfg.get("type", "dqn"), cfg, obs_dim, action_num, seed=seed)


__all__ = ["DQNPolicy", "QNetwork", "epsilon_schedule", "POLICY_REGISTRY", "create_policy"]
