"""The opponent league of two-player self-play: a pool of opponents, a payoff table, PFSP opponent choice.

One class for the serial self-play pipeline and the cluster's commander
(torch-free). Players are named: ``main`` is the policy being trained,
``v<version>`` a frozen snapshot of it (the serial pipeline names them by
learner iteration, the cluster by policy version), and the built-in bots by
their names (``random``, ``lookahead``). The pool holds the bots and the last
``pool_size`` snapshots; a snapshot is taken every ``snapshot_every`` versions.

The payoff table counts, for every pair that played, the first player's wins,
draws and losses. Opponents for ``main`` are chosen by prioritised fictitious
self-play (Vinyals et al. 2019): with probability ``self_play_prob`` ``main``
plays itself (``self``), otherwise an opponent from the pool with weight
``(1 - p)^2`` (``pfsp_weighting = "hard"``: harder opponents more often) or
1 (``"uniform"``), where ``p`` is ``main``'s score against it (win = 1, draw =
1/2) with a prior of one drawn game (an unplayed opponent counts as p = 1/2).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Dict, Iterable, List, Optional

import numpy as np
from easydict import EasyDict

from .config.section import Section, setting

logger = logging.getLogger(__name__)

MAIN = "main"
SELF = "self"
WEIGHTINGS = ("hard", "uniform")
OUTCOMES = ("win", "draw", "loss")
_MIRROR = {"win": "loss", "draw": "draw", "loss": "win"}


def snapshot_name(version: int) -> str:
    return f"v{int(version)}"


def snapshot_version(name: str) -> Optional[int]:
    """The version of a snapshot's name, None for bots and ``main``."""
    if name.startswith("v") and name[1:].isdigit():
        return int(name[1:])
    return None


@dataclasses.dataclass(frozen=True)
class LeagueSection(Section):
    """Two-player self-play's opponent league (env.type='pettingzoo'): the pool of opponents, the payoff table and
    prioritised fictitious self-play (PFSP)."""

    path = "league"
    title = "League (two-player self-play)"

    snapshot_every: int = setting(
        200,
        lo=1,
        doc="""put a frozen copy of the trained policy into the opponent pool every N versions
        (serial: learner iterations; cluster: policy versions)""",
    )
    pool_size: int = setting(
        10, lo=1, doc="keep the last N snapshots in the pool (older ones leave it and are no longer chosen)"
    )
    bots: List[str] = setting(["random"], doc="built-in bots in the pool (parallel_rl.policy.bots)")
    self_play_prob: float = setting(
        0.5, lo=0, hi=1, doc="chance that main plays itself (both players' rows are trained on)"
    )
    pfsp_weighting: str = setting(
        "hard", choices=WEIGHTINGS, doc="PFSP weight of an opponent main scores p against: hard (1 - p)^2, or uniform"
    )


