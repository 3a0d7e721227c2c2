"""SAC: twin Q critics, Polyak-averaged targets, tanh-squashed Gaussian actor, automatic temperature.

Haarnoja et al. 2018 ("Soft Actor-Critic Algorithms and Applications"), in its names:
``q1``/``q2`` and their ``target_q1``/``target_q2``, ``alpha`` (the temperature) tuned so the policy's
entropy approaches ``target_entropy``. Box actions only; the replay rows hold the env's action, the
networks see it scaled to [-1, 1]. Off-policy: data goes through the replay buffer like DQN's.
"""

from __future__ import annotations

import math
from typing import Dict, Optional

import numpy as np
import torch
import torch.nn.functional as F
from easydict import EasyDict
from torch import nn

from ..envs.spaces import ActionSpec
from .continuous import BoxActorCritic, QNetwork  # noqa: F401  (QNetwork: parallel_rl.policy.sac's name)
from .defaults import sac_default_config
from .nets import mlp
from .graphs import GraphedUpdate
from .optim import Adam

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class TanhGaussianActor(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden_size_list):
        super().__init__()
        self.net = mlp(obs_dim, hidden_size_list, 2 * action_dim, "policy.model.actor_hidden_size_list")

    def forward(self, obs: torch.Tensor, deterministic: bool = False):
        """(action in [-1, 1], log pi(action | obs)); the log-prob includes the tanh change of variables."""
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        if deterministic:
            return torch.tanh(mean), None
        log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        std = log_std.exp()
        noise = torch.randn_like(mean)
        u = mean + std * noise
        action = torch.tanh(u)
        gaussian_logp = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        # log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)), numerically stable
        squash = (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
        return action, gaussian_logp - squash


class SACPolicy(BoxActorCritic):
    _OPTIMIZERS = ("actor_optimizer", "critic_optimizer", "alpha_optimizer")

    @classmethod
    def default_config(cls) -> EasyDict:
        return sac_default_config()

    def __init__(
        self, cfg: EasyDict, obs_dim: int, action: ActionSpec, seed: Optional[int] = None, device: str = "cpu"
    ):
        self._setup(cfg, obs_dim, action, seed, device, TanhGaussianActor)
        learn = cfg.learn
        self.log_alpha = torch.tensor(math.log(learn.init_alpha), device=device, requires_grad=True)
        self.target_entropy = float(learn.target_entropy_per_dim) * action.dim
        self.actor_optimizer = Adam(self.actor.parameters(), lr=learn.learning_rate_policy)
        self.critic_optimizer = Adam(list(self.q1.parameters()) + list(self.q2.parameters()), lr=learn.learning_rate_q)
        self.alpha_optimizer = Adam([self.log_alpha], lr=learn.learning_rate_alpha)
        self._graphed_update = GraphedUpdate(self._update, device, learn.cuda_graph)

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    # ---- acting ----------------------------------------------------------------
    @torch.no_grad()
    def forward_collect(self, obs: np.ndarray, eps: float = 0.0) -> np.ndarray:
        """Actions sampled from the squashed Gaussian (``eps`` unused: SAC explores by its entropy)."""
        action, _ = self.actor(self._obs(obs))
        return self._to_env(action, len(obs))

    @torch.no_grad()
    def forward_eval(self, obs: np.ndarray) -> np.ndarray:
        action, _ = self.actor(self._obs(obs), deterministic=True)
        return self._to_env(action, len(obs))

    # ---- learning --------------------------------------------------------------
    def forward_learn(self, batch: Dict[str, np.ndarray]) -> Dict:
        """One SAC update (critics, actor, temperature, Polyak targets); scalars as 0-d tensors."""
        inputs = self.learn_inputs(batch)
        info = self._graphed_update(inputs)
        self.learn_steps += 1
        td_error = info.pop("td_error")
        if "index" in batch:  # prioritized replay wants |td_error| per row (one host copy per update)
            info["priority"] = td_error.abs().cpu().numpy()
        return info

    def _update(self, t: Dict[str, torch.Tensor], key=()) -> Dict[str, torch.Tensor]:
        """The update on tensors only, no host copy: what :class:`GraphedUpdate` records on CUDA."""
        learn = self.cfg.learn
        obs, next_obs, action, alpha = t["obs"], t["next_obs"], t["action"], self.alpha
        with torch.no_grad():
            next_action, next_logp = self.actor(next_obs)
            target_q = torch.min(self.target_q1(next_obs, next_action), self.target_q2(next_obs, next_action))
            q_target = t["reward"] + t["discount"] * (1.0 - t["done"]) * (target_q - alpha * next_logp)
        q1, q2 = self.q1(obs, action), self.q2(obs, action)
        td_error = 0.5 * (q1 + q2) - q_target
        critic_loss = self.critic_loss(q1, q2, q_target, t)
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()

        new_action, logp = self.actor(obs)
        q_new = torch.min(self.q1(obs, new_action), self.q2(obs, new_action))
        policy_loss = (alpha * logp - q_new).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        policy_loss.backward()
        self.actor_optimizer.step()

        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        if learn.auto_alpha:
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()
            self.alpha_optimizer.step()

        self.polyak(((self.target_q1, self.q1), (self.target_q2, self.q2)), learn.target_theta)
        return {
            "loss": critic_loss.detach(),
            "critic_loss": critic_loss.detach(),
            "policy_loss": policy_loss.detach(),
            "alpha_loss": alpha_loss.detach(),
            "alpha": alpha,
            "entropy": -logp.detach().mean(),
            "q_value": q1.detach().mean(),
            "td_error": td_error.detach(),
        }

    # ---- state -----------------------------------------------------------------
    def state_dict(self) -> Dict:
        return {**super().state_dict(), "log_alpha": self.log_alpha.detach().cpu()}

    def load_state_dict(self, state: Dict) -> None:
        super().load_state_dict(state)
        if "log_alpha" in state:
            with torch.no_grad():
                self.log_alpha.copy_(state["log_alpha"])
