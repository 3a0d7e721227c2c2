"""The serial pipeline: collect, train and evaluate in one process.

The same components as the cluster (env manager, policy, collector, commander,
replay buffer, learner, evaluator), wired in one loop. The policy's data flow
decides what happens to collected data: off-policy (DQN, SAC) data goes
through the replay buffer, on-policy (PPO) data is one segment the learner
trains on once (its epochs) and drops.

Its full state (``<exp_dir>/ckpt/serial_state.pt``: the policy's learning state, the counters, the best
evaluation) is saved at every evaluation and at the end; ``resume=DIR`` continues from it (``serial --resume``).
The replay buffer, the envs' episodes and the random generators are not saved: a resumed run refills its buffer
with the resumed policy (no random warm-up again).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Optional

from easydict import EasyDict

from ..data.buffer import create_buffer
from ..errors import ConfigError, StorageError
from ..envs.env_manager import EnvManager
from ..policy import create_policy
from ..runtime import budget_used_up, experiment_dir, set_torch_threads
from ..storage import torch_load, torch_save_atomic
from ..storage.checkpoints import SERIAL_BEST, SERIAL_CKPT_DIR, SERIAL_STATE, BestRecord, save_best_record
from ..storage.names import BEST_RECORD
from ..tblog import TensorBoardLogger
from ..collector.serial import create_serial_collector
from ..coordinator.coordinator import TRAIN_RETURN_WINDOW, mean_return
from .commander import BaseSerialCommander
from ..evaluator.serial import InteractionSerialEvaluator
from ..learner.learner import create_learner

logger = logging.getLogger(__name__)


@dataclass
class TrainResult:
    solved: bool
    reason: str
    env_steps: int
    train_iter: int
    last_eval_return: float
    best_eval_return: float
    duration: float

    def summary(self) -> str:
        verdict = "solved" if self.solved else "stopped"
        return (
            f"{verdict}: {self.reason}; env_steps={self.env_steps} train_iter={self.train_iter} "
            f"last_eval_return={self.last_eval_return:.1f} best_eval_return={self.best_eval_return:.1f} "
            f"time={self.duration:.2f}s"
        )


def warm_up(policy_cfg: EasyDict, collector, buffer) -> None:
    """Off-policy: ``policy.random_collect_size`` transitions made with uniformly random actions go into the
    replay buffer before the first update (DI-engine's random_collect, RL Zoo's learning_starts)."""
    size = int(policy_cfg.get("random_collect_size", 0) or 0)  # only off-policy types have the key
    if size <= 0:
        return
    logger.info("serial: collecting %d transitions with random actions before training", size)
    data = collector.collect(size, train_iter=0, random_collect=True, record_random_collect=False, keep_extra=True)
    buffer.push(data, cur_collector_envstep=collector.envstep)


def prepare_run(cfg: EasyDict) -> str:
    """What every in-process pipeline does first: its experiment directory (returned) exists and holds the
    config (``config.json``: ``parallel_rl.load_policy(exp_dir)`` needs no config file), and torch runs on
    ``system.torch_num_threads`` (pipelines are called from Python too, not only by the CLI)."""
    from ..config.schema import save_run_config

    exp_dir = experiment_dir(cfg)
    os.makedirs(exp_dir, exist_ok=True)
    save_run_config(cfg, exp_dir)
    set_torch_threads(cfg.system.torch_num_threads)
    return exp_dir


def load_serial_state(resume: str) -> dict:
    """The full state a serial run saved in its experiment directory ``resume``; ConfigError in one line when
    there is none (or it does not load)."""
    path = os.path.join(os.path.abspath(resume), SERIAL_CKPT_DIR, SERIAL_STATE)
    if not os.path.isfile(path):
        raise ConfigError(
            f"--resume {resume}: no saved serial state in {os.path.dirname(path)} ({SERIAL_STATE}); "
            f"pass the experiment directory of the serial run to continue (its exp_name)"
        )
    try:
        state = torch_load(path)
        int(state["train_iter"]), int(state["env_steps"]), dict(state["policy"])
    except (StorageError, KeyError, TypeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"--resume {resume}: {path} cannot be resumed ({first}); start over without --resume"
        ) from None
    return state


def serial_pipeline(
    cfg: EasyDict, progress: Optional[Callable[[dict], None]] = None, resume: Optional[str] = None
) -> TrainResult:
    """Train until the evaluator's mean return reaches ``run.stop_value`` or a budget runs out; ``resume``: the
    experiment directory of an earlier serial run to continue (its counters go on; the budgets count them).

    ``progress`` is called after each evaluation with its info, and after each collect with ``envstep``,
    ``train_iter`` and ``train_return`` (the mean return of the last ``TRAIN_RETURN_WINDOW`` training episodes,
    SB3's ``rollout/ep_rew_mean``, the cluster's ``train_return``; NaN before the first episode ends), which is
    also TensorBoard's ``collector/train_return``."""
    start = time.perf_counter()
    saved = None
    if resume:
        saved = load_serial_state(resume)  # before anything is written there
        cfg = EasyDict({**cfg, "exp_name": os.path.abspath(resume)})
    exp_dir = prepare_run(cfg)
    collector_env = EnvManager.from_cfg(cfg.env, cfg.env.collector_env_num, seed=cfg.seed)
    evaluator_env = EnvManager.from_cfg(cfg.env, cfg.env.evaluator_env_num, seed=cfg.seed + 10_000, evaluating=True)
    policy = create_policy(cfg.policy, collector_env.obs_dim, collector_env.action_spec, seed=cfg.seed)
    learner = create_learner(cfg.policy.learn.learner, policy.learn_mode, exp_dir=exp_dir)
    collector = create_serial_collector(
        cfg.policy.collect.collector,
        env=collector_env,
        policy=policy.collect_mode,
        **({"nstep": cfg.policy.nstep} if cfg.policy.collect.collector.type == "sample" else {}),
        discount_factor=cfg.policy.discount_factor,
    )
    evaluator = InteractionSerialEvaluator(
        cfg.policy.eval.evaluator,
        evaluator_env,
        policy.eval_mode,
        stop_value=cfg.run.stop_value,
        n_evaluator_episode=cfg.env.n_evaluator_episode,
        seed=cfg.seed + 20_000,
        eval_freq=cfg.run.eval_freq,
    )
    buffer = create_buffer(cfg.policy.other.replay_buffer)
    if collector_env.frame_stack and hasattr(buffer, "store_frames_once"):  # ALE's stacks: each frame once
        buffer.store_frames_once()
    tb = TensorBoardLogger(os.path.join(exp_dir, "tensorboard") if cfg.system.tensorboard else None)
    commander = BaseSerialCommander(None, learner, collector, evaluator, buffer, cfg.policy)
    learn = cfg.policy.learn
    budget = cfg.run
    last_return = best_return = float("nan")
    train_returns = deque(maxlen=TRAIN_RETURN_WINDOW)
    solved, reason = False, ""
    if saved is not None:
        policy.load_state_dict(saved["policy"])
        learner.train_iter, collector.envstep = int(saved["train_iter"]), int(saved["env_steps"])
        if saved.get("best_eval_return") is not None:  # ckpt_best.pt is replaced only by a better one
            evaluator.best_return = best_return = float(saved["best_eval_return"])
        start -= float(saved.get("seconds", 0.0))  # the time budget counts the earlier runs too
        print(f"resumed {exp_dir}: env_steps={collector.envstep} train_iter={learner.train_iter}", flush=True)

    def save_checkpoint(name: str) -> None:
        learner.save_checkpoint(name)
        if name == SERIAL_BEST:  # the evaluator's new best: its record beside it (what `eval` prints)
            save_best_record(
                os.path.join(learner.ckpt_dir, BEST_RECORD),
                BestRecord(learner.train_iter, float(evaluator.best_return), collector.envstep, learner.train_iter),
            )

    def save_state() -> None:
        best = evaluator.best_return
        torch_save_atomic(
            os.path.join(learner.ckpt_dir, SERIAL_STATE),
            {
                "policy": policy.state_dict(),
                "train_iter": learner.train_iter,
                "env_steps": collector.envstep,
                "best_eval_return": best if math.isfinite(best) else None,
                "seconds": time.perf_counter() - start,
            },
        )

    learner.call_hook("before_run")
    try:
        if saved is None:
            warm_up(cfg.policy, collector, buffer)
        while True:
            if evaluator.should_eval(learner.train_iter):
                stop, info = evaluator.eval(save_checkpoint, learner.train_iter, collector.envstep)
                save_state()
                last_return = info["eval_episode_return_mean"]
                best_return = evaluator.best_return
                elapsed = time.perf_counter() - start
                tb.scalars(
                    collector.envstep,
                    "evaluator/",
                    eval_return=last_return,
                    env_steps_per_second=collector.envstep / elapsed if elapsed > 0 else 0.0,
                    updates_per_second=learner.train_iter / elapsed if elapsed > 0 else 0.0,
                )
                tb.scalars(
                    learner.train_iter,
                    "learner/",
                    **{
                        k: v
                        for k, v in learner.learn_info.items()
                        if k not in ("train_iter", "envstep") and isinstance(v, (int, float))
                    },
                )
                if progress is not None:
                    progress(
                        {
                            **info,
                            "elapsed": time.perf_counter() - start,
                            "stop_value": cfg.run.stop_value,
                            "best_return": best_return,
                            "train_return": mean_return(train_returns),
                        }
                    )
                if stop:
                    solved, reason = True, f"eval return {last_return:.1f} >= stop value {cfg.run.stop_value:g}"
                    break
            reason = budget_used_up(budget, collector.envstep, learner.train_iter, time.perf_counter() - start)
            if reason:
                break
            data = collector.collect(
                cfg.policy.collect.n_sample,
                train_iter=learner.train_iter,
                policy_kwargs=commander.step(),
                drop_extra=True,
                keep_extra=True,
            )
            if len(collector.last_stats.returns):
                train_returns.extend(float(r) for r in collector.last_stats.returns)
                tb.scalars(collector.envstep, "collector/", train_return=mean_return(train_returns))
            if progress is not None:
                progress(
                    {
                        "envstep": collector.envstep,
                        "train_iter": learner.train_iter,
                        "train_return": mean_return(train_returns),
                    }
                )
            policy.flow.train_on_collected(learner, buffer, data, learn, collector.envstep)
        learner.call_hook("after_run")
        save_state()
    except KeyboardInterrupt:  # Ctrl-C (and a lab trial whose sweep died): what it trained is kept for --resume
        save_state()
        raise
    finally:
        collector.close()
        evaluator.close()
        tb.close()
    return TrainResult(
        solved, reason, collector.envstep, learner.train_iter, last_return, best_return, time.perf_counter() - start
    )
