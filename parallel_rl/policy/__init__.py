"""Policies. ``create_policy(cfg, obs_dim, action_spec)`` builds one by ``cfg.type``.

The torch-backed classes load on first use (PEP 562 ``__getattr__``), so
processes that only need configs and schedules (the coordinator) never
import torch.
"""

from __future__ import annotations

import importlib

from .defaults import dqn_default_config
from .epsilon import epsilon_schedule
from .spec import POLICY_ACTION_SPACES, POLICY_DEFAULTS, PolicySpec, policy_spec, register_policy

_LAZY = {"DQNPolicy": "parallel_rl.policy.dqn", "QNetwork": "parallel_rl.policy.dqn"}


def get_policy_cls(name: str):
    """The class of ``policy.type`` ``name`` (its spec's target, imported now)."""
    module, _, attr = policy_spec(name).target.partition(":")
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


__all__ = [
    "DQNPolicy",
    "POLICY_ACTION_SPACES",
    "POLICY_DEFAULTS",
    "PolicySpec",
    "QNetwork",
    "create_policy",
    "dqn_default_config",
    "epsilon_schedule",
    "get_policy_cls",
    "policy_spec",
    "register_policy",
]
