"""Partially observed control: an env's velocity entries zeroed (RL Zoo's ``CartPoleNoVel`` / ``PendulumNoVel``).

``env.mask_velocity`` (config) picks the entries: ``true`` for the envs in :data:`VELOCITY_INDICES`
(CartPole: cart velocity and pole angular velocity, indices 1 and 3; Pendulum: angular velocity, index 2),
or a list of observation indices for any Box env; false / empty: nothing masked. The observation keeps its
shape (zeros, as RL Zoo's ``MaskVelocityWrapper`` multiplies by a 0/1 mask), so a policy without memory
sees positions only and cannot tell which way things move: the task needs memory
(``policy.model.recurrent``). :meth:`~parallel_rl.envs.env_manager.EnvManager.from_cfg` wraps each sub-env,
and so does the video recorder.
"""

from __future__ import annotations

import functools
from typing import Sequence, Tuple, Union

import gymnasium as gym
import numpy as np

from ..errors import ConfigError
from .latency import LatencyWrapper

# the velocity entries of the classic-control observations (gymnasium's docs of each env)
VELOCITY_INDICES = {"CartPole-v0": (1, 3), "CartPole-v1": (1, 3), "Pendulum-v1": (2,)}


class MaskVelocity(gym.ObservationWrapper):
    """``env`` whose observations have the entries ``indices`` zeroed."""

    def __init__(self, env: gym.Env, indices: Sequence[int]):
        super().__init__(env)
        size = int(np.prod(env.observation_space.shape))
        if not indices or min(indices) < 0 or max(indices) >= size:
            raise ConfigError(
                f"env.mask_velocity: indices {list(indices)} must lie in [0, {size}) (the observation's entries)"
            )
        self.mask = np.ones(size, dtype=env.observation_space.dtype)
        self.mask[list(indices)] = 0

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return (np.asarray(observation).reshape(-1) * self.mask).reshape(np.shape(observation))


def velocity_indices(env_id: str, mask_velocity: Union[bool, Sequence[int], None]) -> Tuple[int, ...]:
    """The entries ``env.mask_velocity`` zeroes for ``env_id`` (none when it is false or empty)."""
    if not mask_velocity:
        return ()
    if mask_velocity is True:
        if env_id not in VELOCITY_INDICES:
            raise ConfigError(
                f"env.mask_velocity=true knows the velocity entries of {sorted(VELOCITY_INDICES)} "
                f"only; for {env_id!r} give their indices, e.g. env.mask_velocity=[1, 3]"
            )
        return VELOCITY_INDICES[env_id]
    try:
        return tuple(int(i) for i in mask_velocity)
    except (TypeError, ValueError):
        raise ConfigError(
            f"env.mask_velocity must be true/false or a list of observation indices, got {mask_velocity!r}"
        ) from None


def mask_wrapper(env_id: str, mask_velocity) -> list:
    """The sub-env wrapper ``env.mask_velocity`` asks for, as a list for ``gym.make_vec(wrappers=...)``."""
    indices = velocity_indices(env_id, mask_velocity)
    return [lambda env: MaskVelocity(env, indices)] if indices else []


def sub_env_wrappers(env_id: str, vector_mode: str, step_latency_ms: float, mask_velocity) -> Tuple[list, str]:
    """The wrappers the env section puts on each sub-env (``mask_velocity``, then ``step_latency_ms``) and the
    vector mode to build them in: a vector entry point steps all its envs in one call and cannot be wrapped, so
    ``auto`` becomes ``sync`` when there are any."""
    wrappers = mask_wrapper(env_id, mask_velocity)
    if step_latency_ms:
        wrappers.append(functools.partial(LatencyWrapper, latency_ms=step_latency_ms))
    if wrappers:
        if vector_mode == "vector_entry_point":
            raise ConfigError(
                "env.step_latency_ms and env.mask_velocity wrap each sub-env: use env.vector_mode "
                "sync (latencies add up) or async (they overlap), not vector_entry_point"
            )
        vector_mode = "sync" if vector_mode == "auto" else vector_mode
    return wrappers, vector_mode
