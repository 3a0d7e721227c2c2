"""Two-player zero-sum games through PettingZoo: the one multi-agent adapter.

``env.type = "pettingzoo"`` and ``env.env_id`` an import path: a module with an
``env()`` (AEC) or ``parallel_env()`` factory, e.g.
``pettingzoo.classic.tictactoe_v3``, or ``"package.module:factory"`` for your
own game. ``env.pettingzoo_api`` picks the factory of a module (``auto``: AEC
when the module has one). A parallel env is played through PettingZoo's own
``parallel_to_aec`` conversion, so one loop serves both APIs.

What is supported, checked when the game is built (:class:`ConfigError`
otherwise): exactly two agents; ``Box`` observations, or PettingZoo's
``{"observation": Box, "action_mask": ...}`` dicts; ``Discrete`` actions; an
action mask (in the observation dict or ``info["action_mask"]``) unless
``env.action_mask = "none"`` says every action is always legal; rewards that
sum to zero over each game (checked at every game's end).

Seats: seat 0 is ``possible_agents[0]`` (the first mover of a turn-based game),
seat 1 the other. Observations are the acting player's own view (PettingZoo's
classic games already do this), so one network can play either seat.

:class:`BattleEnvManager` steps ``num_envs`` games; each :meth:`~BattleEnvManager.step`
plays one move in every game and returns the :class:`Transition` rows it
completed (a seat's previous move, with the reward it earned until its next
turn) and the :class:`GameResult` of every game that ended; ended games are
reset at once.
"""

from __future__ import annotations

import copy
import importlib
import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np

from ..errors import ConfigError
from .defaults import ACTION_MASK_MODES, PETTINGZOO_APIS
from .spaces import ActionSpec

logger = logging.getLogger(__name__)

ZERO_SUM_TOLERANCE = 1e-6


def resolve_factory(env_id: str, api: str = "auto") -> Callable[..., Any]:
    """The callable that builds the game named by ``env_id`` (a module path or ``module:factory``)."""
    if api not in PETTINGZOO_APIS:
        raise ConfigError(f"env.pettingzoo_api must be one of {PETTINGZOO_APIS}, got {api!r}")
    module_name, _, attr = env_id.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"env.env_id={env_id!r}: cannot import {module_name!r} ({exc}); give a module with "
            f"env()/parallel_env() such as 'pettingzoo.classic.tictactoe_v3', or 'module:factory'"
        ) from exc
    if attr:
        names = [attr]
    else:
        names = {"auto": ["env", "parallel_env"], "aec": ["env"], "parallel": ["parallel_env"]}[api]
    for name in names:
        factory = getattr(module, name, None)
        if callable(factory):
            return factory
    raise ConfigError(
        f"env.env_id={env_id!r}: module {module_name!r} has no {' or '.join(names)}() (env.pettingzoo_api={api!r})"
    )


def to_aec(game: Any, env_id: str) -> Any:
    """An AEC env from what a factory returned (a parallel env goes through PettingZoo's conversion)."""
    from pettingzoo import AECEnv, ParallelEnv
    from pettingzoo.utils.conversions import parallel_to_aec

    if isinstance(game, AECEnv):
        return game
    if isinstance(game, ParallelEnv):
        return parallel_to_aec(game)
    raise ConfigError(f"env.env_id={env_id!r} built a {type(game).__name__}, not a PettingZoo AECEnv or ParallelEnv")


@dataclass
class Transition:
    """One finished move of one seat: what it saw, did, earned until its next turn, and saw then."""

    env_id: int
    seat: int
    obs: np.ndarray
    action: int
    reward: float
    next_obs: np.ndarray
    next_mask: np.ndarray  # legal actions at next_obs (all False where the game ended)
    done: bool  # the game ended by its rules (a truncated game still bootstraps)
    end: bool = False  # the game ended here, by its rules or truncated (where on-policy advantages stop)
    # what the player's collect mode returned with the move besides the action (on-policy: logp, value,
    # action_mask); attached by the battle collector
    extra: Optional[Dict[str, np.ndarray]] = None


