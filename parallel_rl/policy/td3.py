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
from easydict import EasyDict
from torch import nn

from ..envs.spaces import ActionSpec
from ..errors import ConfigError
from .continuous import BoxActorCritic
from .defaults import td3_default_config
from .nets import mlp
from .graphs import GraphedUpdate
from .optim import Adam


class DeterministicActor(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden_size_list):
        super().__init__()
        self.net = mlp(obs_dim, hidden_size_list, action_dim, "policy.model.actor_hidden_size_list")

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The action in [-1, 1]."""
        return torch.tanh(self.net(obs))


class TD3Policy(BoxActorCritic):
    _NETWORKS = ("actor", "actor_target", "q1", "q2", "target_q1", "target_q2")
    _OPTIMIZERS = ("actor_optimizer", "critic_optimizer")

    @classmethod
    def default_config(cls) -> EasyDict:
        return td3_default_config()

    def __init__(
        self, cfg: EasyDict, obs_dim: int, action: ActionSpec, seed: Optional[int] = None, device: str = "cpu"
    ):
        learn = cfg.learn
        policy_delay, policy_noise, noise_clip = learn.policy_delay, learn.policy_noise, learn.noise_clip
        if policy_delay < 1 or policy_noise < 0 or noise_clip < 0:
            raise ConfigError(
                f"policy.learn needs policy_delay >= 1, policy_noise >= 0 and noise_clip >= 0, got "
                f"{policy_delay=} {policy_noise=} {noise_clip=}"
            )
        exploration_noise = cfg.collect.exploration_noise
        if exploration_noise < 0:
            raise ConfigError(f"policy.collect.exploration_noise must be >= 0, got {exploration_noise=}")
        self._setup(cfg, obs_dim, action, seed, device, DeterministicActor)
        self._noise_rng = np.random.default_rng(seed)
        self.actor_target = DeterministicActor(obs_dim, action.dim, cfg.model.actor_hidden_size_list).to(device)
        self.init_targets((self.actor_target, self.actor))
        self.actor_optimizer = Adam(self.actor.parameters(), lr=learn.learning_rate_actor)
        self.critic_optimizer = Adam(
            list(self.q1.parameters()) + list(self.q2.parameters()), lr=learn.learning_rate_critic
        )
        self._last_policy_loss = torch.zeros(())
        self._graphed_update = GraphedUpdate(self._update, device, learn.cuda_graph)

    def _target_pairs(self):
        return ((self.actor_target, self.actor), (self.target_q1, self.q1), (self.target_q2, self.q2))

    # ---- acting ----------------------------------------------------------------
    @torch.no_grad()
    def forward_collect(self, obs: np.ndarray, eps: float = 0.0) -> np.ndarray:
        """The actor's action plus N(0, exploration_noise) in the [-1, 1] scale, clipped to the bounds
        (``eps`` unused)."""
        action = self.actor(self._obs(obs))
        noise = self._noise_rng.normal(0.0, self.cfg.collect.exploration_noise, size=tuple(action.shape))
        action = (action + torch.as_tensor(noise, dtype=action.dtype, device=self.device)).clamp(-1.0, 1.0)
        return self._to_env(action, len(obs))

    @torch.no_grad()
    def forward_eval(self, obs: np.ndarray) -> np.ndarray:
        return self._to_env(self.actor(self._obs(obs)), len(obs))

    # ---- learning --------------------------------------------------------------
    def forward_learn(self, batch: Dict[str, np.ndarray]) -> Dict:
        """One critic update; every ``policy_delay``-th call also an actor update and the Polyak targets."""
        inputs = self.learn_inputs(batch)
        self.learn_steps += 1
        actor_updated = self.learn_steps % self.cfg.learn.policy_delay == 0
        # the delayed actor step is a branch of the update: each branch is a graph of its own on CUDA
        out = self._graphed_update(inputs, key=actor_updated)
        if actor_updated:
            self._last_policy_loss = out["policy_loss"]
        info = {
            "loss": out["critic_loss"],
            "critic_loss": out["critic_loss"],
            "policy_loss": self._last_policy_loss,
            "actor_updated": float(actor_updated),
            "q_value": out["q_value"],
        }
        if "index" in batch:  # prioritized replay wants |td_error| per row
            info["priority"] = out["td_error"].abs().cpu().numpy()
        return info

    def _update(self, t: Dict[str, torch.Tensor], actor_updated: bool) -> Dict[str, torch.Tensor]:
        """The update on tensors only, no host copy: what :class:`GraphedUpdate` records on CUDA."""
        learn = self.cfg.learn
        obs, next_obs, action = t["obs"], t["next_obs"], t["action"]
        with torch.no_grad():  # target policy smoothing, clipped double Q
            noise = (torch.randn_like(action) * learn.policy_noise).clamp(-learn.noise_clip, learn.noise_clip)
            next_action = (self.actor_target(next_obs) + noise).clamp(-1.0, 1.0)
            target_q = torch.min(self.target_q1(next_obs, next_action), self.target_q2(next_obs, next_action))
            td_target = t["reward"] + t["discount"] * (1.0 - t["done"]) * target_q
        q1, q2 = self.q1(obs, action), self.q2(obs, action)
        critic_loss = self.critic_loss(q1, q2, td_target, t)
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()
        out = {
            "critic_loss": critic_loss.detach(),
            "q_value": q1.detach().mean(),
            "td_error": (0.5 * (q1 + q2) - td_target).detach(),
        }
        if actor_updated:  # delayed policy update: the actor follows Q1, then every target moves
            policy_loss = -self.q1(obs, self.actor(obs)).mean()
            self.actor_optimizer.zero_grad(set_to_none=True)
            policy_loss.backward()
            self.actor_optimizer.step()
            self.polyak(self._target_pairs(), learn.target_theta)
            out["policy_loss"] = policy_loss.detach()
        return out
