"""Policies. ``create_policy(cfg, obs_dim, action_num)`` builds one by ``cfg.type``.

The torch-backed classes load on first use (PEP 562 ``__getattr__``), so
processes that only need configs and schedules (the coordinator) never
import torch.
"""
from __future__ import annotations

import importlib

from .defaults import POLICY_DEFAULTS, dqn_default_config
from .epsilon import epsilon_schedule

# name -> "module:Class", resolved lazily
_POLICIES = {"dqn": "parallel_rl.policy.dqn:DQNPolicy"}
_LAZY = {"DQNPolicy": "parallel_rl.policy.dqn", "QNetwork": "parallel_rl.policy.dqn"}


def register_policy(name: str, target: str, default_config) -> None:
    """Register a policy class (``"module:Class"``) and its torch-free default config function."""
    _POLICIES[name] = target
    POLICY_DEFAULTS[name] = default_config


def get_policy_cls(name: str):
    from ..errors import ConfigError

    if name not in _POLICIES:
        raise ConfigError(f"unknown policy type {name!r} (known: {', '.join(sorted(_POLICIES))})")
    module, _, attr = _POLICIES[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def create_policy(cfg, obs_dim: int, action_num: int, seed=None):
    return get_policy_cls(cfg.get("type", "dqn"))(cfg, obs_dim, action_num, seed=seed)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DQNPolicy", "QNetwork", "POLICY_DEFAULTS", "create_policy", "dqn_default_config",
           "epsilon_schedule", "get_policy_cls", "register_policy"]