@dataclass
class GameResult:
    """The end of one game: each seat's return and the number of moves played."""

    env_id: int
    returns: Tuple[float, float]
    length: int

    def outcome(self, seat: int) -> str:
        """``win``, ``draw`` or ``loss`` for ``seat``."""
        mine = self.returns[seat]
        return "win" if mine > 0 else ("loss" if mine < 0 else "draw")


class TwoPlayerGame:
    """One PettingZoo game seen as seats 0 and 1, with flat float observations and a boolean action mask."""

    def __init__(self, aec_env: Any, env_id: str, action_mask: str = "required"):
        if action_mask not in ACTION_MASK_MODES:
            raise ConfigError(f"env.action_mask must be one of {ACTION_MASK_MODES}, got {action_mask!r}")
        self.env = aec_env
        self.env_id = env_id
        agents = list(aec_env.possible_agents)
        if len(agents) != 2:
            aec_env.close()
            raise ConfigError(
                f"env {env_id!r} has {len(agents)} agents {agents}; only two-player zero-sum games "
                f"are supported (self-play, battle collectors and the league pit one player against one)"
            )
        self.agents = agents
        self.seat_of = {agent: seat for seat, agent in enumerate(agents)}
        space = aec_env.observation_space(agents[0])
        self._dict_obs = isinstance(space, gym.spaces.Dict)
        if self._dict_obs:
            if "observation" not in space.spaces:
                raise ConfigError(f"env {env_id!r}: dict observations need an 'observation' entry, got {space}")
            obs_space = space["observation"]
        else:
            obs_space = space
        if not isinstance(obs_space, gym.spaces.Box):
            raise ConfigError(
                f"env {env_id!r} has observation space {obs_space}; only Box observations "
                f"(or {{'observation': Box, 'action_mask': ...}}) are supported"
            )
        act_space = aec_env.action_space(agents[0])
        if not isinstance(act_space, gym.spaces.Discrete) or int(act_space.start) != 0:
            raise ConfigError(
                f"env {env_id!r} has action space {act_space}; two-player games need Discrete actions starting at 0"
            )
        self.obs_shape = tuple(obs_space.shape)
        self.action_spec = ActionSpec.discrete(act_space.n)
        self.action_mask = action_mask
        self._no_mask = np.zeros(act_space.n, dtype=bool)
        self._all_legal = np.ones(act_space.n, dtype=bool)

    def reset(self, seed: Optional[int] = None) -> None:
        self.env.reset(seed=seed)
        self.moves = 0

    @property
    def seat(self) -> int:
        return self.seat_of[self.env.agent_selection]

    def last(self) -> Tuple[np.ndarray, np.ndarray, float, bool, bool]:
        """(obs, mask, reward since this seat last moved, terminated, truncated) of the seat to act."""
        obs, reward, terminated, truncated, info = self.env.last()
        mask = None
        if self._dict_obs:
            mask = obs.get("action_mask")
            obs = obs["observation"]
        if mask is None:
            mask = (info or {}).get("action_mask")
        if mask is None:
            if self.action_mask == "required":
                raise ConfigError(
                    f"env {self.env_id!r} gives no action mask (observation['action_mask'] or "
                    f"info['action_mask']); if every action is always legal set "
                    f"env.action_mask='none'"
                )
            mask = self._all_legal
        mask = np.asarray(mask, dtype=bool)
        if not (terminated or truncated) and not mask.any():
            raise ConfigError(
                f"env {self.env_id!r}: the action mask of {self.env.agent_selection!r} allows no "
                f"action while the game goes on"
            )
        return (
            np.asarray(obs, dtype=np.float32).reshape(self.obs_shape),
            mask,
            float(reward),
            bool(terminated),
            bool(truncated),
        )

    def play(self, action: Optional[int]) -> None:
        self.env.step(action)
        if action is not None:
            self.moves += 1

    @property
    def over(self) -> bool:
        return not self.env.agents

    def simulate(self, action: int, seat: Optional[int] = None) -> float:
        """The reward ``seat`` (default: the seat to act) gets right away if it plays ``action`` now, on a copy.

        For one-step-lookahead bots on turn-based games: with another ``seat``, that seat is made the
        one to act on the copy (what it could do if it were its turn)."""
        from pettingzoo.utils import AgentSelector

        raw = clone_state(self.env.unwrapped)
        if seat is not None:
            mover = self.agents[seat]
            raw.agent_selection = mover
            # the turn order, too: games ask their selector for the agent after the mover (Connect Four
            # scores the win against it), so it must name the other seat
            for value in vars(raw).values():
                if isinstance(value, AgentSelector):
                    value.reinit([a for a in self.agents if a != mover] + [mover])
        mover = raw.agent_selection
        raw.step(int(action))
        return float(raw.rewards.get(mover, 0.0))

    def close(self) -> None:
        self.env.close()


