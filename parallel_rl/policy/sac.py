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
from ..errors import ConfigError
from .defaults import sac_default_config
from .base import Policy
from .nets import cpu_state_dict, mlp, to_tensor
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


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden_size_list):
        super().__init__()
        self.net = mlp(obs_dim + action_dim, hidden_size_list, 1, "policy.model.critic_hidden_size_list")

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, action], dim=-1)).squeeze(-1)


class SACPolicy(Policy):
    on_policy = False

    @classmethod
    def default_config(cls) -> EasyDict:
        return sac_default_config()

    def __init__(self, cfg: EasyDict, obs_dim: int, action: ActionSpec, seed: Optional[int] = None,
                 device: str = "cpu"):
        if not isinstance(action, ActionSpec) or action.kind != "box":
            raise ConfigError(f"policy.type='sac' needs a Box action space, got {action!r}")
        self.cfg = cfg
        self.spec = action
        self.device = device
        if seed is not None:
            torch.manual_seed(seed)
        dim = action.dim
        m = cfg.model
        self.actor = TanhGaussianActor(obs_dim, dim, m.actor_hidden_size_list).to(device)
        self.q1 = QNetwork(obs_dim, dim, m.critic_hidden_size_list).to(device)
        self.q2 = QNetwork(obs_dim, dim, m.critic_hidden_size_list).to(device)
        self.target_q1 = QNetwork(obs_dim, dim, m.critic_hidden_size_list).to(device)
        self.target_q2 = QNetwork(obs_dim, dim, m.critic_hidden_size_list).to(device)
        self.target_q1.load_state_dict(self.q1.state_dict())
        self.target_q2.load_state_dict(self.q2.state_dict())
        self.target_q1.requires_grad_(False)
        self.target_q2.requires_grad_(False)
        low, high = torch.as_tensor(action.low).flatten(), torch.as_tensor(action.high).flatten()
        self.action_scale = ((high - low) / 2.0).to(device)
        self.action_bias = ((high + low) / 2.0).to(device)
        learn = cfg.learn
        self.log_alpha = torch.tensor(math.log(learn.init_alpha), device=device, requires_grad=True)
        self.target_entropy = float(learn.target_entropy_per_dim) * dim
        self.actor_optimizer = Adam(self.actor.parameters(), lr=learn.learning_rate_policy)
        self.critic_optimizer = Adam(list(self.q1.parameters()) + list(self.q2.parameters()),
                                     lr=learn.learning_rate_q)
        self.alpha_optimizer = Adam([self.log_alpha], lr=learn.learning_rate_alpha)
        self.learn_steps = 0

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        return to_tensor(obs, self.device).flatten(1)

    def _to_env(self, action: torch.Tensor, n: int) -> np.ndarray:
        env_action = action * self.action_scale + self.action_bias
        return env_action.cpu().numpy().astype(np.float32).reshape((n,) + self.spec.shape)

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
        learn = self.cfg.learn
        obs = self._obs(batch["obs"])
        next_obs = self._obs(batch["next_obs"])
        action = (to_tensor(batch["action"], self.device).reshape(len(obs), -1) - self.action_bias) / self.action_scale
        reward = to_tensor(batch["reward"], self.device)
        done = to_tensor(batch["done"], self.device)
        discount = to_tensor(batch["discount"], self.device)
        alpha = self.alpha

        with torch.no_grad():
            next_action, next_logp = self.actor(next_obs)
            target_q = torch.min(self.target_q1(next_obs, next_action), self.target_q2(next_obs, next_action))
            q_target = reward + discount * (1.0 - done) * (target_q - alpha * next_logp)
        q1, q2 = self.q1(obs, action), self.q2(obs, action)
        td_error = 0.5 * (q1 + q2) - q_target
        critic_loss = F.mse_loss(q1, q_target) + F.mse_loss(q2, q_target)
        if "weight" in batch:
            weight = to_tensor(batch["weight"], self.device)
            critic_loss = (weight * ((q1 - q_target).pow(2) + (q2 - q_target).pow(2))).mean()
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

        with torch.no_grad():
            theta = learn.target_theta
            for target, online in ((self.target_q1, self.q1), (self.target_q2, self.q2)):
                torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), theta)
        self.learn_steps += 1
        info = {
            "loss": critic_loss.detach(),
            "critic_loss": critic_loss.detach(),
            "policy_loss": policy_loss.detach(),
            "alpha_loss": alpha_loss.detach(),
            "alpha": alpha,
            "entropy": -logp.detach().mean(),
            "q_value": q1.detach().mean(),
        }
        if "index" in batch:  # prioritized replay wants |td_error| per row (one host copy per update)
            info["priority"] = td_error.detach().abs().cpu().numpy()
        return info

    # ---- state -----------------------------------------------------------------
    def model_state_dict(self) -> Dict:
        return {"actor": cpu_state_dict(self.actor)}

    def load_model_state_dict(self, state: Dict) -> None:
        self.actor.load_state_dict(state["actor"])

    def state_dict(self) -> Dict:
        return {
            "actor": cpu_state_dict(self.actor),
            "q1": cpu_state_dict(self.q1), "q2": cpu_state_dict(self.q2),
            "target_q1": cpu_state_dict(self.target_q1), "target_q2": cpu_state_dict(self.target_q2),
            "log_alpha": self.log_alpha.detach().cpu(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "learn_steps": self.learn_steps,
        }

    def load_state_dict(self, state: Dict) -> None:
        self.actor.load_state_dict(state["actor"])
        for name in ("q1", "q2", "target_q1", "target_q2"):
            if name in state:
                getattr(self, name).load_state_dict(state[name])
        if "log_alpha" in state:
            with torch.no_grad():
                self.log_alpha.copy_(state["log_alpha"])
        for name in ("actor_optimizer", "critic_optimizer", "alpha_optimizer"):
            if name in state:
                getattr(self, name).load_state_dict(state[name])
        self.learn_steps = int(state.get("learn_steps", self.learn_steps))
