"""TD3: twin critics, target policy smoothing, delayed actor updates.

Fujimoto, van Hoof & Meger 2018 ("Addressing Function Approximation Error in Actor-Critic Methods"), in
its names: a deterministic ``actor`` with its ``actor_target``, critics ``q1``/``q2`` with their
``target_q1``/``target_q2``; the target action is the target actor's plus clipped Gaussian noise
(``policy_noise``, ``noise_clip``: target policy smoothing), the TD target takes the smaller of the two target
critics (clipped double Q), and the actor and every target network move only every ``policy_delay`` critic
updates (delayed policy updates). Collectors act with Gaussian ``exploration_noise``. Actions are scaled
to [-1, 1] inside the networks, as in SAC; the replay rows hold the env's action. Off-policy.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np
import torch
import torch.nn.functional as F
from easydict import EasyDict
from torch import nn

from ..envs.spaces import ActionSpec
from ..errors import ConfigError
from .base import Policy
from .defaults import td3_default_config
from .nets import cpu_state_dict, mlp, to_tensor
from .optim import Adam
from .sac import QNetwork


class DeterministicActor(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden_size_list):
        super().__init__()
        self.net = mlp(obs_dim, hidden_size_list, action_dim, "policy.model.actor_hidden_size_list")

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The action in [-1, 1]."""
        return torch.tanh(self.net(obs))


