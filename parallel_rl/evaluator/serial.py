"""Serial evaluators: greedy episodes on a vector env against the stop value (``InteractionSerialEvaluator``),
or a policy's outputs on a labelled dataset scored by a metric (``MetricSerialEvaluator`` with an ``IMetric``)."""

from __future__ import annotations

import abc
import logging
import math
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
from easydict import EasyDict

from ..policy.memory import LaneMemory, strip_state
from ..collector.stats import SequenceSummaryStats
from ..envs.env_manager import EnvManager
from ..registry import Registry, import_modules
from ..tblog import add_scalars

logger = logging.getLogger(__name__)

EVALUATOR_REGISTRY = Registry("evaluator")


class VectorEvalMonitor:
    """Spreads ``n_episode`` evenly over ``env_num`` envs and keeps each env's first episodes.

    Taking whichever episodes finish first would favour short (often bad)
    episodes; here env i contributes exactly its quota, so the mean is unbiased.
    """

    def __init__(self, env_num: int, n_episode: int):
        if n_episode < env_num:
            raise ValueError(f"{n_episode=} must be >= {env_num=} (every env runs at least one episode)")
        base, extra = divmod(n_episode, env_num)
        self.quota = np.array([base + (i < extra) for i in range(env_num)], dtype=np.int64)
        self._returns: List[List[float]] = [[] for _ in range(env_num)]
        self._lengths: List[List[int]] = [[] for _ in range(env_num)]
        self._info: List[List[dict]] = [[] for _ in range(env_num)]
        self._video: List[List[List[np.ndarray]]] = [[[] for _ in range(q)] for q in self.quota]  # frames

    def wants(self, env_id: int) -> bool:
        return len(self._returns[env_id]) < self.quota[env_id]

    def update(self, env_id: int, episode_return: float, episode_length: int) -> None:
        if self.wants(env_id):
            self._returns[env_id].append(float(episode_return))
            self._lengths[env_id].append(int(episode_length))

    def update_info(self, env_id: int, info: dict) -> None:
        """Keep an ended episode's env info (call before :meth:`update` for that episode)."""
        if self.wants(env_id):
            self._info[env_id].append(dict(info))

    def get_episode_info(self) -> Optional[Dict[str, float]]:
        """``<key>_mean`` over the kept episodes for every numeric info key; None if none were kept."""
        infos = [i for env in self._info for i in env]
        if not infos:
            return None
        keys = sorted(
            {
                k
                for i in infos
                for k, v in i.items()
                if np.isscalar(v) and isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_))
            }
        )
        return {f"{k}_mean": float(np.mean([i[k] for i in infos if k in i])) for k in keys}

    def is_finished(self) -> bool:
        return all(len(r) >= q for r, q in zip(self._returns, self.quota))

    def returns(self) -> List[float]:
        return [r for env in self._returns for r in env]

    def lengths(self) -> List[int]:
        return [n for env in self._lengths for n in env]

    # ---- DI-engine's names ----------------------------------------------------------------------
    def update_reward(self, env_id: int, reward: Any) -> None:
        """An ended episode's return (DI-engine's call; its length is not known here: 0)."""
        self.update(env_id, float(reward), 0)

    def get_episode_return(self) -> List[float]:
        return self.returns()

    def get_latest_reward(self, env_id: int) -> float:
        return self._returns[env_id][-1]

    def get_current_episode(self) -> int:
        """Episodes kept so far."""
        return sum(len(r) for r in self._returns)

    def update_video(self, imgs: Dict[int, np.ndarray]) -> None:
        """One frame (H, W, C) per env, ``{env_id: frame}``, added to the episode that env is running."""
        for env_id, img in imgs.items():
            if self.wants(env_id):
                self._video[env_id][len(self._returns[env_id])].append(np.asarray(img))

    def get_video(self) -> np.ndarray:
        """DI-engine's ``(N, T, C, H, W)``: the worst, median and best episodes' frames (shorter ones padded
        with their last frame)."""
        videos = [np.transpose(np.stack(v), (0, 3, 1, 2)) for env in self._video for v in env if v]
        if not videos:
            raise ValueError("no frames: call update_video(...) during the episodes first")
        order = np.argsort(self.returns()[: len(videos)])
        n = len(order)  # worst, median(s), best, as DI-engine picks them
        chosen = [videos[order[i]] for i in (range(n) if n <= 3 else (0, n // 2 - 1, n // 2, n - 1))]
        length = max(len(v) for v in chosen)
        return np.stack([np.concatenate([v, np.repeat(v[-1:], length - len(v), 0)]) for v in chosen])


# learner iterations between evaluations when neither the caller nor the evaluator's cfg says (run.eval_freq's)
DEFAULT_EVAL_FREQ = 200


class ISerialEvaluator(abc.ABC):
    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(eval_freq=DEFAULT_EVAL_FREQ)

    _last_eval_iter: Optional[int] = None
    eval_freq: int = DEFAULT_EVAL_FREQ

    def should_eval(self, train_iter: int) -> bool:
        """True on the first call and then every ``eval_freq`` learner iterations."""
        if self._last_eval_iter is not None and train_iter - self._last_eval_iter < self.eval_freq:
            return False
        self._last_eval_iter = train_iter
        return True

    @abc.abstractmethod
    def eval(self, save_ckpt_fn: Optional[Callable[[str], None]] = None, train_iter: int = -1, envstep: int = -1): ...

    def _name(self, tb_logger, exp_name: str, instance_name: str) -> None:
        """DI-engine's constructor keywords: where results go (``tb_logger``: anything with
        ``add_scalar(tag, value, step)``; None writes nothing) and what this evaluator is called."""
        self.tb_logger, self.exp_name, self.instance_name = tb_logger, exp_name, instance_name

    def _log(self, info: Dict[str, Any], train_iter: int, envstep: int) -> None:
        """An evaluation's numbers under DI-engine's tags: ``<instance_name>_iter/<name>`` at ``train_iter``,
        ``<instance_name>_step/<name>`` at ``envstep``."""
        values = {k: v for k, v in info.items() if k not in ("train_iter", "envstep")}
        add_scalars(self.tb_logger, f"{self.instance_name}_iter/", train_iter, values)
        add_scalars(self.tb_logger, f"{self.instance_name}_step/", envstep, values)

    @staticmethod
    def _eval_mode(policy: Any) -> Any:
        """A DI-engine eval mode (``forward({env_id: obs})``) through its adapter; anything else as it is."""
        from ..policy.ding_modes import as_eval_mode  # imported when a DI-engine mode is used

        return as_eval_mode(policy)

    @staticmethod
    def _stop_value(value: Optional[float], cfg: Any) -> Optional[float]:
        """The stop value: the argument, else ``cfg.stop_value`` (DI-engine's key); None when neither is set: no
        stop value, the evaluator never signals a stop and the run trains to its budget."""
        value = value if value is not None else cfg.get("stop_value")
        return None if value is None else float(value)

    @staticmethod
    def _eval_freq(value: Optional[int], cfg: Any) -> int:
        """Learner iterations between evaluations: the argument (the pipelines pass ``run.eval_freq``), else
        ``cfg.eval_freq`` (DI-engine's key, for an evaluator made from Python), else :data:`DEFAULT_EVAL_FREQ`."""
        value = value if value is not None else cfg.get("eval_freq", DEFAULT_EVAL_FREQ)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"eval_freq must be an int >= 1, got {value!r}")
        return value

    @staticmethod
    def _from_cfg(value: Any, cfg: Any, key: str, argument: str) -> Any:
        """An argument, or the cfg's ``key`` when it is None (DI-engine reads n_episode from cfg)."""
        value = value if value is not None else cfg.get(key)
        if value is None:
            raise ValueError(f"the evaluator needs {argument}=... or cfg.{key}")
        return value


class InteractionSerialEvaluator(ISerialEvaluator):
    @classmethod
    def default_config(cls) -> EasyDict:
        """DI-engine's seed name for the ``policy.eval.evaluator`` section's defaults
        (:class:`~.defaults.SerialEvaluatorSection`)."""
        from .defaults import SerialEvaluatorSection

        return SerialEvaluatorSection.defaults()

    def __init__(
        self,
        cfg: EasyDict,
        env: Optional[EnvManager] = None,
        policy=None,
        tb_logger=None,
        exp_name: str = "default_experiment",
        instance_name: str = "evaluator",
        *,
        stop_value: Optional[float] = None,
        n_evaluator_episode: Optional[int] = None,
        seed: int = 0,
        eval_freq: Optional[int] = None,
    ):
        """DI-engine's arguments in its order (``env`` and ``policy`` may come later through ``reset_env`` /
        ``reset_policy``), then ours by keyword. ``policy``: a policy mode whose ``forward(obs)`` returns
        greedy actions. ``stop_value``, ``n_evaluator_episode`` and ``eval_freq`` default to ``cfg.stop_value``,
        ``cfg.n_episode`` and ``cfg.eval_freq`` (DI-engine's keys; no stop value: never a stop); ``tb_logger``
        gets every evaluation's numbers."""
        self.cfg = EasyDict({**self.default_config(), **(cfg or {})})
        self._name(tb_logger, exp_name, instance_name)
        self.env = env
        self._policy = self._eval_mode(policy) if policy is not None else None
        self.stop_value = self._stop_value(stop_value, self.cfg)
        self.eval_freq = self._eval_freq(eval_freq, self.cfg)
        self.n_episode = int(self._from_cfg(n_evaluator_episode, self.cfg, "n_episode", "n_evaluator_episode"))
        self._seed = seed
        self._last_eval_iter: Optional[int] = None
        self.eval_count = 0
        self.best_return = -math.inf

    def reset_policy(self, _policy=None) -> None:
        if _policy is not None:
            self._policy = self._eval_mode(_policy)

    def reset_env(self, _env: Optional[EnvManager] = None) -> None:
        """Take ``_env`` (if given); the next :meth:`eval` resets it."""
        if _env is not None:
            self.env = _env

    def reset(self, _policy=None, _env: Optional[EnvManager] = None) -> None:
        """DI-engine's names: new policy and/or env, and the evaluation count and best return start over."""
        self.reset_env(_env)
        self.reset_policy(_policy)
        self._last_eval_iter = None
        self.eval_count = 0
        self.best_return = -math.inf

    def eval(
        self,
        save_ckpt_fn: Optional[Callable[[str], None]] = None,
        train_iter: int = -1,
        envstep: int = -1,
        n_episode: Optional[int] = None,
        force_render: bool = False,
        policy_kwargs: Optional[dict] = None,
        on_episode: Optional[Callable[[int], None]] = None,
    ) -> Tuple[bool, Dict]:
        """Run the episodes; returns (stop_flag, info). Saves ``ckpt_best`` on a new best mean. ``on_episode``
        is told the number of episodes finished so far after each one ends (a progress bar's).

        ``policy_kwargs`` go to every ``forward`` call. The ended episodes' env info is averaged into
        ``info["episode_info"]`` (``<key>_mean``) when the env reports any. ``force_render=True`` is refused: the env manager renders nothing.
        """
        if force_render:
            raise ValueError(f"{force_render=}: rendering is not supported by parallel_rl's env manager")
        if self.env is None or self._policy is None:
            raise RuntimeError(
                f"{self.instance_name}: eval() needs an env and a policy: pass them to the "
                f"constructor or to reset_env(env) / reset_policy(policy) first"
            )
        policy_kwargs = policy_kwargs or {}
        n_episode = n_episode or self.n_episode
        monitor = VectorEvalMonitor(self.env.num_envs, n_episode)
        self.env.keep_info = True
        start = time.perf_counter()
        env_steps = 0
        self.env.reset(seed=self._seed + 7919 * self.eval_count)
        reset_policy = getattr(self._policy, "reset", None)  # DI-engine's contract: a policy with state is told
        if reset_policy is not None:
            reset_policy()
        memory = LaneMemory.of(self._policy, self.env.num_envs)
        deadline = start + self.cfg.max_seconds if self.cfg.max_seconds > 0 else math.inf
        while not monitor.is_finished():
            if time.perf_counter() > deadline:
                logger.warning(
                    "evaluator: gave up after %.0fs with %d/%d episodes",
                    self.cfg.max_seconds,
                    len(monitor.returns()),
                    n_episode,
                )
                break
            if memory is None:
                step = self.env.step(self._policy.forward(self.env.obs, **policy_kwargs))
            else:  # a policy with memory: each lane's state in, the next out (zeroed where an episode ended)
                out = self._policy.forward(self.env.obs, state=memory.state, **policy_kwargs)
                step = self.env.step(strip_state(out))
                memory.advance(out, step)
            env_steps += int(step.valid.sum())
            for env_id in np.flatnonzero(step.episode_length > 0):  # whole episodes (not a lost life)
                monitor.update_info(int(env_id), self.env.env_info(int(env_id)))
                monitor.update(int(env_id), step.episode_return[env_id], step.episode_length[env_id])
                if reset_policy is not None:
                    reset_policy([int(env_id)])
                if on_episode is not None:
                    on_episode(len(monitor.returns()))
        self.eval_count += 1
        returns = monitor.returns()
        ret, length = SequenceSummaryStats.from_sequence(returns), SequenceSummaryStats.from_sequence(monitor.lengths())
        mean = ret.mean
        info = {
            "train_iter": train_iter,
            "envstep": envstep,
            "episodes": len(returns),
            "env_steps": env_steps,
            "duration": time.perf_counter() - start,
            "eval_episode_return_mean": mean,
            "eval_episode_return_std": ret.std,
            "eval_episode_return_max": ret.max,
            "eval_episode_return_min": ret.min,
            "episode_length_mean": length.mean,
            "episode_length_std": length.std,
            "episode_length_max": length.max,
            "episode_length_min": length.min,
        }
        episode_info = monitor.get_episode_info()
        if episode_info:
            info["episode_info"] = episode_info
        if returns and mean > self.best_return:
            self.best_return = mean
            if save_ckpt_fn is not None:
                save_ckpt_fn("ckpt_best.pt")
        stop_flag = (
            self.stop_value is not None and bool(returns) and len(returns) == n_episode and mean >= self.stop_value
        )
        self._log(info, train_iter, envstep)
        return stop_flag, info

    def close(self) -> None:
        self.env.close()


class IMetric(abc.ABC):
    """DI-engine's metric interface for :class:`MetricSerialEvaluator`."""

    @abc.abstractmethod
    def eval(self, inputs: Any, label: Any) -> Any:
        """The metric of one batch: the policy's output ``inputs`` against ``label``."""

    @abc.abstractmethod
    def reduce_mean(self, inputs: List[Any]) -> Any:
        """The mean of the batches' metrics."""

    @abc.abstractmethod
    def gt(self, metric1: Any, metric2: Any) -> bool:
        """Whether ``metric1`` is at least as good as ``metric2`` (decides "best" and the stop)."""


class MetricSerialEvaluator(ISerialEvaluator):
    """Evaluates a policy on a labelled dataset: ``env`` is a ``(DataLoader, IMetric)`` pair (DI-engine's).

    ``eval`` runs ``policy.forward(inputs)`` on every ``(inputs, label)`` batch of the data loader
    (a ``torch.utils.data.DataLoader`` or any iterable of pairs), scores it with ``metric.eval``
    and averages with ``metric.reduce_mean``; a result that ``metric.gt`` ranks at least as good as
    the best so far saves ``ckpt_best.pt`` through ``save_ckpt_fn``, and one at least as good as
    ``cfg.stop_value`` (None: never) is the stop signal.
    """

    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(
            # evaluate every N learner iterations
            eval_freq=50,
            # a metric that IMetric.gt ranks at least as good as this stops training (None: never)
            stop_value=None,
            type="metric",
        )

    def __init__(
        self,
        cfg: Optional[EasyDict],
        env: Optional[Tuple[Any, IMetric]] = None,
        policy=None,
        tb_logger=None,
        exp_name: str = "default_experiment",
        instance_name: str = "evaluator",
        **kwargs: Any,
    ):
        """``policy``: a mode or module with ``forward(inputs)``; ``env``: ``(data loader, metric)``;
        ``tb_logger`` gets a metric that is a number, or a dict's numbers."""
        self.cfg = EasyDict({**self.default_config(), **(cfg or {})})
        self._name(tb_logger, exp_name, instance_name)
        self.eval_freq = self._eval_freq(None, self.cfg)
        self._policy = policy
        self.dataloader: Any = None
        self.metric: Optional[IMetric] = None
        self.reset_env(env)
        self.eval_count = 0
        self.best_result: Any = None

    def reset_env(self, _env: Optional[Tuple[Any, IMetric]] = None) -> None:
        """Take a new ``(data loader, metric)`` pair."""
        if _env is not None:
            dataloader, metric = _env
            if not isinstance(metric, IMetric):
                raise TypeError(
                    f"MetricSerialEvaluator needs (DataLoader, IMetric), got a {type(metric).__name__} metric"
                )
            self.dataloader, self.metric = dataloader, metric

    def reset_policy(self, _policy=None) -> None:
        if _policy is not None:
            self._policy = _policy

    def reset(self, _policy=None, _env: Optional[Tuple[Any, IMetric]] = None) -> None:
        """New policy and/or data; the evaluation count and the best result start over."""
        self.reset_env(_env)
        self.reset_policy(_policy)
        self._last_eval_iter = None
        self.eval_count = 0
        self.best_result = None

    def eval(
        self, save_ckpt_fn: Optional[Callable[[str], None]] = None, train_iter: int = -1, envstep: int = -1
    ) -> Tuple[bool, Any]:
        """Score the policy on the whole data loader; returns ``(stop_flag, mean metric)``."""
        import torch

        if self.metric is None or self._policy is None:
            raise RuntimeError(
                f"{self.instance_name}: eval() needs (data loader, metric) and a policy: pass them "
                f"to the constructor or to reset_env((loader, metric)) / reset_policy(policy) first"
            )

        start = time.perf_counter()
        results = []
        with torch.no_grad():
            for inputs, label in self.dataloader:
                results.append(self.metric.eval(self._policy.forward(inputs), label))
        if not results:
            raise ValueError("MetricSerialEvaluator.eval: the data loader yielded no batch")
        result = self.metric.reduce_mean(results)
        self.eval_count += 1
        logger.info(
            "metric evaluator: train_iter=%d envstep=%d result=%s (%d batches, %.2fs)",
            train_iter,
            envstep,
            result,
            len(results),
            time.perf_counter() - start,
        )
        if self.best_result is None or self.metric.gt(result, self.best_result):
            self.best_result = result
            if save_ckpt_fn is not None:
                save_ckpt_fn("ckpt_best.pt")
        stop_flag = self.cfg.stop_value is not None and bool(self.metric.gt(result, self.cfg.stop_value))
        self._log(result if isinstance(result, dict) else {"metric": result}, train_iter, envstep)
        return stop_flag, result

    def close(self) -> None:
        """Nothing to close (the data loader belongs to the caller)."""


EVALUATOR_REGISTRY.register("interaction", InteractionSerialEvaluator)
EVALUATOR_REGISTRY.register("metric", MetricSerialEvaluator)


def create_serial_evaluator(cfg: EasyDict, **kwargs: Any) -> ISerialEvaluator:
    """Build the evaluator ``cfg.type`` names (``interaction``, ``metric`` or a registered one; DI-engine's
    ``create_serial_evaluator``), after importing ``cfg.import_names``. ``kwargs`` go to its constructor
    (``env``, ``policy``, and for ``interaction`` also ``stop_value``, ``n_evaluator_episode``)."""
    import_modules(cfg.get("import_names", []), "evaluator import_names")
    return EVALUATOR_REGISTRY.build(cfg.get("type", "interaction"), cfg, **kwargs)
