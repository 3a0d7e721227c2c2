"""Env ids from other packages: import the modules a config names (``env.import_names``) and run the register
call of the packages that need one."""

from __future__ import annotations

import importlib
from typing import Iterable

import gymnasium as gym

from ..registry import import_modules

# env packages whose import alone registers nothing with gymnasium >= 1.0 (which dropped plugin entry points):
# the module and function that register their envs. MinAtar 1.0.15: ``MinAtar/<Game>-v0`` (full action set) and
# ``-v1`` (minimal action set) for Asterix, Breakout, Freeway, Seaquest, SpaceInvaders. (``ale_py`` registers
# its ``ALE/...`` ids on import, so it needs no entry.)
ENV_REGISTRARS = {"minatar": ("minatar.gym", "register_envs", "MinAtar/Breakout-v1")}


def import_env_modules(names: Iterable[str]) -> None:
    """Import user modules that register envs with gymnasium (``env.import_names``), then run the register
    call of the packages in :data:`ENV_REGISTRARS` (once: gymnasium warns about every id registered twice)."""
    names = list(names or [])
    import_modules(names, "env.import_names")
    for name in names:
        if name in ENV_REGISTRARS:
            module, function, probe_id = ENV_REGISTRARS[name]
            if probe_id not in gym.registry:
                getattr(importlib.import_module(module), function)()
