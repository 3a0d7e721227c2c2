"""Environments: a vector env manager over gymnasium and a deterministic toy env."""

from . import toy  # noqa: F401  (registers parallel_rl/Counting-v0 with gymnasium)
from .env_manager import EnvManager
from .steps import EnvStep

__all__ = ["EnvManager", "EnvStep"]
