"""Deterministic toy two-player games (PettingZoo APIs) for exact tests.

``countdown_env`` (AEC, turn-based): a counter starts at ``start``; the player
to move takes 1 (action 0) or 2 (action 1, legal only while the counter is at
least 2) off it; whoever takes it to 0 wins (+1, the other -1). A game that
reaches ``max_moves`` moves first is truncated as a draw. The observation is
``[counter / start, moves / max_moves]`` with the mask in the observation
dict. Nothing is random: two scripted players always play the same game.
Knobs for the bad-input tests: ``n_agents`` (more than two),
``loser_reward`` (not zero-sum when it is not ``-1``), ``mask`` (no mask).

``duel_parallel_env`` (parallel, simultaneous moves): ``rounds`` rounds; both
players pick 0 or 1; player_0 scores +1 when the picks match, player_1 scores
+1 when they differ (the other gets -1). Every action is always legal and the
env gives no mask (``env.action_mask = "none"``).
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import AgentSelector


class CountdownGame(AECEnv):
    metadata = {"render_modes": [], "name": "countdown_v0", "is_parallelizable": False}

    def __init__(
        self, start: int = 5, max_moves: int = 100, n_agents: int = 2, loser_reward: float = -1.0, mask: bool = True
    ):
        super().__init__()
        if start < 1 or max_moves < 1:
            raise ValueError(f"{start=} and {max_moves=} must be >= 1")
        self.start, self.max_moves, self.loser_reward, self.with_mask = start, max_moves, loser_reward, mask
        self.possible_agents = [f"player_{i}" for i in range(n_agents)]
        board = gym.spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
        self._obs_space = (
            gym.spaces.Dict({"observation": board, "action_mask": gym.spaces.MultiBinary(2)}) if mask else board
        )
        self._act_space = gym.spaces.Discrete(2)

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def observe(self, agent):
        board = np.array([self.counter / self.start, self.moves / self.max_moves], dtype=np.float32)
        if not self.with_mask:
            return board
        mask = np.array([1, int(self.counter >= 2)], dtype=np.int8)
        if agent != self.agent_selection or self.counter == 0:
            mask[:] = 0
        return {"observation": board, "action_mask": mask}

    def reset(self, seed=None, options=None):
        self.agents = self.possible_agents[:]
        self.counter, self.moves = self.start, 0
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self._selector = AgentSelector(self.agents)
        self.agent_selection = self._selector.reset()

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        action = int(action)
        if action == 1 and self.counter < 2:
            raise ValueError(f"countdown: action 1 is illegal with counter={self.counter}")
        self._cumulative_rewards[agent] = 0.0
        self.counter -= 1 + action
        self.moves += 1
        self.rewards = {a: 0.0 for a in self.agents}
        if self.counter <= 0:
            self.counter = 0
            for other in self.agents:
                self.rewards[other] = 1.0 if other == agent else self.loser_reward
            self.terminations = {a: True for a in self.agents}
        elif self.moves >= self.max_moves:
            self.truncations = {a: True for a in self.agents}
        self.agent_selection = self._selector.next()
        self._accumulate_rewards()


def countdown_env(**kwargs) -> CountdownGame:
    return CountdownGame(**kwargs)


class DuelGame(ParallelEnv):
    metadata = {"render_modes": [], "name": "duel_v0"}
    render_mode = None

    def __init__(self, rounds: int = 3):
        if rounds < 1:
            raise ValueError(f"{rounds=} must be >= 1")
        self.rounds = rounds
        self.possible_agents = ["player_0", "player_1"]

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def _obs(self):
        return {a: np.array([self.round / self.rounds], dtype=np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        self.agents = self.possible_agents[:]
        self.round = 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        match = int(actions["player_0"]) == int(actions["player_1"])
        rewards = {"player_0": 1.0 if match else -1.0, "player_1": -1.0 if match else 1.0}
        self.round += 1
        over = self.round >= self.rounds
        obs = self._obs()
        terminations = {a: over for a in self.agents}
        truncations = {a: False for a in self.agents}
        infos = {a: {} for a in self.agents}
        if over:
            self.agents = []
        return obs, rewards, terminations, truncations, infos


def duel_parallel_env(**kwargs) -> DuelGame:
    return DuelGame(**kwargs)
