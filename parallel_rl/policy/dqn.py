"""DQN: Q-network (MLP or conv encoder), target network, double DQN, n-step targets, epsilon-greedy.

The update reads in the paper's names (Mnih et al. 2015; van Hasselt et al.
2016): ``q_value``, ``target_network``, ``td_target``, ``td_error``. Batches
are dicts of numpy columns (:mod:`parallel_rl.data.columns`; the row layout
is in :mod:`parallel_rl.collector.serial`); the n-step return and its
discount are computed by the collector, so one row holds
``obs, action, reward (= n-step return), next_obs, done, discount``.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from easydict import EasyDict
from torch import nn

from ..errors import ConfigError
from .base import Policy, PolicyMode  # noqa: F401 (PolicyMode re-exported)
from .defaults import dqn_default_config
from .nets import body, cpu_state_dict, obs_float, to_tensor
from .optim import make_optimizer


def uniform_legal_actions(mask: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One action per row drawn uniformly among the legal ones (``mask[i]``), from uniform [0, 1) draws ``u``."""
    legal = np.asarray(mask, dtype=bool)
    count = legal.sum(axis=1)
    if (count == 0).any():
        raise ValueError(f"an action mask allows no action (rows {np.flatnonzero(count == 0).tolist()})")
    # the k-th legal action, k = floor(u * count)
    k = np.minimum((u * count).astype(np.int64), count - 1)
    return np.argmax(legal.cumsum(axis=1) > k[:, None], axis=1)


class QNetwork(nn.Module):
    """Encoder (``policy.model.encoder``: MLP or conv) and hidden layers, then a plain or dueling (value +
    advantage) head."""

    def __init__(
        self,
        obs_dim: int,
        action_num: int,
        hidden_size_list: Sequence[int],
        dueling: bool = True,
        encoder: Optional[dict] = None,
    ):
        super().__init__()
        layers, last = body(obs_dim, hidden_size_list, "policy.model.hidden_size_list", nn.ReLU, encoder)
        self.encoder = nn.Sequential(*layers)
        self.dueling = dueling
        if dueling:
            self.advantage = nn.Linear(last, action_num)
            self.value = nn.Linear(last, 1)
        else:
            self.head = nn.Linear(last, action_num)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.encoder(obs_float(obs))
        if self.dueling:
            advantage = self.advantage(x)
            return self.value(x) + advantage - advantage.mean(dim=-1, keepdim=True)
        return self.head(x)


