"""BaseLearner: trains a policy on batches and runs hooks around it.

The learner is the algorithm object only; process shells (the serial
pipeline, :class:`parallel_rl.learner.shell.LearnerSlave`)
feed it batches. Hooks run at ``before_run``, ``after_run``, ``before_iter``
and ``after_iter``; at ``after_iter`` ``learner.priority_info`` holds the
priorities of the batch just trained on.

Hooks come from config keys named ``<hook>_<position>`` (DI-engine style)::

    hook=dict(save_ckpt_after_iter=1000, log_show_after_iter=100, save_ckpt_after_run=True)
"""

from __future__ import annotations

import abc
import logging
import os
import time
import types
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
from easydict import EasyDict

from ..errors import ConfigError
from ..registry import Registry
from ..tblog import add_scalars
from .defaults import BaseLearnerSection

logger = logging.getLogger(__name__)

POSITIONS = ("before_run", "after_run", "before_iter", "after_iter")
HOOK_REGISTRY = Registry("learner hook")
LEARNER_REGISTRY = Registry("learner")


class LearnerHook(abc.ABC):
    """Runs at one position; lower ``priority`` runs first."""

    def __init__(self, name: str, priority: float, position: str, **kwargs: Any):
        if position not in POSITIONS:
            raise ConfigError(f"hook {name!r}: position must be one of {POSITIONS}, got {position!r}")
        self.name, self.priority, self.position = name, float(priority), position

    @abc.abstractmethod
    def __call__(self, learner: "BaseLearner") -> None: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, priority={self.priority}, position={self.position!r})"


class SaveCkptHook(LearnerHook):
    """Save ``iteration_<N>.pt`` every ``freq`` iterations (or once, at run positions)."""

    def __init__(self, name: str, priority: float, position: str, freq: int = 1, **kwargs: Any):
        super().__init__(name, priority, position)
        self.freq = int(freq)

    def __call__(self, learner: "BaseLearner") -> None:
        # N updates made: iteration_<N>.pt, resumed at N (after_iter hooks run before train_iter counts the update)
        updates = learner._updates_made()
        if self.position.endswith("_iter") and (self.freq <= 0 or updates % self.freq != 0):
            return
        learner.save_checkpoint(f"iteration_{updates}.pt")


class LoadCkptHook(LearnerHook):
    """Load a checkpoint path before the run (empty path: do nothing)."""

    def __init__(self, name: str, priority: float, position: str, path: str = "", **kwargs: Any):
        super().__init__(name, priority, position)
        self.path = path

    def __call__(self, learner: "BaseLearner") -> None:
        if self.path:
            learner.load_checkpoint(self.path)


class LogShowHook(LearnerHook):
    """Log ``learn_info`` every ``freq`` iterations."""

    def __init__(self, name: str, priority: float, position: str, freq: int = 100, **kwargs: Any):
        super().__init__(name, priority, position)
        self.freq = int(freq)

    def __call__(self, learner: "BaseLearner") -> None:
        if self.freq > 0 and learner.train_iter % self.freq == 0:
            scalars = learner.log_buffer["scalar"]
            info = " ".join(f"{k}={v:.4g}" for k, v in scalars.items() if isinstance(v, (int, float)))
            logger.info("%s: iter %d %s", learner.instance_name, learner.train_iter, info)
            values = {k: v for k, v in scalars.items() if k not in ("train_iter", "envstep")}
            add_scalars(learner.tb_logger, f"{learner.instance_name}_iter/", learner.train_iter, values)
            add_scalars(learner.tb_logger, f"{learner.instance_name}_step/", learner.collector_envstep, values)


def register_learner_hook(name: str, hook_type: type) -> None:
    """Make ``<name>_<position>`` config keys build ``hook_type`` (a :class:`LearnerHook` class)."""
    HOOK_REGISTRY.register(name, hook_type)


