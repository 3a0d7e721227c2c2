"""Observation and action spaces: which ones we train on, and which algorithm fits which.

Handled once, here: ``Box`` observations of any shape (models flatten them),
``Discrete`` and ``Box`` actions. :func:`parallel_rl.envs.fit.check_env_fits` runs
before any process starts, so a bad pairing is a one-line :class:`ConfigError`,
never a traceback in a child.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import gymnasium as gym
import numpy as np

from ..errors import ConfigError


@dataclass(frozen=True)
class ActionSpec:
    """What a policy needs to know about the action space.

    ``kind`` is ``"discrete"`` (``n`` actions) or ``"box"`` (``shape``, bounded by ``low``/``high``).
    """

    kind: str
    n: int = 0
    shape: Tuple[int, ...] = ()
    low: Optional[np.ndarray] = None
    high: Optional[np.ndarray] = None

    @property
    def dim(self) -> int:
        """Number of action outputs: ``n`` for discrete, the flattened size for box."""
        return self.n if self.kind == "discrete" else int(np.prod(self.shape))

    @classmethod
    def discrete(cls, n: int) -> "ActionSpec":
        return cls("discrete", n=int(n))


def _space_kind(space: gym.Space) -> Optional[str]:
    if isinstance(space, gym.spaces.Discrete):
        return "discrete"
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return "box"
    return None


def action_spec(space: gym.Space, env_id: str = "?") -> ActionSpec:
    """The :class:`ActionSpec` of a gymnasium action space; other spaces raise ConfigError."""
    kind = _space_kind(space)
    if kind == "discrete":
        if int(space.start) != 0:
            raise ConfigError(f"env {env_id!r}: Discrete action space {space} must start at 0")
        return ActionSpec.discrete(space.n)
    if kind == "box":
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ConfigError(f"env {env_id!r}: Box action space {space} must have finite bounds")
        return ActionSpec(
            "box", shape=tuple(space.shape), low=space.low.astype(np.float32), high=space.high.astype(np.float32)
        )
    raise ConfigError(
        f"env {env_id!r} has action space {space}; supported action spaces are Discrete "
        f"(algorithms: {', '.join(algorithms_for('discrete'))}) and Box "
        f"(algorithms: {', '.join(algorithms_for('box'))})"
    )


def check_observation_space(space: gym.Space, env_id: str = "?") -> Tuple[int, ...]:
    if not isinstance(space, gym.spaces.Box):
        raise ConfigError(
            f"env {env_id!r} has observation space {space}; only Box observations (any shape, flattened for "
            f"the MLPs) are supported: wrap the env (e.g. gymnasium.wrappers.FlattenObservation)"
        )
    return tuple(space.shape)


def algorithms_for(kind: str) -> list:
    from ..policy.spec import POLICY_ACTION_SPACES

    return sorted(name for name, kinds in POLICY_ACTION_SPACES.items() if kind in kinds)
