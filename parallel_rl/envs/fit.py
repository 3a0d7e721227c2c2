"""Whether the configured env and algorithm fit: the env's spaces (made once, then closed) against the
policy type's action spaces, checked before any process starts and again by each learner.

Above :mod:`.spaces` (what a space is), :mod:`.env_manager` and :mod:`.multiagent` (how envs are made)."""
from __future__ import annotations

from typing import Optional

import gymnasium as gym

from ..errors import ConfigError
from ..policy.defaults import POLICY_ACTION_SPACES
from .registrars import import_env_modules
from .multiagent import battle_env_spaces, is_battle_env
from .spaces import ActionSpec, action_spec, algorithms_for, check_observation_space


def check_policy_fits(policy_type: str, spec: ActionSpec, env_id: str, space: gym.Space) -> None:
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
