"""The collectors' sections of the run config: ``parallel.collector``, the cluster collector's own (what
:class:`~parallel_rl.collector.base.BaseParallelCollector` and its subclasses read; they read ``env`` and ``policy``
too), and ``policy.collect.collector``, which serial collector steps the envs (:mod:`.serial`, :mod:`.battle`; their
``default_config()`` answers it). A module of its own, importing only the config's section type: the config's
assembly reads it without loading the collectors."""

from __future__ import annotations

import dataclasses
from typing import Any, List, Mapping

from ..config.section import Section, setting
from ..errors import ConfigError


@dataclasses.dataclass(frozen=True)
class CollectorSection(Section):
    """How a cluster collector cuts its step data into chunk files."""

    path = "parallel.collector"
    title = "Cluster collector"

    chunk_size: int = setting(
        1024,
        lo=1,
        doc="""transitions per chunk file, at most (a chunk also ends after
        flush_interval, at a new policy or when the allowance runs out). Every file costs its writer ~0.4 ms; an
        on-policy flow needs one vector step (env.collector_env_num) at least""",
    )
    flush_interval: float = setting(0.05, above=0, doc="a partial chunk is flushed after this many seconds")


@dataclasses.dataclass(frozen=True)
class SerialCollectorSection(Section):
    """The collector that steps the envs with the policy (the serial pipeline's, and inside each cluster
    collector)."""

    path = "policy.collect.collector"
    title = "Collector"

    type: str = setting(
        "sample",
        doc="""sample (policy.collect.n_sample rows per collect call), episode (n_episode whole
        episodes), or one registered in COLLECTOR_REGISTRY""",
    )


# the two players of a two-player game
PLAYERS = (0, 1)


@dataclasses.dataclass(frozen=True)
class BattleCollectorSection(SerialCollectorSection):
    """The two-player collector (env.type='pettingzoo'): the trained policy against the league's opponents."""

    title = "Two-player collector"

    type: str = setting(
        "battle_sample",
        doc="""battle_sample (policy.collect.n_sample rows of the trained players per collect
        call) or battle_episode (n_episode whole games)""",
    )
    trained_players: List[int] = setting(
        [0],
        doc="""the players (0, 1) whose rows are collected: [0] trains the policy in seat 0 against
        an opponent; the cluster's collectors keep both seats' rows of a self-play game""",
    )

    @classmethod
    def check_relations(cls, values: Mapping[str, Any], path: str) -> None:
        players = values["trained_players"]
        if not players or any(p not in PLAYERS for p in players):
            raise ConfigError(
                f"{path} needs trained_players a non-empty list of players 0 and 1, got {path}.trained_players={players!r}"
            )
