"""DQN: MLP Q-network, target network, double DQN, n-step targets, epsilon-greedy.

The update reads in the paper's names (Mnih et al. 2015; van Hasselt et al.
2016): ``q_value``, ``target_network``, ``td_target``, ``td_error``. Batches
are dicts of numpy columns (see :mod:`parallel_rl.data.columns`); the n-step
return and its discount are computed by the collector, so one row holds
``obs, action, reward (= n-step return), next_obs, done, discount``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from easydict import EasyDict
from torch import nn

from ..errors import ConfigError
from .defaults import dqn_default_config
from .optim import Adam


class QNetwork(nn.Module):
    """MLP encoder, then a plain or dueling (value + advantage) head."""

    def __init__(self, obs_dim: int, action_num: int, hidden_size_list: Sequence[int], dueling: bool = True):
        super().__init__()
        if not hidden_size_list:
            raise ConfigError(f"policy.model.hidden_size_list must not be empty, got {hidden_size_list!r}")
        layers, last = [], obs_dim
        for size in hidden_size_list:
            layers += [nn.Linear(last, size), nn.ReLU()]
            last = size
        self.encoder = nn.Sequential(*layers)
        self.dueling = dueling
        if dueling:
            self.advantage = nn.Linear(last, action_num)
            self.value = nn.Linear(last, 1)
        else:
            self.head = nn.Linear(last, action_num)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.encoder(obs)
        if self.dueling:
            advantage = self.advantage(x)
            return self.value(x) + advantage - advantage.mean(dim=-1, keepdim=True)
        return self.head(x)


@dataclass(frozen=True)
class PolicyMode:
    """One mode of a policy (DI-engine's ``learn_mode`` / ``collect_mode`` / ``eval_mode``)."""

    forward: Callable
    state_dict: Callable
    load_state_dict: Callable


class DQNPolicy:
    @classmethod
    def default_config(cls) -> EasyDict:
        return dqn_default_config()

    def __init__(self, cfg: EasyDict, obs_dim: int, action_num: int, seed: Optional[int] = None):
        self.cfg = cfg
        self.action_num = action_num
        if seed is not None:
            torch.manual_seed(seed)
        self._rng = np.random.default_rng(seed)
        self._pool = np.empty(0)
        self._pool_pos = 0
        self.model = QNetwork(obs_dim, action_num, cfg.model.hidden_size_list, cfg.model.dueling)
        self.target_network = QNetwork(obs_dim, action_num, cfg.model.hidden_size_list, cfg.model.dueling)
        self.target_network.load_state_dict(self.model.state_dict())
        self.target_network.requires_grad_(False)
        self.optimizer = Adam(self.model.parameters(), lr=cfg.learn.learning_rate)
        self.learn_steps = 0

    # ---- modes -----------------------------------------------------------------
    @property
    def learn_mode(self) -> PolicyMode:
        return PolicyMode(self.forward_learn, self.state_dict, self.load_state_dict)

    @property
    def collect_mode(self) -> PolicyMode:
        return PolicyMode(self.forward_collect, self.model_state_dict, self.load_model_state_dict)

    @property
    def eval_mode(self) -> PolicyMode:
        return PolicyMode(self.forward_eval, self.model_state_dict, self.load_model_state_dict)

    # ---- acting ----------------------------------------------------------------
    @torch.no_grad()
    def greedy_actions(self, obs: np.ndarray) -> np.ndarray:
        q_value = self.model(torch.from_numpy(obs.reshape(obs.shape[0], -1)))
        return q_value.argmax(dim=-1).numpy()

    def forward_collect(self, obs: np.ndarray, eps: float) -> np.ndarray:
        """Epsilon-greedy actions for a batch of observations."""
        actions = self.greedy_actions(obs)
        if eps > 0.0:
            n = len(actions)
            u = self._uniform(2 * n)
            explore = u[:n] < eps
            # the second half of the draws picks the random action
            actions = np.where(explore, (u[n:] * self.action_num).astype(actions.dtype), actions)
        return actions

    def _uniform(self, n: int) -> np.ndarray:
        """``n`` uniform [0, 1) draws from a pre-drawn block (small draws cost ~10 us each)."""
        if self._pool_pos + n > len(self._pool):
            self._pool = self._rng.random(max(65536, n))
            self._pool_pos = 0
        out = self._pool[self._pool_pos : self._pool_pos + n]
        self._pool_pos += n
        return out

    def forward_eval(self, obs: np.ndarray) -> np.ndarray:
        return self.greedy_actions(obs)

    # ---- learning --------------------------------------------------------------
    def forward_learn(self, batch: Dict[str, np.ndarray]) -> Dict:
        """One DQN update on a batch of n-step transitions.

        Returns scalar stats and ``priority`` (|td_error| per row, numpy).
        """
        obs = torch.from_numpy(batch["obs"]).flatten(1)
        next_obs = torch.from_numpy(batch["next_obs"]).flatten(1)
        action = torch.from_numpy(batch["action"]).long()
        reward = torch.from_numpy(batch["reward"]).float()
        done = torch.from_numpy(batch["done"]).float()
        discount = torch.from_numpy(batch["discount"]).float()
        weight = torch.from_numpy(batch["weight"]).float() if "weight" in batch else None

        # One forward pass of the online network over obs and next_obs together.
        n = obs.shape[0]
        online_q = self.model(torch.cat([obs, next_obs]))
        q_value = online_q[:n].gather(1, action.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            target_q = self.target_network(next_obs)
            if self.cfg.learn.double:
                next_action = online_q[n:].argmax(dim=1, keepdim=True)
            else:
                next_action = target_q.argmax(dim=1, keepdim=True)
            next_q = target_q.gather(1, next_action).squeeze(1)
            td_target = reward + discount * (1.0 - done) * next_q
        td_error = td_target - q_value
        elementwise = F.smooth_l1_loss(q_value, td_target, reduction="none")
        loss = (elementwise * weight).mean() if weight is not None else elementwise.mean()

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.learn.max_grad_norm:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.learn.max_grad_norm)
        self.optimizer.step()
        self.learn_steps += 1
        self._update_target_network()
        return {
            "loss": float(loss.detach()),
            "q_value": float(q_value.detach().mean()),
            "td_error": float(td_error.detach().abs().mean()),
            "priority": td_error.detach().abs().numpy(),
        }

    def _update_target_network(self) -> None:
        freq = self.cfg.learn.target_update_freq
        if freq > 0:
            if self.learn_steps % freq == 0:
                self.target_network.load_state_dict(self.model.state_dict())
            return
        theta = self.cfg.learn.target_theta
        with torch.no_grad():
            for target, online in zip(self.target_network.parameters(), self.model.parameters()):
                target.mul_(1.0 - theta).add_(online, alpha=theta)

    # ---- state -----------------------------------------------------------------
    def model_state_dict(self) -> Dict:
        return {"model": self.model.state_dict()}

    def load_model_state_dict(self, state: Dict) -> None:
        self.model.load_state_dict(state["model"])

    def state_dict(self) -> Dict:
        """Everything needed to resume learning (model, target network, optimizer)."""
        return {
            "model": self.model.state_dict(),
            "target_network": self.target_network.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "learn_steps": self.learn_steps,
        }

    def load_state_dict(self, state: Dict) -> None:
        self.model.load_state_dict(state["model"])
        if "target_network" in state:
            self.target_network.load_state_dict(state["target_network"])
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        self.learn_steps = int(state.get("learn_steps", self.learn_steps))