# attributes of a raw PettingZoo env that a move never changes (or that must not be copied: pygame surfaces)
_SHARED_STATE = frozenset(
    {
        "action_spaces",
        "observation_spaces",
        "_ezpickle_args",
        "_ezpickle_kwargs",
        "screen",
        "clock",
        "metadata",
        "render_mode",
    }
)


def clone_state(raw_env: Any) -> Any:
    """A deep copy of a raw game's state. ``copy.deepcopy`` will not do: PettingZoo's envs are ``EzPickle``,
    whose copies are rebuilt from the constructor's arguments (a fresh board)."""
    clone = object.__new__(type(raw_env))
    state = vars(raw_env)
    clone.__dict__.update({k: v for k, v in state.items() if k in _SHARED_STATE})  # read-only: shared
    clone.__dict__.update(copy.deepcopy({k: v for k, v in state.items() if k not in _SHARED_STATE}))
    return clone


def make_game(env_cfg: Any, render_mode: Optional[str] = None) -> TwoPlayerGame:
    """Build one game from the ``env`` config section (``env_id``, ``pettingzoo_api``, ``env_kwargs``)."""
    factory = resolve_factory(env_cfg.env_id, env_cfg.get("pettingzoo_api", "auto"))
    try:
        raw = factory(**dict(env_cfg.get("env_kwargs") or {}))
    except TypeError as exc:
        raise ConfigError(
            f"env.env_kwargs {dict(env_cfg.get('env_kwargs') or {})} do not fit {env_cfg.env_id!r}: {exc}"
        ) from exc
    return TwoPlayerGame(to_aec(raw, env_cfg.env_id), env_cfg.env_id, env_cfg.get("action_mask", "required"))


def is_battle_env(env_cfg: Any) -> bool:
    """Does the ``env`` section name a two-player PettingZoo game (rather than a gymnasium env)?"""
    return env_cfg.get("type", "gymnasium") == "pettingzoo"


# moves of the game played before anything starts (a game that has not ended by then is not judged)
PREFLIGHT_MOVES = 10_000


def battle_env_spaces(env_cfg: Any) -> Tuple[Tuple[int, ...], ActionSpec]:
    """(obs_shape, ActionSpec) of the configured game, checking that it is one we support.

    Before any process starts it also plays one game with the first legal move of every turn: a missing
    action mask, an illegal-move mask or returns that do not sum to zero are a ConfigError now rather
    than in the first game of a run (a game that is zero-sum in this game only is still stopped then)."""
    env = BattleEnvManager([make_game(env_cfg)], seed=0)
    try:
        env.reset()  # a missing action mask fails here
        for _ in range(PREFLIGHT_MOVES):
            if env.step(np.argmax(env.mask, axis=1)).results:  # the zero-sum check runs at the game's end
                break
        return env.obs_shape, env.action_spec
    finally:
        env.close()


@dataclass
class BattleStep:
    """What one :meth:`BattleEnvManager.step` produced."""

    transitions: List[Transition]
    results: List[GameResult]


