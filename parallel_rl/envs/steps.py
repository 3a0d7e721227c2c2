"""What a vector env's step gives the collectors: :class:`EnvStep` rows, the observation dtypes kept as the env
gives them, and whether the observations are frame stacks (:func:`frame_stack_of`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import gymnasium as gym
import numpy as np


@dataclass
class EnvStep:
    """One step of all envs. Row i is a real transition only where ``valid[i]``."""

    obs: np.ndarray  # observation after the step (the final one where the episode ended)
    reward: np.ndarray  # float32
    terminated: np.ndarray  # bool; with EnvManager.life_loss also a lost life (the game goes on)
    truncated: np.ndarray  # bool
    valid: np.ndarray  # bool; False where the env was auto-reset (obs is its first obs)
    episode_return: np.ndarray  # float64; the return of episodes that ended this step, else nan
    episode_length: np.ndarray  # int64; the length of episodes that ended this step, else 0 (> 0: ended)
    episode_ended: bool = False  # any episode ended in this step
    n_valid: int = 0  # number of real transitions in this step
    # step_ready only: envs whose step finished in this call (the others are still stepping or idle;
    # their rows are not valid). None: every env stepped.
    ready: Optional[np.ndarray] = None
    # with EnvManager.reset_kwargs set: envs reset right after this step (their EnvManager.obs row is the first
    # observation of a new episode, their next step a real transition). None: no env was reset.
    reset: Optional[np.ndarray] = None

    @property
    def done(self) -> np.ndarray:
        return self.terminated | self.truncated


# observation dtypes kept as the env gives them (frames, boards: 1 byte a value from env to chunk to learner,
# where the networks convert them on the device: parallel_rl.policy.nets.obs_float); any other dtype becomes float32
COMPACT_OBS_DTYPES = (np.dtype(np.uint8), np.dtype(np.bool_))


def as_obs(obs) -> np.ndarray:
    """A batch of observations as the rows store them: uint8 and bool as they are, anything else float32."""
    obs = np.asarray(obs)
    return obs if obs.dtype in COMPACT_OBS_DTYPES else obs.astype(np.float32, copy=False)


def frame_stack_of(vector_env: "gym.vector.VectorEnv") -> int:
    """Frames stacked on the first observation axis: ALE's vector env's ``stack_num`` (grey frames), else 0."""
    base = getattr(vector_env, "unwrapped", vector_env)
    space = vector_env.single_observation_space
    if type(base).__module__.startswith("ale_py") and len(space.shape) == 3 and space.shape[0] > 1:
        return int(space.shape[0])
    return 0
