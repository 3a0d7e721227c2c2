"""The serial self-play pipeline: DQN or PPO against itself, its past snapshots and built-in bots, in one process.

``parallel-rl serial -c configs/tictactoe_selfplay.py`` runs this loop when
``env.type = "pettingzoo"``. The same components as the serial pipeline
(policy, learner, replay buffer) plus the battle collector and evaluator and
the :class:`~parallel_rl.league.League`:

1. every ``league.snapshot_every`` learner iterations a frozen copy of the
   policy joins the opponent pool;
2. each collect picks an opponent by PFSP (``self``, a snapshot or a bot),
   plays ``policy.collect.n_sample`` rows of the trained player(s) and records
   the games in the payoff table (a new opponent starts new games);
3. off-policy (DQN): the rows join the replay buffer and the learner trains
   ``update_per_collect`` times on it; on-policy (PPO): the rows (every one
   completed, each player's trajectories kept apart for GAE) are one segment
   the learner trains on once (its epochs) and drops, as in the single-agent
   serial pipeline;
4. the evaluator plays the greedy policy against ``evaluator.opponents`` from
   both sides; the run stops when the win rate against ``stop_opponent``
   reaches ``run.stop_value`` within the per-side bounds.

Checkpoints: ``<exp_name>/ckpt/ckpt_best.pt`` (best evaluation) and
``ckpt_final.pt`` (the policy the run ended with).
"""

from __future__ import annotations

import copy
import logging
import os
import time
from typing import Callable, Dict, Optional

from easydict import EasyDict

from ..league import MAIN, SELF, League, snapshot_name
from ..data.buffer import create_buffer
from ..envs.multiagent import BattleEnvManager
from ..policy import create_policy
from ..policy.bots import create_bot
from ..tblog import TensorBoardLogger
from ..collector.battle import BattleSampleSerialCollector
from ..evaluator.battle import BattleInteractionSerialEvaluator
from .commander import BaseSerialCommander
from ..learner.learner import create_learner
from ..collector.serial import concat_columns
from ..runtime import budget_used_up
from .serial import TrainResult, prepare_run

logger = logging.getLogger(__name__)