class League:
    @classmethod
    def default_config(cls) -> EasyDict:
        """DI-engine's seed name for the ``league`` section's defaults (:class:`LeagueSection`)."""
        return LeagueSection.defaults()

    def __init__(self, cfg: Optional[EasyDict] = None, seed: Optional[int] = None):
        cfg = EasyDict({**type(self).default_config(), **(cfg or {})})
        LeagueSection.check(cfg)  # a league built without compile_config is checked the same
        self.cfg = cfg
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()
        self.bots: List[str] = list(cfg.bots)
        self.snapshots: List[str] = []  # in the pool, oldest first
        self.retired: List[str] = []  # left the pool
        self._payoff: Dict[str, Dict[str, List[int]]] = {}
        self.games = 0
        self._last_snapshot: Optional[int] = None

    # ---- the pool -------------------------------------------------------------------------------
    @property
    def pool(self) -> List[str]:
        """The opponents main may be given (bots and the snapshots in the pool)."""
        with self._lock:
            return self.bots + self.snapshots

    def wants_snapshot(self, version: int) -> bool:
        """Is it time to freeze ``version`` (the first version, then every ``snapshot_every``)?"""
        with self._lock:
            return self._last_snapshot is None or version - self._last_snapshot >= self.cfg.snapshot_every

    def add_snapshot(self, version: int) -> Optional[str]:
        """Put snapshot ``version`` into the pool; returns the name of the snapshot that left it, if any."""
        name = snapshot_name(version)
        with self._lock:
            self._last_snapshot = int(version)
            if name in self.snapshots:
                return None
            self.snapshots.append(name)
            if len(self.snapshots) > self.cfg.pool_size:
                old = self.snapshots.pop(0)
                self.retired.append(old)
                logger.info("league: snapshot %s left the pool (pool_size=%d)", old, self.cfg.pool_size)
                return old
        logger.info("league: snapshot %s joined the pool", name)
        return None

    def remove(self, name: str) -> None:
        """Take an opponent out of the pool (e.g. its checkpoint is gone); its results stay in the table."""
        with self._lock:
            if name in self.snapshots:
                self.snapshots.remove(name)
                self.retired.append(name)
            elif name in self.bots:
                self.bots.remove(name)

    # ---- results --------------------------------------------------------------------------------
    def record(self, player: str, opponent: str, outcomes: Iterable[str]) -> None:
        """``player``'s outcomes (win / draw / loss) against ``opponent``; the mirror row is kept too."""
        outcomes = list(outcomes)
        bad = [o for o in outcomes if o not in OUTCOMES]
        if bad:
            raise ValueError(f"outcomes must be in {OUTCOMES}, got {bad}")
        with self._lock:
            row = self._payoff.setdefault(player, {}).setdefault(opponent, [0, 0, 0])
            mirror = self._payoff.setdefault(opponent, {}).setdefault(player, [0, 0, 0]) if opponent != player else None
            for outcome in outcomes:
                row[OUTCOMES.index(outcome)] += 1
                if mirror is not None:
                    mirror[OUTCOMES.index(_MIRROR[outcome])] += 1
            self.games += len(outcomes)

    def score(self, player: str, opponent: str) -> float:
        """``player``'s score against ``opponent`` (win 1, draw 1/2) with a prior of one drawn game."""
        with self._lock:
            wins, draws, losses = self._payoff.get(player, {}).get(opponent, [0, 0, 0])
        return (wins + 0.5 * draws + 0.5) / (wins + draws + losses + 1)

    def choose_opponent(self) -> str:
        """``self`` or an opponent from the pool, by PFSP."""
        pool = self.pool
        if not pool or self._rng.random() < self.cfg.self_play_prob:
            return SELF
        p = np.array([self.score(MAIN, name) for name in pool])
        weight = (1.0 - p) ** 2 if self.cfg.pfsp_weighting == "hard" else np.ones(len(pool))
        if weight.sum() <= 0:
            weight = np.ones(len(pool))
        return pool[int(self._rng.choice(len(pool), p=weight / weight.sum()))]

    # ---- persistence --------------------------------------------------------------------------------
    def state_dict(self) -> Dict:
        """Everything :meth:`load_state_dict` restores, as plain JSON values (the coordinator's snapshot keeps it:
        a resumed coordinator has the same pool, payoff table and games)."""
        with self._lock:
            return {
                "bots": list(self.bots),
                "snapshots": list(self.snapshots),
                "retired": list(self.retired),
                "payoff": {a: {b: list(counts) for b, counts in row.items()} for a, row in self._payoff.items()},
                "games": self.games,
                "last_snapshot": self._last_snapshot,
                "rng": self._rng.bit_generator.state,
            }

    def load_state_dict(self, state: Dict) -> None:
        """Restore :meth:`state_dict` (ValueError naming the field when it does not fit).

        The bots in the pool are those of this league's config, not the saved ones: a run resumed with
        ``league.bots`` changed plays the bots it now names (a bot left out keeps its rows in the table)."""
        names = {key: [str(n) for n in state[key]] for key in ("bots", "snapshots", "retired")}
        payoff: Dict[str, Dict[str, List[int]]] = {}
        for a, row in state["payoff"].items():
            for b, counts in row.items():
                counts = [int(c) for c in counts]
                if len(counts) != len(OUTCOMES) or min(counts) < 0:
                    raise ValueError(
                        f"league payoff[{a!r}][{b!r}] must be {len(OUTCOMES)} counts >= 0 "
                        f"({'/'.join(OUTCOMES)}), got {counts}"
                    )
                payoff.setdefault(str(a), {})[str(b)] = counts
        last = state.get("last_snapshot")
        if names["bots"] != list(self.cfg.bots):
            logger.info(
                "league: the pool's bots are %s (league.bots), the saved state had %s",
                list(self.cfg.bots),
                names["bots"],
            )
        with self._lock:
            self.bots, self.snapshots, self.retired = list(self.cfg.bots), names["snapshots"], names["retired"]
            self._payoff = payoff
            self.games = int(state["games"])
            self._last_snapshot = None if last is None else int(last)
            if state.get("rng") is not None:
                self._rng.bit_generator.state = state["rng"]

    def table(self) -> Dict:
        """Players, the payoff table (``payoff[a][b] = {wins, draws, losses, games, win_rate}``) and games."""
        with self._lock:
            payoff = {
                a: {
                    b: {
                        "wins": w,
                        "draws": d,
                        "losses": lo,
                        "games": w + d + lo,
                        "win_rate": w / (w + d + lo) if w + d + lo else None,
                    }
                    for b, (w, d, lo) in row.items()
                }
                for a, row in self._payoff.items()
            }
            return {
                "players": [MAIN] + self.bots + self.snapshots,
                "pool": self.bots + self.snapshots,
                "retired": list(self.retired),
                "payoff": payoff,
                "games": self.games,
            }
