"""What the off-policy actor-critics for Box actions (SAC, TD3) share: twin Q critics with Polyak-averaged
targets, actions scaled to [-1, 1] inside the networks (the replay rows hold the env's action), the critic
loss (importance-weighted under prioritized replay), and state dicts built from the names of their
networks and optimizers. Each algorithm's module keeps its own update, in its paper's names."""

from __future__ import annotations

from typing import Callable, Dict, Iterable, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from easydict import EasyDict
from torch import nn

from ..envs.spaces import ActionSpec
from ..errors import ConfigError
from .base import Policy
from .nets import cpu_state_dict, mlp, to_tensor


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, hidden_size_list):
        super().__init__()
        self.net = mlp(obs_dim + action_dim, hidden_size_list, 1, "policy.model.critic_hidden_size_list")

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, action], dim=-1)).squeeze(-1)


class BoxActorCritic(Policy):
    # attribute names saved by state_dict (and the acting network collectors load: ``actor``)
    _NETWORKS: Tuple[str, ...] = ("actor", "q1", "q2", "target_q1", "target_q2")
    _OPTIMIZERS: Tuple[str, ...] = ()

    def _setup(
        self,
        cfg: EasyDict,
        obs_dim: int,
        action: ActionSpec,
        seed: Optional[int],
        device: str,
        actor: Callable[[int, int, list], nn.Module],
    ) -> None:
        """Checks the action space; sets ``cfg, spec, device``, the ``actor`` (built by the given class from
        obs_dim, action dim and ``model.actor_hidden_size_list``), then the twin critics and their targets."""
        if not isinstance(action, ActionSpec) or action.kind != "box":
            raise ConfigError(f"policy.type={cfg.type!r} needs a Box action space, got {action!r}")
        self.cfg, self.spec, self.device = cfg, action, device
        if seed is not None:
            torch.manual_seed(seed)
        dim, hidden = action.dim, cfg.model.critic_hidden_size_list
        self.actor = actor(obs_dim, dim, cfg.model.actor_hidden_size_list).to(device)
        self.q1, self.q2, self.target_q1, self.target_q2 = (QNetwork(obs_dim, dim, hidden).to(device) for _ in range(4))
        self.init_targets((self.target_q1, self.q1), (self.target_q2, self.q2))
        low, high = torch.as_tensor(action.low).flatten(), torch.as_tensor(action.high).flatten()
        self.action_scale = ((high - low) / 2.0).to(device)
        self.action_bias = ((high + low) / 2.0).to(device)
        self.learn_steps = 0

    @staticmethod
    def init_targets(*pairs: Tuple[nn.Module, nn.Module]) -> None:
        for target, online in pairs:
            target.load_state_dict(online.state_dict())
            target.requires_grad_(False)

    @staticmethod
    @torch.no_grad()
    def polyak(pairs: Iterable[Tuple[nn.Module, nn.Module]], theta: float) -> None:
        """``target <- target + theta * (online - target)`` for every pair."""
        for target, online in pairs:
            torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), theta)

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        return to_tensor(obs, self.device).flatten(1)

    def _to_env(self, action: torch.Tensor, n: int) -> np.ndarray:
        env_action = action * self.action_scale + self.action_bias
        return env_action.cpu().numpy().astype(np.float32).reshape((n,) + self.spec.shape)

    def unit_action(self, batch: Dict[str, np.ndarray], n: int) -> torch.Tensor:
        """A batch's env actions scaled to [-1, 1], as the networks see them."""
        return (to_tensor(batch["action"], self.device).reshape(n, -1) - self.action_bias) / self.action_scale

    def learn_inputs(self, batch: Dict[str, np.ndarray]) -> Dict[str, torch.Tensor]:
        """A replay batch as the tensors an update reads (its CUDA graph's inputs): observations, actions in
        [-1, 1], reward, done, discount, and the importance weights under prioritized replay."""
        inputs = {
            "obs": self._obs(batch["obs"]),
            "next_obs": self._obs(batch["next_obs"]),
            "action": self.unit_action(batch, len(batch["obs"])),
        }
        inputs.update(
            {k: to_tensor(batch[k], self.device) for k in ("reward", "done", "discount", "weight") if k in batch}
        )
        return inputs

    def critic_loss(self, q1: torch.Tensor, q2: torch.Tensor, td_target: torch.Tensor, batch) -> torch.Tensor:
        """Both critics' squared TD errors; importance-weighted when the batch has weights (prioritized replay)."""
        if "weight" in batch:
            weight = to_tensor(batch["weight"], self.device)
            return (weight * ((q1 - td_target).pow(2) + (q2 - td_target).pow(2))).mean()
        return F.mse_loss(q1, td_target) + F.mse_loss(q2, td_target)

    # ---- state -----------------------------------------------------------------
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
        self._graphed_update.reset()  # the optimizers' loaded moments are new tensors the graphs never saw
        self.learn_steps = int(state.get("learn_steps", self.learn_steps))