class TD3Policy(Policy):
    on_policy = False

    @classmethod
    def default_config(cls) -> EasyDict:
        return td3_default_config()

    def __init__(self, cfg: EasyDict, obs_dim: int, action: ActionSpec, seed: Optional[int] = None,
                 device: str = "cpu"):
        if not isinstance(action, ActionSpec) or action.kind != "box":
            raise ConfigError(f"policy.type='td3' needs a Box action space, got {action!r}")
        learn = cfg.learn
        policy_delay, policy_noise, noise_clip = learn.policy_delay, learn.policy_noise, learn.noise_clip
        if policy_delay < 1 or policy_noise < 0 or noise_clip < 0:
            raise ConfigError(f"policy.learn needs policy_delay >= 1, policy_noise >= 0 and noise_clip >= 0, got "
                              f"{policy_delay=} {policy_noise=} {noise_clip=}")
        exploration_noise = cfg.collect.exploration_noise
        if exploration_noise < 0:
            raise ConfigError(f"policy.collect.exploration_noise must be >= 0, got {exploration_noise=}")
        self.cfg = cfg
        self.spec = action
        self.device = device
        if seed is not None:
            torch.manual_seed(seed)
        self._noise_rng = np.random.default_rng(seed)
        dim, m = action.dim, cfg.model
        self.actor = DeterministicActor(obs_dim, dim, m.actor_hidden_size_list).to(device)
        self.actor_target = DeterministicActor(obs_dim, dim, m.actor_hidden_size_list).to(device)
        self.q1 = QNetwork(obs_dim, dim, m.critic_hidden_size_list).to(device)
        self.q2 = QNetwork(obs_dim, dim, m.critic_hidden_size_list).to(device)
        self.target_q1 = QNetwork(obs_dim, dim, m.critic_hidden_size_list).to(device)
        self.target_q2 = QNetwork(obs_dim, dim, m.critic_hidden_size_list).to(device)
        for target, online in self._target_pairs():
            target.load_state_dict(online.state_dict())
            target.requires_grad_(False)
        low, high = torch.as_tensor(action.low).flatten(), torch.as_tensor(action.high).flatten()
        self.action_scale = ((high - low) / 2.0).to(device)
        self.action_bias = ((high + low) / 2.0).to(device)
        self.actor_optimizer = Adam(self.actor.parameters(), lr=learn.learning_rate_actor)
        self.critic_optimizer = Adam(list(self.q1.parameters()) + list(self.q2.parameters()),
                                     lr=learn.learning_rate_critic)
        self.learn_steps = 0
        self._last_policy_loss = torch.zeros(())

    def _target_pairs(self):
        return ((self.actor_target, self.actor), (self.target_q1, self.q1), (self.target_q2, self.q2))

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        return to_tensor(obs, self.device).flatten(1)

    def _to_env(self, action: torch.Tensor, n: int) -> np.ndarray:
        env_action = action * self.action_scale + self.action_bias
        return env_action.cpu().numpy().astype(np.float32).reshape((n,) + self.spec.shape)

    # ---- acting ----------------------------------------------------------------
    @torch.no_grad()
    def forward_collect(self, obs: np.ndarray, eps: float = 0.0) -> np.ndarray:
        """The actor's action plus N(0, exploration_noise) in the [-1, 1] scale, clipped to the bounds
        (``eps`` unused)."""
        action = self.actor(self._obs(obs)).cpu().numpy()
        noise = self._noise_rng.normal(0.0, self.cfg.collect.exploration_noise, size=action.shape)
        action = torch.as_tensor(np.clip(action + noise, -1.0, 1.0), dtype=torch.float32, device=self.device)
        return self._to_env(action, len(obs))

    @torch.no_grad()
    def forward_eval(self, obs: np.ndarray) -> np.ndarray:
        return self._to_env(self.actor(self._obs(obs)), len(obs))

    # ---- learning --------------------------------------------------------------
    def forward_learn(self, batch: Dict[str, np.ndarray]) -> Dict:
        """One critic update; every ``policy_delay``-th call also an actor update and the Polyak targets."""
        learn = self.cfg.learn
        obs = self._obs(batch["obs"])
        next_obs = self._obs(batch["next_obs"])
        action = (to_tensor(batch["action"], self.device).reshape(len(obs), -1) - self.action_bias) / self.action_scale
        reward = to_tensor(batch["reward"], self.device)
        done = to_tensor(batch["done"], self.device)
        discount = to_tensor(batch["discount"], self.device)

        with torch.no_grad():  # target policy smoothing, clipped double Q
            noise = (torch.randn_like(action) * learn.policy_noise).clamp(-learn.noise_clip, learn.noise_clip)
            next_action = (self.actor_target(next_obs) + noise).clamp(-1.0, 1.0)
            target_q = torch.min(self.target_q1(next_obs, next_action), self.target_q2(next_obs, next_action))
            td_target = reward + discount * (1.0 - done) * target_q
        q1, q2 = self.q1(obs, action), self.q2(obs, action)
        if "weight" in batch:
            weight = to_tensor(batch["weight"], self.device)
            critic_loss = (weight * ((q1 - td_target).pow(2) + (q2 - td_target).pow(2))).mean()
        else:
            critic_loss = F.mse_loss(q1, td_target) + F.mse_loss(q2, td_target)
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()
        self.learn_steps += 1

        actor_updated = self.learn_steps % learn.policy_delay == 0
        if actor_updated:  # delayed policy update: the actor follows Q1, then every target moves
            policy_loss = -self.q1(obs, self.actor(obs)).mean()
            self.actor_optimizer.zero_grad(set_to_none=True)
            policy_loss.backward()
            self.actor_optimizer.step()
            with torch.no_grad():
                for target, online in self._target_pairs():
                    torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), learn.target_theta)
            self._last_policy_loss = policy_loss.detach()
        info = {
            "loss": critic_loss.detach(),
            "critic_loss": critic_loss.detach(),
            "policy_loss": self._last_policy_loss,
            "actor_updated": float(actor_updated),
            "q_value": q1.detach().mean(),
        }
        if "index" in batch:  # prioritized replay wants |td_error| per row
            info["priority"] = (0.5 * (q1 + q2) - td_target).detach().abs().cpu().numpy()
        return info

    # ---- state -----------------------------------------------------------------
    _NETWORKS = ("actor", "actor_target", "q1", "q2", "target_q1", "target_q2")
    _OPTIMIZERS = ("actor_optimizer", "critic_optimizer")

    def model_state_dict(self) -> Dict:
        return {"actor": cpu_state_dict(self.actor)}

    def load_model_state_dict(self, state: Dict) -> None:
        self.actor.load_state_dict(state["actor"])

    def state_dict(self) -> Dict:
        state = {name: cpu_state_dict(getattr(self, name)) for name in self._NETWORKS}
        state.update({name: getattr(self, name).state_dict() for name in self._OPTIMIZERS})
        state["learn_steps"] = self.learn_steps
        return state

    def load_state_dict(self, state: Dict) -> None:
        for name in self._NETWORKS + self._OPTIMIZERS:
            if name in state:
                getattr(self, name).load_state_dict(state[name])
        self.learn_steps = int(state.get("learn_steps", self.learn_steps))