register_learner_hook("save_ckpt", SaveCkptHook)
register_learner_hook("load_ckpt", LoadCkptHook)
register_learner_hook("log_show", LogShowHook)


def build_learner_hook_by_cfg(cfg: Any) -> Dict[str, List[LearnerHook]]:
    """Hooks from a config, in either of DI-engine's forms.

    Short form: ``{'save_ckpt_after_iter': 1000, 'load_ckpt_before_run': 'path', ...}``.
    Full form: a list of ``dict(name=..., type=..., priority=..., position=..., ext_args={...})``
    (``name`` defaults to ``type``, ``priority`` to the type's built-in one), or such a dict
    as the value of a short-form key.
    """
    hooks: Dict[str, List[LearnerHook]] = {p: [] for p in POSITIONS}
    items = [(None, h) for h in cfg] if isinstance(cfg, (list, tuple)) else list(cfg.items())
    for key, value in items:
        if isinstance(value, Mapping):  # the full form
            unknown = set(value) - {"name", "type", "priority", "position", "ext_args"}
            if unknown or "type" not in value or "position" not in value:
                raise ConfigError(
                    f"learner hook {value!r}: the full form needs type and position, and may have "
                    f"name, priority, ext_args (unknown: {sorted(unknown)})"
                )
            kind, position = value["type"], value["position"]
            name = value.get("name", kind)
            priority = value.get("priority", _BUILTIN_PRIORITY.get(kind, 50))
            hook = HOOK_REGISTRY.build(kind, name, priority, position, **dict(value.get("ext_args") or {}))
            hooks[hook.position].append(hook)  # the hook checked its position
            continue
        position = next((p for p in POSITIONS if key.endswith("_" + p)), None)
        if position is None:
            raise ConfigError(f"learner hook key {key!r} must end with one of _{', _'.join(POSITIONS)}")
        name = key[: -len(position) - 1]
        if value is False or value is None:
            continue
        kwargs = {"path": value} if isinstance(value, str) else {"freq": int(value)}
        hooks[position].append(HOOK_REGISTRY.build(name, name, _BUILTIN_PRIORITY.get(name, 50), position, **kwargs))
    return {p: sorted(hooks[p], key=lambda h: h.priority) for p in POSITIONS}


# built-in priorities: loading before anything, logging last
_BUILTIN_PRIORITY = {"load_ckpt": 20, "save_ckpt": 50, "log_show": 80}


def merge_hooks(
    hooks1: Mapping[str, List[LearnerHook]], hooks2: Mapping[str, List[LearnerHook]]
) -> Dict[str, List[LearnerHook]]:
    """Union of two hook tables, each position sorted by priority (stable: ``hooks1`` first on ties)."""
    return {p: sorted(list(hooks1.get(p, [])) + list(hooks2.get(p, [])), key=lambda h: h.priority) for p in POSITIONS}


def add_learner_hook(hooks: Dict[str, List[LearnerHook]], hook: LearnerHook) -> None:
    """Put ``hook`` into the hook table ``hooks`` at its position, in priority order (DI-engine's name)."""
    hooks[hook.position] = merge_hooks(hooks, {hook.position: [hook]})[hook.position]


class IterCount(int):
    """The iterations trained, as an int that also answers DI-engine's ``CountVar.val``."""

    @property
    def val(self) -> int:
        return int(self)


