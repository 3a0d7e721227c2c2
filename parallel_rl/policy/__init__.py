"""Policies. ``create_policy(cfg, obs_dim, action_spec)`` builds one by ``cfg.type``.

The torch-backed classes load on first use (PEP 562 ``__getattr__``), so
processes that only need configs and schedules (the coordinator) never
import torch.
"""
from __future__ import annotations

import importlib

from .defaults import POLICY_ACTION_SPACES, POLICY_DEFAULTS, dqn_default_config
from .epsilon import epsilon_schedule

# name -> "module:Class", resolved lazily
_POLICIES = {
    "dqn": "parallel_rl.policy.dqn:DQNPolicy",
    "r2d2": "parallel_rl.policy.r2d2:R2D2Policy",
    "ppo": "parallel_rl.policy.ppo:PPOPolicy",
    "sac": "parallel_rl.policy.sac:SACPolicy",
    "td3": "parallel_rl.policy.td3:TD3Policy",
    "impala": "parallel_rl.policy.impala:IMPALAPolicy",
    "appo": "parallel_rl.policy.appo:APPOPolicy",
}
_LAZY = {"DQNPolicy": "parallel_rl.policy.dqn", "QNetwork": "parallel_rl.policy.dqn"}


def register_policy(name: str, target: str, default_config, action_spaces=("discrete",)) -> None:
    """Register a policy class (``"module:Class"``), its torch-free default config function and the
    action spaces it trains on (``"discrete"``, ``"box"``)."""
    _POLICIES[name] = target
    POLICY_DEFAULTS[name] = default_config
    POLICY_ACTION_SPACES[name] = tuple(action_spaces)


def get_policy_cls(name: str):
    from ..errors import ConfigError

    if name not in _POLICIES:
        raise ConfigError(f"unknown policy type {name!r} (known: {', '.join(sorted(_POLICIES))})")
    module, _, attr = _POLICIES[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def create_policy(cfg, obs_dim: int, action, seed=None, device=None):
    """Build ``cfg.type``'s policy for ``obs_dim`` flattened inputs and ``action`` (an ActionSpec, or a
    number of discrete actions). ``device`` overrides ``policy.device``/``policy.cuda`` (collectors: "cpu")."""
    from ..envs.spaces import ActionSpec
    from .device import resolve_device

    spec = action if isinstance(action, ActionSpec) else ActionSpec.discrete(action)
    device = device or resolve_device(cfg)
    return get_policy_cls(cfg.get("type", "dqn"))(cfg, obs_dim, spec, seed=seed, device=device)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DQNPolicy", "QNetwork", "POLICY_DEFAULTS", "create_policy", "dqn_default_config",
           "epsilon_schedule", "get_policy_cls", "register_policy"]
