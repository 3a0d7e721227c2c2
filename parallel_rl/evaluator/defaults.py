"""The evaluators' section of the run config, ``policy.eval.evaluator``: what the evaluator that plays a policy's
greedy episodes reads (:mod:`.serial`, and for two-player games :mod:`.battle`; their ``default_config()`` answers
it). How often it evaluates and the stop value are the run's (``run.eval_freq``, ``run.stop_value``). A module of
its own, importing only the config's section type: the config's assembly reads it without loading the evaluators."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping

from ..config.section import Section, setting
from ..errors import ConfigError


@dataclasses.dataclass(frozen=True)
class SerialEvaluatorSection(Section):
    """The evaluator of the serial pipeline and of each cluster collector's evaluations."""

    path = "policy.eval.evaluator"
    title = "Evaluator"

    max_seconds: float = setting(60.0, lo=0, doc="give up on an evaluation after this many seconds (0: no limit)")
    record_every: int = setting(
        0,
        lo=0,
        doc="""cluster: record one episode as an MP4 into the shared store's videos/ every N
        evaluations of a collector (0: never; the env must render rgb_array frames; needs imageio-ffmpeg)""",
    )


@dataclasses.dataclass(frozen=True)
class MinWinRate(Section):
    title = "Win rates each side must reach"

    first: float = setting(0.0, lo=0, hi=1, doc="moving first, against the stop opponent")
    second: float = setting(0.0, lo=0, hi=1, doc="moving second, against the stop opponent")


@dataclasses.dataclass(frozen=True)
class MaxLossRate(Section):
    title = "Loss rates each side must stay under"

    first: float = setting(1.0, lo=0, hi=1, doc="moving first, against the stop opponent")
    second: float = setting(1.0, lo=0, hi=1, doc="moving second, against the stop opponent")


@dataclasses.dataclass(frozen=True)
class BattleEvaluatorSection(Section):
    """The two-player evaluator (env.type='pettingzoo'): the policy against fixed opponents, both seats. The
    run's stop value is a mean win rate against the stop opponent, with the per-side bounds below."""

    path = "policy.eval.evaluator"
    title = "Two-player evaluator"

    max_seconds: float = setting(120.0, lo=0, doc="give up on an evaluation after this many seconds (0: no limit)")
    opponents: List[str] = setting(
        ["random"], doc="built-in bots to evaluate against (parallel_rl.policy.bots: random, lookahead, first_legal)"
    )
    stop_opponent: str = setting("", doc="whose results decide the stop (empty: the first opponent)")
    min_win_rate: Dict[str, Any] = setting(MinWinRate, doc="per-side win rates that must hold as well")
    max_loss_rate: Dict[str, Any] = setting(MaxLossRate, doc="per-side loss rates that must hold as well")
    min_mean_win_rate: Dict[str, Any] = setting(
        {}, doc="other opponents' mean win rates that must hold too, e.g. {'random': 0.9} (keys: opponent names)"
    )

    @classmethod
    def check_relations(cls, values: Mapping[str, Any], path: str) -> None:
        opponents = values["opponents"]
        if not isinstance(opponents, list) or not opponents or not all(isinstance(o, str) for o in opponents):
            raise ConfigError(
                f"{path} needs opponents a non-empty list of bot names, got {path}.opponents={opponents!r}"
            )
        stop = values["stop_opponent"]
        if stop and stop not in opponents:
            raise ConfigError(f"{path}.stop_opponent={stop!r} is not one of {path}.opponents {opponents}")
        for name, rate in values["min_mean_win_rate"].items():
            if name not in opponents:
                raise ConfigError(
                    f"{path}.min_mean_win_rate names {name!r}, which is not one of the opponents {opponents}"
                )
            if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 <= rate <= 1:
                raise ConfigError(f"{path}.min_mean_win_rate.{name} must be a rate in [0, 1], got {rate!r}")