class BaseLearner:
    @classmethod
    def default_config(cls) -> EasyDict:
        """DI-engine's seed name for the ``policy.learn.learner`` section's defaults (:class:`~.defaults.BaseLearnerSection`)."""
        return BaseLearnerSection.defaults()

    def __init__(
        self,
        cfg: EasyDict,
        policy=None,
        tb_logger=None,
        dist_info: Optional[Tuple[int, int]] = None,
        exp_name: Optional[str] = None,
        instance_name: str = "learner",
        exp_dir: Optional[str] = None,
    ):
        """``policy``: a policy's ``learn_mode`` (``forward(batch) -> info``, ``state_dict``, ``load_state_dict``).

        DI-engine's arguments, in its order: ``tb_logger`` (anything with ``add_scalar(tag, value, step)``)
        gets the scalars the ``log_show`` hook logs; ``dist_info`` is ``(rank, world_size)``; ``exp_name``
        names the run and, without an ``exp_dir``, is where checkpoints go (``./<exp_name>/ckpt``, as in
        DI-engine). With neither, checkpoints are not written (a warning says so)."""
        self.cfg = cfg
        self.policy = policy
        self.tb_logger = tb_logger
        self.instance_name = instance_name
        self.exp_dir = exp_dir if exp_dir is not None else exp_name
        self._exp_name = exp_name
        self.train_iter = 0  # DI-engine's count: an after_iter hook sees the updates made before its own
        self._updating = False  # between an update and the end of its after_iter hooks
        self._log_buffer: Optional[Dict[str, Dict[str, Any]]] = None  # set through the log_buffer setter
        self._raw_info: Dict[str, Any] = {}
        self._learn_info: Optional[Dict[str, float]] = {}
        self.priority_info: Optional[Dict[str, np.ndarray]] = None
        self._hooks = build_learner_hook_by_cfg(cfg.hook)
        self._last_time = time.perf_counter()
        self.collector_envstep = 0  # the newest envstep passed to train()
        self.rank, self.world_size = dist_info if dist_info is not None else (0, 1)  # DI-engine's distributed names
        self.learner_done = False  # a start() ran to its end (DI-engine's learn_info key)
        self.monitor = types.SimpleNamespace()  # where DI-engine's hooks put the learner's variables
        self.ckpt_name: Optional[str] = None  # the checkpoint last saved or loaded
        self._warned_no_exp_dir = False
        self._data_source: Optional[Any] = None

    @property
    def policy(self):
        return self._policy

    @policy.setter
    def policy(self, policy) -> None:
        """A learn mode; DI-engine's (one with ``monitor_vars``) is driven through its adapter, which hands it
        the batch as DI-engine's list of sample dicts."""
        from ..policy.ding_modes import as_learn_mode  # imported when a DI-engine mode is used

        self._policy = as_learn_mode(policy) if policy is not None else None

    @property
    def exp_name(self) -> str:
        """The run's name: ``exp_name`` as given, else the exp_dir's last part, else DI-engine's default."""
        if self._exp_name is not None:
            return self._exp_name
        return os.path.basename(os.path.normpath(self.exp_dir)) if self.exp_dir else "default_experiment"

    @property
    def logger(self) -> logging.Logger:
        return logger

    def info(self, s: str) -> None:
        """Log ``s`` as this learner (DI-engine's helper for hooks)."""
        logger.info("%s: %s", self.instance_name, s)

    def debug(self, s: str) -> None:
        logger.debug("%s: %s", self.instance_name, s)

    def register_hook(self, hook: LearnerHook) -> None:
        add_learner_hook(self._hooks, hook)

    def hooks(self, position: str) -> List[LearnerHook]:
        return list(self._hooks[position])

    def call_hook(self, name: str) -> None:
        """Run the hooks at position ``name`` (DI-engine's argument name)."""
        for hook in self._hooks[name]:
            hook(self)

    @property
    def last_iter(self) -> IterCount:
        """Iterations trained so far: an int, and DI-engine's ``last_iter.val``."""
        return IterCount(self.train_iter)

    def train(
        self, data: Mapping[str, np.ndarray], envstep: int = -1, policy_kwargs: Optional[dict] = None
    ) -> Dict[str, float]:
        """One update on ``data``; returns scalar learn info. ``policy_kwargs`` go to the learn mode's forward."""
        self.call_hook("before_iter")
        if envstep >= 0:
            self.collector_envstep = envstep
        log = self._policy.forward(data, **policy_kwargs) if policy_kwargs else self._policy.forward(data)
        priority = log.pop("priority", None)
        if priority is not None and "index" in data:
            self.priority_info = {"index": data["index"], "uid": data["uid"], "priority": priority}
        else:
            self.priority_info = None
        log["train_iter"] = self.train_iter + 1
        log["envstep"] = envstep
        # scalars may be 0-d tensors on the training device: they become floats only when read
        # (learn_info), so an update never waits for the device to hand a number to the host
        self._raw_info, self._learn_info, self._log_buffer = log, None, None
        self._updating = True
        try:
            self.call_hook("after_iter")
        finally:
            self._updating = False
        self.train_iter += 1  # as DI-engine's last_iter.add(1): after the after_iter hooks
        return log

    def _updates_made(self) -> int:
        """Updates made so far, an update whose after_iter hooks are running included (what a checkpoint holds)."""
        return self.train_iter + 1 if self._updating else self.train_iter

    @property
    def learn_info(self) -> Dict[str, Any]:
        """The last update's scalars as floats (whatever the policy reports: names are its own), with
        DI-engine's keys beside them: ``learner_step`` (iterations trained), ``priority_info``,
        ``learner_done`` (a :meth:`start` ran to its end)."""
        if self._learn_info is None:
            # 0-d tensors / numpy scalars become floats; anything else (arrays, dicts of [scalars]) stays
            self._learn_info = {
                k: (float(v) if getattr(v, "ndim", None) == 0 and not isinstance(v, (int, float)) else v)
                for k, v in self._raw_info.items()
            }
        self._learn_info.update(
            learner_step=self.train_iter, priority_info=self.priority_info, learner_done=self.learner_done
        )
        return self._learn_info

    @property
    def log_buffer(self) -> Dict[str, Dict[str, Any]]:
        """DI-engine's ``log_buffer``: the last update's values by kind. A policy's ``[scalars]<name>`` and
        ``[histogram]<name>`` keys go to ``scalars`` / ``histogram`` under ``<name>``, the rest to ``scalar``.
        What a hook sets (DI-engine's setter) is returned until the next update."""
        if self._log_buffer is not None:
            return self._log_buffer
        buffer: Dict[str, Dict[str, Any]] = {"scalar": {}, "scalars": {}, "histogram": {}}
        info = self.learn_info
        for key in self._raw_info:
            kind = next((k for k in ("scalars", "histogram") if key.startswith(f"[{k}]")), None)
            buffer[kind or "scalar"][key.split("]", 1)[1] if kind else key] = info[key]
        return buffer

    @log_buffer.setter
    def log_buffer(self, _log_buffer: Dict[str, Dict[str, Any]]) -> None:
        self._log_buffer = _log_buffer

    # ---- checkpoints -------------------------------------------------------------
    @property
    def ckpt_dir(self) -> str:
        if self.exp_dir is None:
            raise ConfigError(f"{self.instance_name}: no exp_dir, cannot save checkpoints")
        return os.path.join(self.exp_dir, "ckpt")

    def save_checkpoint(self, ckpt_name: Optional[str] = None) -> Optional[str]:
        """Write the full learning state under ``<exp_dir>/ckpt/`` as ``ckpt_name`` (None: ``ckpt_latest.pt``),
        atomically.

        Without an exp_dir nothing is written and None is returned, with a warning (once) that says so.
        """
        name = ckpt_name or "ckpt_latest.pt"
        if self.exp_dir is None:
            if not self._warned_no_exp_dir:
                self._warned_no_exp_dir = True
                logger.warning(
                    "%s: no exp_dir, checkpoint %r not saved (give BaseLearner exp_dir=..., or drop the "
                    "save_ckpt hooks; cluster learners save through the shared store)",
                    self.instance_name,
                    name,
                )
            return None
        from ..storage import torch_save_atomic

        os.makedirs(self.ckpt_dir, exist_ok=True)
        path = os.path.join(self.ckpt_dir, name)
        torch_save_atomic(path, {"policy": self._policy.state_dict(), "train_iter": self._updates_made()})
        self.ckpt_name = name
        return path

    def load_checkpoint(self, path: str) -> None:
        from ..storage import torch_load

        state = torch_load(path)
        self._policy.load_state_dict(state["policy"])
        self.train_iter = int(state.get("train_iter", 0))
        self.ckpt_name = os.path.basename(path)
        logger.info("%s: resumed from %s at iter %d", self.instance_name, path, self.train_iter)

    # ---- DI-engine's parallel entry: a data source, then start() ------------------------------
    def setup_dataloader(self, data_source: Any = None) -> None:
        """Where :meth:`start` takes batches: an iterable of batches or a callable returning one.

        Without an argument (DI-engine's call), batches come from ``self.get_data(batch_size)``, which a comm
        helper sets as in DI-engine; ``batch_size`` is the policy's ``get_attribute('batch_size')`` or
        ``cfg.batch_size``."""
        if data_source is None:
            data_source = self._get_data_source()
        self._data_source = data_source

    def _get_data_source(self):
        get_data = getattr(self, "get_data", None)
        from ..policy.ding_modes import get_attribute

        batch_size = get_attribute(self._policy, "batch_size", self.cfg.get("batch_size"))
        if not callable(get_data) or batch_size is None:
            raise ValueError(
                f"{self.instance_name}: setup_dataloader() without a data source needs learner.get_data "
                f"(a callable taking batch_size, as DI-engine's comm helper sets) and a batch size "
                f"(policy get_attribute('batch_size') or cfg.batch_size); got {get_data=}, {batch_size=}"
            )
        return lambda: get_data(batch_size)

    def start(self, max_iterations: Optional[int] = None) -> None:
        """``before_run`` hooks, updates on batches from the data source, ``after_run`` hooks (DI-engine's
        parallel entry). ``max_iterations=None``: ``cfg.train_iterations`` (DI-engine's key; default 1e9).
        The run also ends when an iterable source is exhausted or :meth:`close` is called (from a hook)."""
        if self._data_source is None:
            raise RuntimeError(f"{self.instance_name}: call setup_dataloader(...) before start()")
        if max_iterations is None:
            max_iterations = int(self.cfg.get("train_iterations", int(1e9)))
        if max_iterations <= 0:
            raise ValueError(f"{max_iterations=} must be > 0")
        source = self._data_source
        batches = None if callable(source) else iter(source)
        self.learner_done = False
        self.call_hook("before_run")
        try:
            for _ in range(max_iterations):
                if self._data_source is None:  # closed
                    break
                batch = source() if batches is None else next(batches, None)
                if batch is None:
                    break
                self.train(batch)
            self.learner_done = True
        finally:
            self.call_hook("after_run")

    def close(self) -> None:
        """Drop the data source, which ends a running :meth:`start` (the learner holds nothing else to close)."""
        self._data_source = None


LEARNER_REGISTRY.register("base", BaseLearner)


def store_saving(cfg: EasyDict) -> EasyDict:
    """Learner config ``cfg`` without its short-form ``save_ckpt_*`` hooks: for the cluster's learners, which save
    their state through the shared store and have no exp_dir for those hooks (each warned at every run's end that
    its checkpoint was not saved)."""
    hook = cfg.get("hook")
    if not isinstance(hook, Mapping):
        return cfg
    return EasyDict({**cfg, "hook": {k: v for k, v in hook.items() if not k.startswith("save_ckpt_")}})


def create_learner(cfg: EasyDict, *args: Any, **kwargs: Any) -> BaseLearner:
    """Build the learner named by ``cfg.type`` (``base`` or a registered one); the other arguments go to its
    constructor (``policy``, ``tb_logger``, ``dist_info``, ``exp_name``, ``instance_name``, ``exp_dir``)."""
    return LEARNER_REGISTRY.build(cfg.get("type", "base"), cfg, *args, **kwargs)
