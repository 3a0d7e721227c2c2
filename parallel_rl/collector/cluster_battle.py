"""BattleClusterCollector (DI-engine's name): two players in one game inside a cluster collector.

The collector task names the players: ``spec["players"] = {"train": "main",
"opponent": NAME}``, where ``NAME`` is ``self`` (the training policy plays
itself), ``v<version>`` (a snapshot frozen into the league on the shared disk)
or a built-in bot (``random``, ``lookahead``). The training player is the
newest policy version, as for any collector. Step data holds the training
player's rows only (both players' when it plays itself); each game's result
(the training player's win / draw / loss) goes to the coordinator in a
``games`` metadata message beside the chunk.

An opponent snapshot that left the league (its file is gone) is a documented
fallback, never a hang: the collector plays ``self`` instead and reports the
missing name in the task result (``opponent_missing``); the commander takes it
out of the pool.

Everything else (policy updates, chunk writing) is the
:class:`~parallel_rl.collector.cluster.ClusterCollector`'s.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..league import SELF, snapshot_version
from ..envs.multiagent import BattleEnvManager
from ..policy import create_policy
from ..policy.bots import BOT_REGISTRY, create_bot
from .battle import BattleCollectStats, BattleSampleSerialCollector
from ..evaluator.battle import BattleInteractionSerialEvaluator
from .serial import concat_columns
from .cluster import ClusterCollector

logger = logging.getLogger(__name__)


class BattleClusterCollector(ClusterCollector):
    def _build(self, seed: int) -> None:
        cfg = self.cfg
        self.env = BattleEnvManager.from_cfg(cfg.env, cfg.env.collector_env_num, seed=seed)
        spec = self.env.action_spec
        self.policy = create_policy(cfg.policy, self.env.obs_dim, spec, seed=seed, device="cpu")
        self._opponent_policy = create_policy(cfg.policy, self.env.obs_dim, spec, seed=seed + 1, device="cpu")
        self._bots: Dict[str, Any] = {}
        self.collector = BattleSampleSerialCollector(
            {**cfg.policy.collect.collector, "trained_players": [0, 1]},
            self.env,
            [self.policy.collect_mode, self.policy.collect_mode],
            discount_factor=cfg.policy.discount_factor,
            nstep=cfg.policy.nstep,
        )
        self.opponent = SELF

    def _act_with_policy(self) -> None:
        """A new training policy plays the current opponent (new games)."""
        if getattr(self, "collector", None) is None:  # _build sets the policy before it builds the collector
            return
        opponent, self.opponent = self.opponent, None
        self.set_opponent(opponent)

    def _bot(self, name: str) -> Any:
        if name not in self._bots:
            self._bots[name] = create_bot(
                name, seed=self._seed + 50_000 + len(self._bots), n_actions=self.env.action_spec.n
            )
        return self._bots[name]

    def set_opponent(self, name: str) -> Tuple[str, Optional[str]]:
        """Play ``name`` from now on (new games); returns (the opponent played, the name that was missing)."""
        if name == self.opponent:
            return name, None
        missing = None
        version = snapshot_version(name)
        if name == SELF:
            players, trained = [self.policy.collect_mode, self.policy.collect_mode], [0, 1]
        elif version is not None:
            try:
                self._opponent_policy.load_model_state_dict(self.storage.league.load(version))
                players, trained = [self.policy.collect_mode, self._opponent_policy.eval_mode], [0]
            except FileNotFoundError:
                logger.warning(
                    "marine collector: opponent %s left the league (its snapshot is gone); playing "
                    "the training policy against itself instead",
                    name,
                )
                missing, name = name, SELF
                players, trained = [self.policy.collect_mode, self.policy.collect_mode], [0, 1]
        elif name in BOT_REGISTRY:
            players, trained = [self.policy.collect_mode, self._bot(name)], [0]
        else:
            raise ValueError(
                f"unknown opponent {name!r}: use 'self', 'v<version>' or a bot ({', '.join(BOT_REGISTRY.names())})"
            )
        self.collector.reset_policy(players)
        self.collector.trained_players = trained
        self.collector.reset_env()  # no game is played by two opponents
        self.opponent = name
        return name, missing

    def collect(
        self, n_sample: int, eps: float, random_collect: bool = False
    ) -> Tuple[Dict[str, np.ndarray], BattleCollectStats]:
        """``n_sample`` rows of the training player (in self-play shared by both seats' players: a chunk never
        holds more rows than asked) and the games' results. ``random_collect`` is refused by the config check
        (a two-player game's random warm-up is a bot in the league)."""
        trained = self.collector.trained_players
        share = [-(-n_sample // len(trained)), n_sample // len(trained)] if len(trained) == 2 else [n_sample, 0]
        per_player = self.collector.collect(
            share, train_iter=self.policy_version, policy_kwargs={"eps": eps}, keep_extra=True
        )
        data = concat_columns([per_player[p] for p in trained if per_player[p]])
        return data, self.collector.last_stats

    def evaluate(self, version: int, n_episode: int) -> Dict[str, Any]:
        """The greedy policy ``version`` against the evaluator's bots from both sides; ``stop`` says whether the
        evaluator's stop rule (win rate and per-side bounds) holds."""
        if self._evaluator is None:
            env = BattleEnvManager.from_cfg(self.cfg.env, self.cfg.env.evaluator_env_num, seed=self._seed + 10_000)
            self._eval_policy = create_policy(
                self.cfg.policy, env.obs_dim, env.action_spec, seed=self._seed, device="cpu"
            )
            ecfg = self.cfg.policy.eval.evaluator
            self._evaluator = BattleInteractionSerialEvaluator(
                ecfg,
                env,
                self._eval_policy.eval_mode,
                {
                    name: create_bot(name, seed=self._seed + 60_000 + i, n_actions=env.action_spec.n)
                    for i, name in enumerate(ecfg.opponents)
                },
                self.cfg.run.stop_value,
                self.cfg.env.n_evaluator_episode,
                seed=self._seed + 20_000,
            )
        version, state = self._load_for_eval(version)
        self.load_checkpoint(self._eval_policy, version, state)
        stop, info = self._evaluator.eval(n_episode=max(n_episode, self._evaluator.env.num_envs))
        info["policy_version"] = version
        info["stop"] = stop
        return info
