"""``parallel-rl eval``: N greedy episodes of a saved policy on fresh envs, through the evaluator the
pipelines use (:class:`~parallel_rl.evaluator.serial.InteractionSerialEvaluator`: each of the
``env.evaluator_env_num`` envs plays its share of the episodes, so short episodes are not favoured)."""
from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from easydict import EasyDict

from ..envs.env_manager import EnvManager
from ..evaluator.serial import InteractionSerialEvaluator

logger = logging.getLogger(__name__)


def evaluate_policy(cfg: EasyDict, policy, episodes: int, seed: int,
                    env: Optional[EnvManager] = None) -> Dict[str, Any]:
    """Play ``episodes`` episodes with ``policy``'s eval mode; the evaluator's info (returns, lengths, steps,
    duration). ``env`` (closed here) defaults to ``env.evaluator_env_num`` fresh copies of the config's env."""
    num_envs = max(1, min(int(cfg.env.evaluator_env_num), episodes))
    env = env or EnvManager.from_cfg(cfg.env, num_envs, seed=seed)
    evaluator = InteractionSerialEvaluator(EasyDict(eval_freq=1, max_seconds=0.0), env, policy.eval_mode,
                                           cfg.env.stop_value, episodes, seed=seed)
    try:
        _, info = evaluator.eval(n_episode=episodes)
    finally:
        evaluator.close()
    return info


def summary_rows(info: Dict[str, Any]) -> list:
    """The table ``eval`` prints: one row per statistic."""
    return [
        {"metric": "return", "mean": info["eval_episode_return_mean"], "std": info["eval_episode_return_std"],
         "min": info["eval_episode_return_min"], "max": info["eval_episode_return_max"]},
        {"metric": "length", "mean": info["episode_length_mean"], "std": info.get("episode_length_std"),
         "min": info.get("episode_length_min"), "max": info.get("episode_length_max")},
    ]


def evaluate_battle(cfg: EasyDict, policy, episodes: int, seed: int) -> Dict[str, Any]:
    """Two-player games: ``episodes`` games per configured opponent (``policy.eval.evaluator.opponents``) and
    side, through the self-play pipeline's evaluator; its info (``results[opponent][side]``, ``win_rate``)."""
    from ..envs.multiagent import BattleEnvManager
    from ..policy.bots import create_bot
    from ..evaluator.battle import BattleInteractionSerialEvaluator

    names = list(cfg.policy.eval.evaluator.opponents)
    env = BattleEnvManager.from_cfg(cfg.env, max(1, min(int(cfg.env.evaluator_env_num), episodes)), seed=seed)
    action_num = env.action_spec.n
    opponents = {name: create_bot(name, seed=seed + 30_000 + i, n_actions=action_num) for i, name in enumerate(names)}
    evaluator = BattleInteractionSerialEvaluator({**cfg.policy.eval.evaluator, "max_seconds": 0.0}, env,
                                                 policy.eval_mode, opponents, cfg.env.stop_value, episodes, seed=seed)
    try:
        _, info = evaluator.eval(n_episode=episodes)
    finally:
        evaluator.close()
    return info


def battle_rows(info: Dict[str, Any]) -> list:
    """The table ``eval`` prints for a two-player game: one row per opponent and side."""
    return [{"opponent": name, "side": side, **sides[side]} for name, sides in info["results"].items()
            for side in sides]
