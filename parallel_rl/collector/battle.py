"""Serial battle collectors (DI-engine's names): two players, one two-player game, data per player.

``policy`` is a list of two players: policy modes (``forward(obs, mask=...)``,
e.g. a DQN's ``collect_mode``) or bots (:mod:`parallel_rl.policy.bots`). In
game ``i`` player 0 starts in seat ``i % 2`` and the players swap seats after
every game, so each plays both sides equally often. Every action comes from the
player's forward with the game's action mask: an illegal move is never played.

``trained_players`` (indices into ``policy``) are the players whose rows are
returned; ``policy_kwargs`` (e.g. ``eps``) go to those players only. Rows are
``nstep``-step transitions from the player's own view, built by the same
:class:`~parallel_rl.collector.serial.NStepBuilder` as the single-agent rows
(one lane per game and player): ``obs, action, reward (sum_k gamma^k r_k over
its next nstep moves, r_k earned until its following turn), next_obs (its view
at its nstep-th next turn, after the opponent replied), done (the game ended
by its rules within those moves; the reward then holds the game's result),
discount (gamma^k for the k moves spanned), collect_iter, next_action_mask
(legal actions at next_obs)``. With ``nstep=1`` a row spans one own move. A trained player whose forward returns more than the action (PPO's
collect mode: ``logp``, ``value``, ``action_mask``) gets those columns too, with ``end`` and ``env_id``
(one trajectory per game and player): the on-policy segment PPO's GAE runs over, the player's own
decisions only (the opponent's moves are part of the env from its view). A move whose row completes in a
later call (the player's next turn) keeps the ``logp`` and ``value`` it was played with.

- :class:`BattleSampleSerialCollector` ``collect(n_sample)`` returns, per
  player, exactly ``n_sample`` rows for every trained player (``{}`` for the
  others); rows completed beyond that are kept for the next call.
- :class:`BattleEpisodeSerialCollector` ``collect(n_episode)`` returns, per
  player, the rows of exactly ``n_episode`` finished games (one column dict per
  game; untrained players' lists are empty); surplus games are kept.

``last_stats`` is a :class:`BattleCollectStats`: moves, games, player 0's
returns and outcomes (win / draw / loss) with the seat it played.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from easydict import EasyDict

from ..envs.multiagent import BattleEnvManager, Transition
from .defaults import BattleCollectorSection
from .serial import (
    COLLECTOR_REGISTRY,
    CollectStats,
    Columns,
    NStepBuilder,
    columns_len,
    concat_columns,
    log_collect,
    slice_columns,
)


@dataclass
class BattleCollectStats(CollectStats):
    """A :class:`CollectStats` (``env_steps`` counts moves, ``episodes`` games, ``returns`` player 0's)
    with player 0's outcome and seat in every finished game."""

    outcomes: List[str] = field(default_factory=list)
    seats: List[int] = field(default_factory=list)

    def rate(self, outcome: str) -> float:
        return self.outcomes.count(outcome) / len(self.outcomes) if self.outcomes else float("nan")


def act(
    player: Any, obs: np.ndarray, mask: np.ndarray, games: Sequence[Any], kwargs: Optional[dict] = None
) -> np.ndarray:
    """One player's actions for some games' rows (bots that look ahead get the games)."""
    return act_with_extra(player, obs, mask, games, kwargs)[0]


def act_with_extra(
    player: Any, obs: np.ndarray, mask: np.ndarray, games: Sequence[Any], kwargs: Optional[dict] = None
) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    """:func:`act`, plus what the player returned besides the action (an on-policy collect mode's ``logp``,
    ``value`` and ``action_mask``; empty for greedy modes and bots)."""
    extra = {"games": games} if getattr(player, "needs_game", False) else {}
    out = player.forward(obs, mask=mask, **extra, **(kwargs or {}))
    if isinstance(out, dict):
        return (
            np.asarray(out["action"]).astype(np.int64, copy=False),
            {k: np.asarray(v) for k, v in out.items() if k != "action"},
        )
    return np.asarray(out).astype(np.int64, copy=False), {}


def add_transition(builder: NStepBuilder, t: Transition) -> None:
    """One player's move as a one-lane step of the n-step builder (an on-policy player's extras with it)."""
    extra = None if t.extra is None else {k: v[None] for k, v in t.extra.items()}
    builder.add_row(
        t.obs[None],
        np.array([t.action], dtype=np.int64),
        np.array([t.reward]),
        t.next_obs[None],
        np.array([t.done]),
        np.array([t.end and not t.done]),
        extra=extra,
        after={"next_action_mask": t.next_mask[None]},
    )


def build_lane(builder: NStepBuilder, collect_iter: int, game: int, player: int) -> Columns:
    """The rows a lane completed; on-policy rows get ``env_id = 2 * game + player`` (one trajectory per game
    and player, so GAE runs over the player's own decisions and two players' rows never run into each other)."""
    out = builder.build(collect_iter)
    if "env_id" in out:
        out["env_id"] = np.full(len(out["env_id"]), 2 * game + player, dtype=np.int64)
    return out


def nstep_columns(
    rows: Sequence[Transition], nstep: int, gamma: float, collect_iter: int, game: int = 0, player: int = 0
) -> Columns:
    """The n-step rows of one player's moves in a finished game (every window is complete)."""
    builder = NStepBuilder(nstep, gamma)
    for t in rows:
        add_transition(builder, t)
    return build_lane(builder, collect_iter, game, player)


class _BattleCollector:
    """What both battle collectors share: players, seats, one move in every game per step."""

    @classmethod
    def default_config(cls) -> EasyDict:
        """The ``policy.collect.collector`` section's defaults (:class:`~.defaults.BattleCollectorSection`) with
        this collector's type."""
        return EasyDict(BattleCollectorSection.defaults(), type=cls.TYPE)

    TYPE = ""

    def __init__(
        self,
        cfg: Optional[EasyDict],
        env: Optional[BattleEnvManager] = None,
        policy: Optional[Sequence[Any]] = None,
        tb_logger=None,
        exp_name: str = "default_experiment",
        instance_name: str = "collector",
        *,
        discount_factor: float = 0.99,
        nstep: int = 1,
    ):
        """DI-engine's arguments in its order (``env`` and ``policy`` may come later through ``reset_env`` /
        ``reset_policy``), then ours by keyword. ``collect()`` without a count collects ``cfg.n_sample`` /
        ``cfg.n_episode``; ``tb_logger``, ``exp_name``, ``instance_name``: as for the single-agent collectors."""
        cfg = EasyDict({**type(self).default_config(), **(cfg or {})})
        self.tb_logger, self.exp_name, self.instance_name = tb_logger, exp_name, instance_name
        if nstep <= 0:
            raise ValueError(f"{nstep=} must be > 0")
        self.cfg = cfg
        self._gamma = float(discount_factor)
        self._nstep = int(nstep)
        self._env: Optional[BattleEnvManager] = None
        self.envstep = 0
        self.last_stats = BattleCollectStats()
        # wall seconds ever spent in the players' forwards and in the env's step (a worker's time breakdown)
        self.policy_seconds = self.env_seconds = 0.0
        self._players: List[Any] = []
        self.reset_policy(policy)
        self.trained_players = list(cfg.trained_players)
        bad = [p for p in self.trained_players if p not in (0, 1)]
        if bad:
            raise ValueError(f"trained_players must be player indices 0 or 1, got {self.trained_players}")
        if env is not None:
            self.reset_env(env)

    # ---- DI-engine's lifecycle ------------------------------------------------------------------
    def reset_policy(self, _policy: Optional[Sequence[Any]] = None) -> None:
        """New players (a list of two); keeps the games and their seats."""
        if _policy is not None:
            if len(_policy) != 2:
                raise ValueError(f"battle collectors need exactly 2 players, got {len(_policy)}")
            self._players = list(_policy)

    def reset_env(self, _env: Optional[BattleEnvManager] = None) -> None:
        """Take ``_env`` (if given) and start new games everywhere; player 0 starts in seat ``i % 2``."""
        if _env is not None:
            self._env = _env
        if self._env is None:
            return  # nothing to reset until an env is given
        self._env.reset()
        n = self._env.num_envs
        self._seat_of_player0 = np.arange(n, dtype=np.int64) % 2
        self._clear()

    def reset(self, _policy: Optional[Sequence[Any]] = None, _env: Optional[BattleEnvManager] = None) -> None:
        self.reset_env(_env)
        self.reset_policy(_policy)

    @property
    def env(self) -> BattleEnvManager:
        return self._env

    def close(self) -> None:
        if self._env is not None:
            self._env.close()

    # ---- the loop -------------------------------------------------------------------------------
    def _clear(self) -> None:
        # extras of each game's and seat's pending move (at most one each): (num_envs, 2, ...) per column
        self._extra: Dict[str, np.ndarray] = {}

    def _keep_extra(self, rows: np.ndarray, seats: np.ndarray, extra: Dict[str, np.ndarray]) -> None:
        for key, value in extra.items():
            store = self._extra.get(key)
            if store is None or store.shape[2:] != value.shape[1:]:
                store = self._extra[key] = np.zeros((self._env.num_envs, 2) + value.shape[1:], value.dtype)
            store[rows, seats] = value

    def player_of(self, env_id: int, seat: int) -> int:
        return 0 if seat == self._seat_of_player0[env_id] else 1

    def _default(self, count: Any, key: str) -> Any:
        """``count``, or the cfg's ``key`` when it is None (DI-engine's collect without a count)."""
        count = count if count is not None else self.cfg.get(key)
        if count is None:
            raise ValueError(f"collect() without {key} needs a collector whose cfg sets {key}; pass collect({key}=N)")
        if self._env is None or not self._players:
            raise RuntimeError(
                f"{self.instance_name}: collect() needs an env and two players: pass them to the "
                f"constructor or to reset_env(env) / reset_policy([player0, player1]) first"
            )
        return count

    def _step(self, policy_kwargs: Optional[dict], stats: BattleCollectStats):
        """One move in every game; returns the env's :class:`BattleStep` with each row's player."""
        env = self._env
        player_of_row = (env.seat != self._seat_of_player0).astype(np.int64)
        actions = np.zeros(env.num_envs, dtype=np.int64)
        start = time.perf_counter()
        for p, player in enumerate(self._players):
            rows = np.flatnonzero(player_of_row == p)
            if len(rows):
                trained = p in self.trained_players
                actions[rows], extra = act_with_extra(
                    player,
                    env.obs[rows],
                    env.mask[rows],
                    [env.games[i] for i in rows],
                    policy_kwargs if trained else None,
                )
                if trained and extra:
                    self._keep_extra(rows, env.seat[rows], extra)
        acted = time.perf_counter()
        step = env.step(actions)
        self.policy_seconds += acted - start
        self.env_seconds += time.perf_counter() - acted
        stats.env_steps += env.num_envs
        owners = [self.player_of(t.env_id, t.seat) for t in step.transitions]
        if self._extra:
            for t, p in zip(step.transitions, owners):
                if p in self.trained_players:
                    t.extra = {k: v[t.env_id, t.seat].copy() for k, v in self._extra.items()}
        for result in step.results:
            seat = int(self._seat_of_player0[result.env_id])
            stats.episodes += 1
            stats.add_episodes([result.returns[seat]], [result.length])
            stats.outcomes.append(result.outcome(seat))
            stats.seats.append(seat)
            self._seat_of_player0[result.env_id] = 1 - seat  # swap sides for the next game
        return step, owners


class BattleSampleSerialCollector(_BattleCollector):
    TYPE = "battle_sample"

    def _clear(self) -> None:
        super()._clear()
        n = self._env.num_envs
        # per player: one n-step lane per game, the rows built but not returned yet, the moves not built yet
        self._lanes = [[NStepBuilder(self._nstep, self._gamma) for _ in range(n)] for _ in (0, 1)]
        self._ready: List[Columns] = [{}, {}]
        self._unbuilt = [0, 0]

    def collect(
        self,
        n_sample: Union[int, Sequence[int], None] = None,
        train_iter: int = 0,
        drop_extra: bool = True,
        policy_kwargs: Optional[dict] = None,
        *,
        keep_extra: bool = False,
    ) -> List[Columns]:
        """Exactly ``n_sample`` rows for each trained player (``{}`` for the others); ``n_sample`` may also be
        one count per player (e.g. ``[3, 2]``: a chunk of 5 rows shared by two trained players).

        ``drop_extra=True``: rows completed beyond that are dropped (``keep_extra=True``, ours: returned first by
        the next call), as for :class:`SampleSerialCollector`; ``drop_extra=False`` (on-policy pipelines): every
        row completed by now is returned (at least ``n_sample`` per trained player), none kept for a call that
        may act with a newer policy. DI-engine's argument order; ``n_sample=None``: ``cfg.n_sample``."""
        n_sample = self._default(n_sample, "n_sample")
        if not self.trained_players:
            raise ValueError(f"{self.trained_players=}: name at least one player whose rows to collect")
        if isinstance(n_sample, int):
            wanted = [n_sample if p in self.trained_players else 0 for p in (0, 1)]
            if n_sample <= 0:
                raise ValueError(f"{n_sample=} must be > 0")
        else:
            wanted = [int(n) if p in self.trained_players else 0 for p, n in enumerate(n_sample)]
            if len(wanted) != 2 or min(wanted) < 0 or sum(wanted) == 0:
                raise ValueError(
                    f"{n_sample=}: give one count >= 0 per player, not all 0, for trained players "
                    f"{self.trained_players}"
                )
        stats = BattleCollectStats()
        start = time.perf_counter()
        # at most nstep - 1 moves per lane are in windows still open, so this many unbuilt moves suffice
        missing = [max(0, wanted[p] - columns_len(self._ready[p])) for p in (0, 1)]
        slack = (self._nstep - 1) * self._env.num_envs
        need = [missing[p] + slack if missing[p] else 0 for p in (0, 1)]
        while any(self._unbuilt[p] < need[p] for p in self.trained_players):
            step, owners = self._step(policy_kwargs, stats)
            for transition, p in zip(step.transitions, owners):
                if p in self.trained_players:
                    add_transition(self._lanes[p][transition.env_id], transition)
                    self._unbuilt[p] += 1
        out: List[Columns] = [{}, {}]
        for p in self.trained_players:
            if not wanted[p]:
                continue
            if missing[p] or not drop_extra:
                built = [build_lane(lane, train_iter, g, p) for g, lane in enumerate(self._lanes[p])]
                self._ready[p] = concat_columns([c for c in [self._ready[p], *built] if c])
                self._unbuilt[p] = sum(lane.pending for lane in self._lanes[p])
            take = wanted[p] if drop_extra else columns_len(self._ready[p])
            out[p] = slice_columns(self._ready[p], 0, take)
            self._ready[p] = slice_columns(self._ready[p], take) if keep_extra else {}
        stats.transitions = sum(columns_len(c) for c in out)
        self.envstep += stats.env_steps
        stats.duration = time.perf_counter() - start
        self.last_stats = stats
        log_collect(self, stats, train_iter)
        return out


class BattleEpisodeSerialCollector(_BattleCollector):
    TYPE = "battle_episode"

    def _clear(self) -> None:
        super()._clear()
        n = self._env.num_envs
        self._partial: List[List[List[Transition]]] = [[[], []] for _ in range(n)]
        self._ready: List[Tuple[int, List[List[Transition]]]] = []  # finished games: (game, rows per player)

    def collect(
        self, n_episode: Optional[int] = None, train_iter: int = 0, policy_kwargs: Optional[dict] = None
    ) -> List[List[Columns]]:
        """The rows of exactly ``n_episode`` finished games (None: ``cfg.n_episode``), per player (one column
        dict per game)."""
        n_episode = self._default(n_episode, "n_episode")
        if n_episode <= 0:
            raise ValueError(f"{n_episode=} must be > 0")
        stats = BattleCollectStats()
        start = time.perf_counter()
        while len(self._ready) < n_episode:
            step, owners = self._step(policy_kwargs, stats)
            for transition, p in zip(step.transitions, owners):
                self._partial[transition.env_id][p].append(transition)
            for result in step.results:
                self._ready.append((result.env_id, self._partial[result.env_id]))
                self._partial[result.env_id] = [[], []]
        games, self._ready = self._ready[:n_episode], self._ready[n_episode:]
        out: List[List[Columns]] = [[], []]
        for p in self.trained_players:
            out[p] = [
                nstep_columns(rows[p], self._nstep, self._gamma, train_iter, game_id, p) for game_id, rows in games
            ]
        stats.transitions = sum(columns_len(c) for player in out for c in player)
        self.envstep += stats.env_steps
        stats.duration = time.perf_counter() - start
        self.last_stats = stats
        log_collect(self, stats, train_iter)
        return out


COLLECTOR_REGISTRY.register(BattleSampleSerialCollector.TYPE, BattleSampleSerialCollector)
COLLECTOR_REGISTRY.register(BattleEpisodeSerialCollector.TYPE, BattleEpisodeSerialCollector)