def selfplay_pipeline(
    cfg: EasyDict, progress: Optional[Callable[[dict], None]] = None, on_eval: Optional[Callable[[dict], None]] = None
) -> TrainResult:
    """Train until the evaluator's win rate reaches ``run.stop_value`` (within its bounds) or a budget runs out.

    ``on_eval`` gets every evaluation's info (the benchmark records games and wall time with it)."""
    start = time.perf_counter()
    exp_dir = prepare_run(cfg)
    collector_env = BattleEnvManager.from_cfg(cfg.env, cfg.env.collector_env_num, seed=cfg.seed)
    evaluator_env = BattleEnvManager.from_cfg(cfg.env, cfg.env.evaluator_env_num, seed=cfg.seed + 10_000)
    obs_dim, spec = collector_env.obs_dim, collector_env.action_spec
    policy = create_policy(cfg.policy, obs_dim, spec, seed=cfg.seed)
    opponent_policy = create_policy(cfg.policy, obs_dim, spec, seed=cfg.seed + 1, device="cpu")
    learner = create_learner(cfg.policy.learn.learner, policy.learn_mode, exp_dir=exp_dir)
    league = League(cfg.league, seed=cfg.seed)
    bots = {
        name: create_bot(name, seed=cfg.seed + 30_000 + i, n_actions=spec.n)
        for i, name in enumerate(dict.fromkeys(list(cfg.league.bots) + list(cfg.policy.eval.evaluator.opponents)))
    }
    snapshots: Dict[str, dict] = {}
    collector = BattleSampleSerialCollector(
        cfg.policy.collect.collector,
        collector_env,
        [policy.collect_mode, policy.collect_mode],
        discount_factor=cfg.policy.discount_factor,
        nstep=cfg.policy.nstep,
    )
    evaluator = BattleInteractionSerialEvaluator(
        cfg.policy.eval.evaluator,
        evaluator_env,
        policy.eval_mode,
        {name: bots[name] for name in cfg.policy.eval.evaluator.opponents},
        cfg.run.stop_value,
        cfg.env.n_evaluator_episode,
        seed=cfg.seed + 20_000,
        eval_freq=cfg.run.eval_freq,
    )
    buffer = create_buffer(cfg.policy.other.replay_buffer)
    tb = TensorBoardLogger(os.path.join(exp_dir, "tensorboard") if cfg.system.tensorboard else None)
    commander = BaseSerialCommander(None, learner, collector, evaluator, buffer, cfg.policy)
    learn, budget = cfg.policy.learn, cfg.run
    last_return = best_return = float("nan")
    solved, reason = False, ""
    games = 0
    opponent = None
    learner.call_hook("before_run")
    try:
        while True:
            if evaluator.should_eval(learner.train_iter):
                stop, info = evaluator.eval(learner.save_checkpoint, learner.train_iter, collector.envstep)
                last_return, best_return = info["eval_episode_return_mean"], evaluator.best_return
                info = {
                    **info,
                    "games": games,
                    "elapsed": time.perf_counter() - start,
                    "stop_value": cfg.run.stop_value,
                    "league": league.table(),
                }
                tb.scalars(collector.envstep, "evaluator/", **{f"win_rate_{k}": v for k, v in info["win_rate"].items()})
                logger.info(
                    "selfplay: iter %d games %d eval %s",
                    learner.train_iter,
                    games,
                    {o: {s: r["win"] for s, r in sides.items()} for o, sides in info["results"].items()},
                )
                if progress is not None:
                    progress(info)
                if on_eval is not None:
                    on_eval(info)
                if stop:
                    solved, reason = (
                        True,
                        (
                            f"win rate {last_return:.3f} against {evaluator.stop_opponent!r} >= "
                            f"stop value {cfg.run.stop_value:g}"
                        ),
                    )
                    break
            reason = budget_used_up(budget, collector.envstep, learner.train_iter, time.perf_counter() - start)
            if reason:
                break
            if league.wants_snapshot(learner.train_iter):
                league.add_snapshot(learner.train_iter)
                snapshots[snapshot_name(learner.train_iter)] = copy.deepcopy(policy.collect_mode.state_dict())
                for gone in set(snapshots) - set(league.snapshots):
                    del snapshots[gone]
            chosen = league.choose_opponent()
            if chosen != opponent:  # new opponent: new games (no game is played by two opponents)
                if chosen == SELF:
                    players, trained = [policy.collect_mode, policy.collect_mode], [0, 1]
                elif chosen in snapshots:
                    opponent_policy.load_model_state_dict(snapshots[chosen])
                    players, trained = [policy.collect_mode, opponent_policy.eval_mode], [0]
                else:
                    players, trained = [policy.collect_mode, bots[chosen]], [0]
                collector.reset_policy(players)
                collector.trained_players = trained
                collector.reset_env()
                opponent = chosen
            columns = collector.collect(
                cfg.policy.collect.n_sample,
                train_iter=learner.train_iter,
                policy_kwargs=commander.step(),
                drop_extra=policy.flow.drop_extra,
                keep_extra=True,
            )
            stats = collector.last_stats
            games += stats.episodes
            league.record(MAIN, MAIN if chosen == SELF else chosen, stats.outcomes)
            data = concat_columns([columns[player] for player in collector.trained_players])
            policy.flow.train_on_collected(learner, buffer, data, learn, collector.envstep)
        learner.call_hook("after_run")
        learner.save_checkpoint("ckpt_final.pt")  # the policy the run ended with (the benchmark re-evaluates it)
    finally:
        collector.close()
        evaluator.close()
        tb.close()
    return TrainResult(
        solved, reason, collector.envstep, learner.train_iter, last_return, best_return, time.perf_counter() - start
    )
