"""Serial battle evaluator (DI-engine's ``BattleInteractionSerialEvaluator``): the policy against fixed opponents.

For every opponent and every side (``first``: seat 0, ``second``: seat 1) the
policy plays ``n_evaluator_episode`` games, spread evenly over the envs by
:class:`~parallel_rl.evaluator.serial.VectorEvalMonitor` (each env contributes
its quota of games). ``eval()`` returns ``(stop_flag, info)`` with
``info["results"][opponent][side] = {"win", "draw", "loss", "games"}`` (rates
and the game count) and ``info["win_rate"][opponent]`` (the mean of both
sides' win rates).

Stop rule, against ``cfg.stop_opponent`` (default: the first opponent): the
mean win rate reaches ``stop_value``, and each side's rates meet
``cfg.min_win_rate`` / ``cfg.max_loss_rate`` (e.g. tic-tac-toe: never lose as
first mover, ``max_loss_rate.first = 0``), and the mean win rate against every
opponent in ``cfg.min_mean_win_rate`` reaches its value (e.g. Connect Four:
``{"random": 0.9}`` beside ``stop_value = 0.6`` against ``lookahead``).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import numpy as np
from easydict import EasyDict

from ..envs.multiagent import BattleEnvManager
from ..collector.battle import act
from .serial import ISerialEvaluator, VectorEvalMonitor

logger = logging.getLogger(__name__)

SIDES = ("first", "second")


class BattleInteractionSerialEvaluator(ISerialEvaluator):
    @classmethod
    def default_config(cls) -> EasyDict:
        """DI-engine's seed name for the two-player ``policy.eval.evaluator`` section's defaults
        (:class:`~.defaults.BattleEvaluatorSection`)."""
        from .defaults import BattleEvaluatorSection

        return BattleEvaluatorSection.defaults()

    def __init__(
        self,
        cfg: Optional[EasyDict],
        env: BattleEnvManager,
        policy: Any,
        opponents: Mapping[str, Any],
        stop_value: Optional[float] = None,
        n_evaluator_episode: Optional[int] = None,
        seed: int = 0,
        tb_logger=None,
        exp_name: str = "default_experiment",
        instance_name: str = "evaluator",
        eval_freq: Optional[int] = None,
    ):
        """``policy``: a player (a policy's ``eval_mode`` or a bot); ``opponents``: name -> player.
        ``stop_value`` / ``n_evaluator_episode`` / ``eval_freq`` default to ``cfg.stop_value`` / ``cfg.n_episode``
        / ``cfg.eval_freq`` (no stop value: never a stop); ``tb_logger`` gets each opponent's win rate (DI-engine's
        keywords)."""
        self.cfg = EasyDict({**type(self).default_config(), **(cfg or {})})
        self._name(tb_logger, exp_name, instance_name)
        n_evaluator_episode = self._from_cfg(n_evaluator_episode, self.cfg, "n_episode", "n_evaluator_episode")
        if not opponents:
            raise ValueError(f"the battle evaluator needs at least one opponent, got {dict(opponents)}")
        if n_evaluator_episode < env.num_envs:
            raise ValueError(f"{n_evaluator_episode=} games per side must be >= {env.num_envs=}")
        self.env = env
        self._policy = policy
        self.opponents = dict(opponents)
        self.stop_value = self._stop_value(stop_value, self.cfg)
        self.eval_freq = self._eval_freq(eval_freq, self.cfg)
        self.n_episode = int(n_evaluator_episode)
        self.stop_opponent = self.cfg.stop_opponent or next(iter(self.opponents))
        unknown = sorted(set(self.cfg.min_mean_win_rate) - set(self.opponents))
        if unknown:
            raise ValueError(f"min_mean_win_rate names {unknown}, which are not opponents {sorted(self.opponents)}")
        if self.stop_opponent not in self.opponents:
            raise ValueError(
                f"stop_opponent={self.stop_opponent!r} is not one of the opponents {sorted(self.opponents)}"
            )
        self._seed = seed
        self._last_eval_iter: Optional[int] = None
        self.eval_count = 0
        self.best_return = -math.inf  # the best mean win rate against the stop opponent
        self.envstep = 0  # moves played in all evaluations so far

    # ---- DI-engine's lifecycle ------------------------------------------------------------------
    def reset_policy(self, _policy: Any = None) -> None:
        if _policy is not None:
            self._policy = _policy

    def reset_env(self, _env: Optional[BattleEnvManager] = None) -> None:
        if _env is not None:
            self.env = _env

    def reset(self, _policy: Any = None, _env: Optional[BattleEnvManager] = None) -> None:
        self.reset_env(_env)
        self.reset_policy(_policy)
        self._last_eval_iter = None
        self.eval_count = 0
        self.best_return = -math.inf

    def close(self) -> None:
        self.env.close()

    # ---- evaluation -----------------------------------------------------------------------------
    def play(self, opponent: Any, seat: int, n_episode: int, deadline: float) -> Dict[str, float]:
        """``n_episode`` games with the policy in ``seat`` against ``opponent``: win / draw / loss rates."""
        env = self.env
        monitor = VectorEvalMonitor(env.num_envs, n_episode)
        env.reset(seed=self._seed + 7919 * self.eval_count + 104729 * seat)
        players = (self._policy, opponent)
        moves = 0
        while not monitor.is_finished():
            if time.perf_counter() > deadline:
                logger.warning(
                    "battle evaluator: gave up after %.0fs with %d/%d games",
                    self.cfg.max_seconds,
                    len(monitor.returns()),
                    n_episode,
                )
                break
            mine = env.seat == seat
            actions = np.zeros(env.num_envs, dtype=np.int64)
            for player, rows in ((players[0], np.flatnonzero(mine)), (players[1], np.flatnonzero(~mine))):
                if len(rows):
                    actions[rows] = act(player, env.obs[rows], env.mask[rows], [env.games[i] for i in rows])
            step = env.step(actions)
            moves += env.num_envs
            for result in step.results:
                monitor.update(result.env_id, result.returns[seat], result.length)
        self.envstep += moves
        returns = np.asarray(monitor.returns())
        games = len(returns)
        self._lengths += monitor.lengths()
        if games == 0:
            return {"win": float("nan"), "draw": float("nan"), "loss": float("nan"), "games": 0}
        return {
            "win": float((returns > 0).mean()),
            "draw": float((returns == 0).mean()),
            "loss": float((returns < 0).mean()),
            "games": games,
        }

    def eval(
        self,
        save_ckpt_fn: Optional[Callable[[str], None]] = None,
        train_iter: int = -1,
        envstep: int = -1,
        n_episode: Optional[int] = None,
    ) -> Tuple[bool, Dict]:
        """Play every opponent from both sides; returns (stop_flag, info). Saves ``ckpt_best`` on a new best."""
        n_episode = n_episode or self.n_episode
        start = time.perf_counter()
        deadline = start + self.cfg.max_seconds if self.cfg.max_seconds > 0 else math.inf
        moves_before = self.envstep
        self._lengths: list = []
        results: Dict[str, Dict[str, Dict[str, float]]] = {}
        for name, opponent in self.opponents.items():
            results[name] = {side: self.play(opponent, seat, n_episode, deadline) for seat, side in enumerate(SIDES)}
        self.eval_count += 1
        win_rate = {name: float(np.mean([r[side]["win"] for side in SIDES])) for name, r in results.items()}
        decisive = results[self.stop_opponent]
        score = win_rate[self.stop_opponent]
        complete = all(decisive[side]["games"] == n_episode for side in SIDES)
        bounds_met = all(
            decisive[side]["win"] >= self.cfg.min_win_rate[side]
            and decisive[side]["loss"] <= self.cfg.max_loss_rate[side]
            for side in SIDES
        )
        others_met = all(win_rate.get(name, -1.0) >= rate for name, rate in self.cfg.min_mean_win_rate.items())
        stop_flag = bool(
            complete and self.stop_value is not None and score >= self.stop_value and bounds_met and others_met
        )
        info = {
            "train_iter": train_iter,
            "envstep": envstep,
            "episodes": sum(r[side]["games"] for r in results.values() for side in SIDES),
            "env_steps": self.envstep - moves_before,
            "duration": time.perf_counter() - start,
            "results": results,
            "win_rate": win_rate,
            # the pipelines' progress reads this key: here the mean win rate against the stop opponent
            "eval_episode_return_mean": score,
            "episode_length_mean": float(np.mean(self._lengths)) if self._lengths else float("nan"),
        }
        if complete and score > self.best_return:
            self.best_return = score
            if save_ckpt_fn is not None:
                save_ckpt_fn("ckpt_best.pt")
        self._log({**info, **{f"win_rate_{name}": rate for name, rate in win_rate.items()}}, train_iter, envstep)
        return stop_flag, info
