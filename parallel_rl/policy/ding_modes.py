"""DI-engine's policy contract over our serial collector and learner: a DI-engine user keeps their policy class.

DI-engine's collect mode acts on ``{env_id: obs}`` and returns ``{env_id: {"action": ..., ...}}``, turns each
step into a transition with ``process_transition(obs, model_output, timestep)`` and each finished piece of
trajectory into training samples with ``get_train_sample(transitions)``; ``reset(env_ids)`` clears an env's
state when its episode ends. Its learn mode's ``forward`` takes a list of sample dicts and returns a dict of
scalars with the samples' ``priority``.

:class:`DingCollectMode` drives such a collect mode through :class:`~parallel_rl.collector.serial.
SampleSerialCollector`'s own loop: ``forward`` answers the loop with stacked actions, and the rows come from
:class:`DingSampleBuilder` in place of the n-step builder (the policy builds its samples, as in DI-engine:
per env, a trajectory is cut into samples when its episode ends or it reaches ``traj_len`` steps, then
started afresh). :class:`DingLearnMode` hands a learn mode the sampled columns as DI-engine's list of sample
dicts (``replay_buffer_idx``, ``replay_unique_id`` and the importance weight ``IS`` included), so
:class:`~parallel_rl.learner.learner.BaseLearner` takes the priorities back for the buffer.

An eval mode (``forward({env_id: obs})``, ``reset``) acts in :class:`~parallel_rl.evaluator.serial.
InteractionSerialEvaluator` through :class:`DingEvalMode`.

The collector, the evaluator and the learner wrap such modes themselves (:func:`as_collect_mode`,
:func:`as_eval_mode`, :func:`as_learn_mode`): a collect mode is DI-engine's when it has
``process_transition`` and ``get_train_sample``, an eval mode when it has ``get_attribute``, a learn mode
when it has ``monitor_vars`` (members DI-engine's modes have and ours do not).
"""

from __future__ import annotations

import math
from collections import namedtuple
from typing import Any, Callable, Dict, List, Mapping, Optional

import numpy as np

from ..data.columns import Columns, columns_len
from ..errors import ConfigError

# what DI-engine's envs return from a step (ding.envs.BaseEnvTimestep), for process_transition
BaseEnvTimestep = namedtuple("BaseEnvTimestep", ["obs", "reward", "done", "info"])

# our sampled columns' bookkeeping under DI-engine's per-sample keys
_SAMPLE_KEYS = {"index": "replay_buffer_idx", "uid": "replay_unique_id", "weight": "IS"}


def get_attribute(mode: Any, name: str, default: Any = None) -> Any:
    """A DI-engine mode's ``get_attribute(name)``, or ``default`` where the mode has no such attribute."""
    getter = getattr(mode, "get_attribute", None)
    if getter is None:
        return default
    try:
        value = getter(name)
    except (AttributeError, KeyError, NotImplementedError):
        return default
    return default if value is None else value


def _tensor(value: Any):
    import torch

    return value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))


def _array(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)


def samples_to_columns(samples: List[Mapping[str, Any]]) -> Columns:
    """DI-engine's list of sample dicts as our columns (one array per key, a row per sample)."""
    if not samples:
        return {}
    return {key: np.stack([_array(s[key]) for s in samples]) for key in samples[0]}


def columns_to_samples(columns: Mapping[str, np.ndarray]) -> List[Dict[str, Any]]:
    """Our columns as DI-engine's list of sample dicts of tensors, bookkeeping under DI-engine's keys."""
    import torch

    tensors = {_SAMPLE_KEYS.get(k, k): torch.as_tensor(np.asarray(v)) for k, v in columns.items()}
    n = len(next(iter(tensors.values()))) if tensors else 0
    return [{k: v[i] for k, v in tensors.items()} for i in range(n)]


class DingSampleBuilder:
    """Rows built by a DI-engine collect mode: what :class:`~parallel_rl.collector.nstep.NStepBuilder` is for
    our policies (the same ``add`` / ``build`` / ``pending`` / ``enough_after`` the collector calls)."""

    def __init__(self, mode: "DingCollectMode", num_envs: int, traj_len: float):
        self.mode, self.traj_len = mode, traj_len
        self._trajectories: List[List[dict]] = [[] for _ in range(num_envs)]
        self._samples: List[dict] = []

    @property
    def pending(self) -> int:
        """Transitions not yet cut into samples."""
        return sum(len(t) for t in self._trajectories)

    def enough_after(self, missing: int, lanes: int) -> Callable[[int], bool]:
        """Samples appear only when a trajectory is cut: collect until ``missing`` are there."""
        return lambda steps: len(self._samples) >= missing

    def add(self, obs: np.ndarray, action: np.ndarray, step, extra: Optional[Columns] = None) -> None:
        if step.ready is not None:
            raise ConfigError("a DI-engine collect mode acts on every env each step; do not call step_ready_envs()")
        outputs = self.mode.take_outputs()
        for i in np.flatnonzero(step.valid):
            i = int(i)
            done = bool(step.terminated[i] or step.truncated[i])
            info: Dict[str, Any] = {}
            if done:
                info["eval_episode_return"] = float(step.episode_return[i])
            if step.truncated[i]:
                info["TimeLimit.truncated"] = True
            timestep = BaseEnvTimestep(step.obs[i], np.array([step.reward[i]], dtype=np.float32), done, info)
            output = outputs[i] if outputs is not None else {"action": _tensor(action[i])}  # random collection
            transition = self.mode.process_transition(obs[i], output, timestep)
            trajectory = self._trajectories[i]
            trajectory.append({k: _tensor(v) for k, v in transition.items()})  # DI-engine: to_tensor_transitions
            if done or len(trajectory) >= self.traj_len:
                self._samples.extend(self.mode.get_train_sample(trajectory))
                self._trajectories[i] = []
            if done:
                self.mode.reset([i])

    def build(self, collect_iter: int) -> Columns:
        """The samples made so far, as columns with ``collect_iter``."""
        columns = samples_to_columns(self._samples)
        self._samples = []
        if columns:
            columns["collect_iter"] = np.full(columns_len(columns), collect_iter, dtype=np.int64)
        return columns