class BattleEnvManager:
    """``num_envs`` copies of one two-player game, one move per game per step, ended games reset at once.

    After :meth:`reset`, ``seat[i]`` is the seat to move in game ``i``, ``obs[i]`` its view and
    ``mask[i]`` its legal actions.
    """

    frame_stack = 0  # boards, not frame stacks: chunks hold the rows as they are (EnvManager.frame_stack)

    def __init__(self, games: List[TwoPlayerGame], seed: Optional[int] = None):
        if not games:
            raise ConfigError(f"BattleEnvManager needs at least one game, got {len(games)}")
        self._games = games
        self.num_envs = len(games)
        self.env_id = games[0].env_id
        self.obs_shape = games[0].obs_shape
        self.action_spec = games[0].action_spec
        self.action_num = self.action_spec.n
        self._seed = seed
        self._resets = 0
        self.closed = False
        n, a = self.num_envs, self.action_num
        self.seat = np.zeros(n, dtype=np.int64)
        self.obs = np.zeros((n,) + self.obs_shape, dtype=np.float32)
        self.mask = np.zeros((n, a), dtype=bool)
        self._pending: List[List[Optional[Tuple[np.ndarray, int]]]] = [[None, None] for _ in range(n)]
        self._returns = np.zeros((n, 2), dtype=np.float64)

    @classmethod
    def from_cfg(cls, env_cfg: Any, num_envs: int, seed: Optional[int] = None) -> "BattleEnvManager":
        if num_envs <= 0:
            raise ConfigError(f"{num_envs=} must be > 0")
        games: List[TwoPlayerGame] = []
        try:
            for _ in range(num_envs):
                games.append(make_game(env_cfg))
        except ConfigError:
            for game in games:
                game.close()
            raise
        return cls(games, seed=seed)

    @property
    def obs_dim(self) -> int:
        return int(np.prod(self.obs_shape))

    @property
    def games(self) -> List[TwoPlayerGame]:
        """The games (bots that look ahead simulate moves on copies of them)."""
        return self._games

    def reset(self, seed: Optional[int] = None) -> None:
        """Start a new game everywhere (pending moves of unfinished games are dropped)."""
        base = self._seed if seed is None else seed
        for i, game in enumerate(self._games):
            game.reset(seed=None if base is None else base + i)
            self._pending[i] = [None, None]
            self._returns[i] = 0.0
            self._advance(i, [], [])
        self._resets += 1

    def step(self, actions: np.ndarray) -> BattleStep:
        """Play ``actions[i]`` for the seat to move in game ``i`` (an illegal action is refused)."""
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"BattleEnvManager.step needs one action per game, got shape {actions.shape}")
        illegal = ~self.mask[np.arange(self.num_envs), actions]
        if illegal.any():
            i = int(np.flatnonzero(illegal)[0])
            raise ValueError(
                f"illegal action {int(actions[i])} in game {i} (legal: "
                f"{np.flatnonzero(self.mask[i]).tolist()}); mask the policy's actions"
            )
        transitions: List[Transition] = []
        results: List[GameResult] = []
        for i, game in enumerate(self._games):
            seat, action = int(self.seat[i]), int(actions[i])
            self._pending[i][seat] = (self.obs[i].copy(), action)
            game.play(action)
            self._advance(i, transitions, results)
        return BattleStep(transitions, results)

    def _advance(self, i: int, transitions: List[Transition], results: List[GameResult]) -> None:
        """Hand out what game ``i`` owes each seat until a live seat must move (resetting ended games)."""
        game = self._games[i]
        while True:
            if game.over:
                returns = (float(self._returns[i, 0]), float(self._returns[i, 1]))
                if abs(sum(returns)) > ZERO_SUM_TOLERANCE:
                    raise ConfigError(
                        f"env {self.env_id!r} is not zero-sum: a game ended with returns {returns} "
                        f"(seat 0, seat 1); only two-player zero-sum games are supported"
                    )
                results.append(GameResult(i, returns, game.moves))
                game.reset(seed=None)
                self._pending[i] = [None, None]
                self._returns[i] = 0.0
                continue
            seat = game.seat
            obs, mask, reward, terminated, truncated = game.last()
            self._returns[i, seat] += reward
            ended = terminated or truncated
            pending = self._pending[i][seat]
            if pending is not None:
                transitions.append(
                    Transition(i, seat, pending[0], pending[1], reward, obs, mask & (not ended), terminated, ended)
                )
                self._pending[i][seat] = None
            if ended:
                game.play(None)
                continue
            self.seat[i], self.obs[i], self.mask[i] = seat, obs, mask
            return

    def close(self) -> None:
        if not self.closed:
            for game in self._games:
                game.close()
            self.closed = True

    def __enter__(self) -> "BattleEnvManager":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
