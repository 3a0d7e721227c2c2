"""Observation and action spaces: which ones we train on, and which algorithm fits which.

Handled once, here: ``Box`` observations of any shape (models flatten them),
``Discrete`` and ``Box`` actions. :func:`check_env_fits` runs before any
process starts, so a bad pairing is a one-line :class:`ConfigError`, never a
traceback in a child.
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
        return ActionSpec("box", shape=tuple(space.shape), low=space.low.astype(np.float32),
                          high=space.high.astype(np.float32))
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
    from ..policy.defaults import POLICY_ACTION_SPACES

    return sorted(name for name, kinds in POLICY_ACTION_SPACES.items() if kind in kinds)


def check_policy_fits(policy_type: str, spec: ActionSpec, env_id: str, space: gym.Space) -> None:
    from ..policy.defaults import POLICY_ACTION_SPACES

    kinds = POLICY_ACTION_SPACES.get(policy_type, ("discrete",))
    if spec.kind not in kinds:
        fitting = algorithms_for(spec.kind)
        raise ConfigError(
            f"policy.type={policy_type!r} does not fit env {env_id!r}: its action space is {space} "
            f"({spec.kind}), {policy_type} needs {' or '.join(kinds)}; algorithms that fit: {', '.join(fitting)}"
        )


def env_spaces(env_cfg, policy_type: Optional[str] = None) -> tuple:
    """(obs_shape, ActionSpec) of the configured env, without keeping it open.

    With ``policy_type`` it also checks that the algorithm fits the action space.
    """
    from .env_manager import import_env_modules
    from .multiagent import battle_env_spaces, is_battle_env

    import_env_modules(env_cfg.import_names)
    if is_battle_env(env_cfg):
        obs_shape, spec = battle_env_spaces(env_cfg)
        if policy_type is not None:
            check_policy_fits(policy_type, spec, env_cfg.env_id, f"Discrete({spec.n})")
        return obs_shape, spec
    try:
        env = gym.make(env_cfg.env_id, **(env_cfg.env_kwargs or {}))
    except gym.error.Error as exc:
        raise ConfigError(f"env.env_id {env_cfg.env_id!r} cannot be made: {exc}") from exc
    try:
        obs_shape = check_observation_space(env.observation_space, env_cfg.env_id)
        spec = action_spec(env.action_space, env_cfg.env_id)
        if policy_type is not None:
            check_policy_fits(policy_type, spec, env_cfg.env_id, env.action_space)
        return obs_shape, spec
    finally:
        env.close()


def check_env_fits(cfg) -> None:
    """Before any process starts: the env's spaces and the algorithm fit; the device exists."""
    from ..policy.device import resolve_device

    env_spaces(cfg.env, cfg.policy.type)
    resolve_device(cfg.policy)