class DingEvalMode:
    """A DI-engine mode as a policy our loops act with: ``forward(obs_batch)`` asks the mode with
    ``{env_id: obs}`` and returns the stacked actions; ``reset(env_ids=None)`` is the mode's (the evaluator
    calls it as DI-engine's does: all envs before an evaluation, one env after its episode ends)."""

    def __init__(self, mode: Any):
        self.mode = mode
        self._outputs: Optional[Dict[int, Any]] = None

    def forward(self, obs: np.ndarray, **policy_kwargs: Any) -> np.ndarray:
        out = self.mode.forward({i: obs[i] for i in range(len(obs))}, **policy_kwargs)
        self._outputs = out
        return np.stack([_array(out[i]["action"]) for i in range(len(obs))])

    def reset(self, env_ids: Optional[List[int]] = None) -> None:
        self.mode.reset(env_ids)

    def __getattr__(self, name: str) -> Any:  # state_dict, load_state_dict, get_attribute, ...
        return getattr(self.mode, name)


class DingCollectMode(DingEvalMode):
    """A DI-engine collect mode as our collector's policy: actions as :class:`DingEvalMode` gives them, and
    the mode's own outputs wait for :class:`DingSampleBuilder` (built through :meth:`sample_builder`)."""

    def take_outputs(self) -> Optional[Dict[int, Any]]:
        """The outputs of the last ``forward`` (None if the step since was not this mode's: random collection)."""
        out, self._outputs = self._outputs, None
        return out

    def sample_builder(self, num_envs: int, n_sample: Optional[int]) -> DingSampleBuilder:
        """DI-engine's trajectory length: at least ``unroll_len``, and ``n_sample`` spread over the envs unless
        the policy's cfg says ``traj_len_inf`` (then trajectories are cut at episode ends only)."""
        unroll_len = int(get_attribute(self.mode, "unroll_len", 1))
        cfg = get_attribute(self.mode, "cfg", {}) or {}
        if n_sample is None or cfg.get("traj_len_inf", False):
            traj_len: float = math.inf
        else:
            traj_len = max(unroll_len, -(-n_sample // num_envs))
        self.mode.reset()
        return DingSampleBuilder(self, num_envs, traj_len)

    def process_transition(self, obs: Any, output: Any, timestep: BaseEnvTimestep) -> dict:
        return self.mode.process_transition(obs, output, timestep)

    def get_train_sample(self, transitions: List[dict]) -> List[dict]:
        return self.mode.get_train_sample(transitions)


class DingLearnMode:
    """A DI-engine learn mode as our learner's policy: ``forward(columns)`` hands it the list of sample dicts
    and returns its info dict (a list of dicts, DI-engine's multi-update form, is merged: the last wins), its
    ``priority`` as an array."""

    def __init__(self, mode: Any):
        self.mode = mode

    def forward(self, columns: Mapping[str, np.ndarray], **policy_kwargs: Any) -> Dict[str, Any]:
        out = self.mode.forward(columns_to_samples(columns), **policy_kwargs)
        if isinstance(out, (list, tuple)):
            merged: Dict[str, Any] = {}
            for part in out:
                merged.update(part)
            out = merged
        out = dict(out)
        if out.get("priority") is not None:
            out["priority"] = np.asarray(
                _array(out["priority"]) if hasattr(out["priority"], "detach") else out["priority"], dtype=np.float32
            )
        return out

    def __getattr__(self, name: str) -> Any:  # state_dict, load_state_dict, monitor_vars, ...
        return getattr(self.mode, name)


def as_collect_mode(mode: Any) -> Any:
    """A DI-engine collect mode wrapped in :class:`DingCollectMode`; anything else as it is."""
    builds_samples = hasattr(mode, "process_transition") and hasattr(mode, "get_train_sample")
    if builds_samples and not hasattr(mode, "sample_builder"):
        return DingCollectMode(mode)
    return mode


def as_eval_mode(mode: Any) -> Any:
    """A DI-engine mode (it has ``get_attribute``, as every DI-engine mode does) wrapped in
    :class:`DingEvalMode`; anything else as it is."""
    if hasattr(mode, "get_attribute") and not isinstance(mode, DingEvalMode):
        return DingEvalMode(mode)
    return mode


def as_learn_mode(mode: Any) -> Any:
    """A DI-engine learn mode (it has ``monitor_vars``) wrapped in :class:`DingLearnMode`; anything else as it is."""
    if hasattr(mode, "monitor_vars") and not isinstance(mode, DingLearnMode):
        return DingLearnMode(mode)
    return mode