class DQNPolicy(Policy):
    @classmethod
    def default_config(cls) -> EasyDict:
        return dqn_default_config()

    def __init__(self, cfg: EasyDict, obs_dim: int, action_num, seed: Optional[int] = None, device: str = "cpu"):
        """``action_num``: the number of discrete actions, or a discrete ActionSpec."""
        action_num = getattr(action_num, "n", action_num)
        if not isinstance(action_num, int) or action_num <= 0:
            raise ConfigError(
                f"policy.type={cfg.get('type', 'dqn')!r} needs a Discrete action space, got {action_num=}"
            )
        self.cfg = cfg
        self.action_num = action_num
        self.device = device
        if seed is not None:
            torch.manual_seed(seed)
        self._rng = np.random.default_rng(seed)
        self._pool = np.empty(0)
        self._pool_pos = 0
        self.model, self.target_network = self.q_network(obs_dim), self.q_network(obs_dim)
        self.target_network.load_state_dict(self.model.state_dict())
        self.target_network.requires_grad_(False)
        self.model.to(device)
        self.target_network.to(device)
        self.optimizer = make_optimizer(self.model.parameters(), cfg.learn)
        self.learn_steps = 0

    def q_network(self, obs_dim: int) -> nn.Module:
        """A Q-network as ``policy.model`` describes it (the online and the target network are two of them)."""
        m = self.cfg.model
        return QNetwork(obs_dim, self.action_num, m.hidden_size_list, m.dueling, m.get("encoder"))

    # ---- acting ----------------------------------------------------------------
    @torch.no_grad()
    def greedy_actions(self, obs: np.ndarray, mask: Optional[np.ndarray] = None) -> np.ndarray:
        """argmax of Q, over the legal actions (``mask[i, a]`` true) when a mask is given."""
        q_value = self.model(to_tensor(obs.reshape(obs.shape[0], -1), self.device, None))
        if mask is not None:
            q_value = q_value.masked_fill(~to_tensor(mask, self.device, torch.bool), -torch.inf)
        return q_value.argmax(dim=-1).cpu().numpy()

    def forward_collect(self, obs: np.ndarray, eps: float, mask: Optional[np.ndarray] = None) -> np.ndarray:
        """Epsilon-greedy actions for a batch of observations; with ``mask``, only legal actions."""
        return self._explore(self.greedy_actions(obs, mask), eps, mask)

    def _explore(self, actions: np.ndarray, eps: float, mask: Optional[np.ndarray] = None) -> np.ndarray:
        """``actions`` with each replaced by a uniformly random (legal) one with probability ``eps``."""
        if eps > 0.0:
            n = len(actions)
            u = self._uniform(2 * n)
            explore = u[:n] < eps
            # the second half of the draws picks the random action
            if mask is None:
                random_actions = (u[n:] * self.action_num).astype(actions.dtype)
            else:
                random_actions = uniform_legal_actions(mask, u[n:]).astype(actions.dtype)
            actions = np.where(explore, random_actions, actions)
        return actions

    def _uniform(self, n: int) -> np.ndarray:
        """``n`` uniform [0, 1) draws from a pre-drawn block (small draws cost ~10 us each)."""
        if self._pool_pos + n > len(self._pool):
            self._pool = self._rng.random(max(65536, n))
            self._pool_pos = 0
        out = self._pool[self._pool_pos : self._pool_pos + n]
        self._pool_pos += n
        return out

    def forward_eval(self, obs: np.ndarray, mask: Optional[np.ndarray] = None) -> np.ndarray:
        return self.greedy_actions(obs, mask)

    # ---- learning --------------------------------------------------------------
    def forward_learn(self, batch: Dict[str, np.ndarray]) -> Dict:
        """One DQN update on a batch of n-step transitions.

        Returns scalar stats and ``priority`` (|td_error| per row, numpy).
        """
        device = self.device
        obs = to_tensor(batch["obs"], device, None).flatten(1)
        next_obs = to_tensor(batch["next_obs"], device, None).flatten(1)
        action = to_tensor(batch["action"], device, torch.long)
        reward = to_tensor(batch["reward"], device)
        done = to_tensor(batch["done"], device)
        discount = to_tensor(batch["discount"], device)
        weight = to_tensor(batch["weight"], device) if "weight" in batch else None

        # Double DQN: one forward pass of the online network over obs and next_obs together; single DQN needs
        # no online values of next_obs (a third less forward work: it matters for conv networks)
        n = obs.shape[0]
        double = self.cfg.learn.double
        online_q = self.model(torch.cat([obs, next_obs]) if double else obs)
        q_value = online_q[:n].gather(1, action.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            target_q = self.target_network(next_obs)
            next_online_q = online_q[n:] if double else None
            if "next_action_mask" in batch:  # two-player games: the best *legal* next action
                illegal = ~to_tensor(batch["next_action_mask"], device, torch.bool)
                # rows whose game ended have no legal action; their (1 - done) zeroes next_q anyway
                illegal &= ~illegal.all(dim=1, keepdim=True)
                target_q = target_q.masked_fill(illegal, -torch.inf)
                if double:
                    next_online_q = next_online_q.masked_fill(illegal, -torch.inf)
            if double:
                next_action = next_online_q.argmax(dim=1, keepdim=True)
            else:
                next_action = target_q.argmax(dim=1, keepdim=True)
            next_q = target_q.gather(1, next_action).squeeze(1)
            td_target = reward + discount * (1.0 - done) * next_q
        td_error = td_target - q_value
        elementwise = F.smooth_l1_loss(q_value, td_target, reduction="none")
        loss = (elementwise * weight).mean() if weight is not None else elementwise.mean()

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()  # averaged over the learner ranks, clipped to max_grad_norm
        self.learn_steps += 1
        self._update_target_network()
        return {
            "loss": loss.detach(),
            "q_value": q_value.detach().mean(),
            "td_error": td_error.detach().abs().mean(),
            "priority": td_error.detach().abs().cpu().numpy(),
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
    def state_dict(self) -> Dict:
        """Everything needed to resume learning (model, target network, optimizer)."""
        return {
            "model": cpu_state_dict(self.model),
            "target_network": cpu_state_dict(self.target_network),
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
