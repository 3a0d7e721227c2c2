"""Whether the configured env and algorithm fit: the env's spaces (made once, then closed) against the
policy type's action spaces, checked before any process starts and again by each learner.

One source of truth for spaces: the env is made the way every role makes it (:meth:`EnvManager.from_cfg`,
one copy), so the learner's network reads what the collectors' envs give. A plain ``gym.make`` would not:
``ALE/Pong-v5`` gives 210x160x3 frames there and 4x84x84 stacks through ALE's own vector env.

Above :mod:`.spaces` (what a space is), :mod:`.env_manager` and :mod:`.multiagent` (how envs are made)."""

from __future__ import annotations

from typing import Optional

import gymnasium as gym

from ..errors import ConfigError
from ..policy.spec import POLICY_ACTION_SPACES
from .env_manager import EnvManager
from .multiagent import battle_env_spaces, is_battle_env
from .registrars import import_env_modules
from .spaces import ActionSpec, algorithms_for


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
    try:  # in this process, without latency: the spaces are those of the sub-envs the roles step
        env = EnvManager.from_cfg(env_cfg, 1, spaces_only=True)
    except gym.error.Error as exc:
        raise ConfigError(f"env.env_id {env_cfg.env_id!r} cannot be made: {exc}") from exc
    try:
        if policy_type is not None:
            spec = env.action_spec
            space = gym.spaces.Discrete(spec.n) if spec.kind == "discrete" else gym.spaces.Box(spec.low, spec.high)
            check_policy_fits(policy_type, spec, env_cfg.env_id, space)
        return env.obs_shape, env.action_spec
    finally:
        env.close()


def check_env_fits(cfg) -> None:
    """Before any process starts: the env's spaces and the algorithm fit; the device exists."""
    from ..policy.device import resolve_device

    env_spaces(cfg.env, cfg.policy.type)
    resolve_device(cfg.policy)
