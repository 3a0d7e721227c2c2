"""Built-in opponents for two-player games: fixed players with no network (torch-free).

A bot answers like a policy mode: ``forward(obs, mask=..., games=...)`` returns
one legal action per row. ``games`` (the :class:`~parallel_rl.envs.multiagent.TwoPlayerGame`
of each row) is passed to bots whose ``needs_game`` is true.

- ``random``: a uniformly random legal action.
- ``lookahead``: one-step lookahead on turn-based games: win if you can (a
  legal move that wins at once), block if you must (a move the opponent would
  win with if it were its turn), else random.
- ``first_legal``: the lowest legal action (deterministic; scripted tests).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np

from ..registry import Registry

BOT_REGISTRY = Registry("bot")


class Bot:
    """A fixed player: no state to learn, load or save."""

    needs_game = False

    def __init__(self, seed: Optional[int] = None):
        self._rng = np.random.default_rng(seed)

    def forward(
        self, obs: np.ndarray, mask: Optional[np.ndarray] = None, games: Optional[Sequence[Any]] = None, **_: Any
    ) -> np.ndarray:
        raise NotImplementedError

    def state_dict(self) -> Dict:
        return {}

    def load_state_dict(self, state: Dict) -> None:
        """Bots have no weights; loading is a no-op."""

    @staticmethod
    def _legal(obs: np.ndarray, mask: Optional[np.ndarray], n_actions: int) -> np.ndarray:
        if mask is None:
            return np.ones((len(obs), n_actions), dtype=bool)
        return np.asarray(mask, dtype=bool)

    def _random_legal(self, legal_row: np.ndarray) -> int:
        return int(self._rng.choice(np.flatnonzero(legal_row)))


@BOT_REGISTRY.register("random")
class RandomBot(Bot):
    def __init__(self, seed: Optional[int] = None, n_actions: int = 0):
        super().__init__(seed)
        self.n_actions = n_actions

    def forward(self, obs, mask=None, games=None, **_):
        legal = self._legal(obs, mask, self.n_actions)
        return np.array([self._random_legal(row) for row in legal], dtype=np.int64)


@BOT_REGISTRY.register("first_legal")
class FirstLegalBot(Bot):
    def __init__(self, seed: Optional[int] = None, n_actions: int = 0):
        super().__init__(seed)
        self.n_actions = n_actions

    def forward(self, obs, mask=None, games=None, **_):
        return np.argmax(self._legal(obs, mask, self.n_actions), axis=1).astype(np.int64)


@BOT_REGISTRY.register("lookahead")
class LookaheadBot(Bot):
    needs_game = True

    def __init__(self, seed: Optional[int] = None, n_actions: int = 0):
        super().__init__(seed)
        self.n_actions = n_actions

    def forward(self, obs, mask=None, games=None, **_):
        if games is None:
            raise ValueError("the lookahead bot needs the games (the battle collectors and evaluator pass them)")
        legal = self._legal(obs, mask, self.n_actions)
        return np.array([self._act(game, row) for game, row in zip(games, legal)], dtype=np.int64)

    def _act(self, game: Any, legal_row: np.ndarray) -> int:
        moves = np.flatnonzero(legal_row)
        for action in moves:  # win if you can
            if game.simulate(int(action)) > 0:
                return int(action)
        opponent = 1 - game.seat
        for action in moves:  # block if you must
            if game.simulate(int(action), seat=opponent) > 0:
                return int(action)
        return self._random_legal(legal_row)


def create_bot(name: str, seed: Optional[int] = None, n_actions: int = 0) -> Bot:
    """A built-in bot by name (``random``, ``lookahead``, ``first_legal``, or a registered one)."""
    return BOT_REGISTRY.build(name, seed=seed, n_actions=n_actions)
