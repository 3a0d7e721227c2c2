"""Generalized state-dependent exploration (gSDE; Raffin et al. 2021) for PPO's Box actions.

A collected action is the actor's mean plus noise that is a linear function of the actor's last hidden
features ``z``: ``noise = z @ E``, with a matrix ``E ~ N(0, sigma^2)`` for each env lane, drawn again every
``policy.model.sde_sample_freq`` collect steps. Within those steps the same state gives the same noise, so
exploration is smooth rather than white (what lets PPO solve Pendulum with its velocity hidden, RL Zoo's
``use_sde``). The features enter detached (SB3's ``learn_features=False``): the noise teaches ``sigma``, not the
features. Given ``z``, the action is Gaussian around the mean with variance ``(z^2) @ sigma^2`` per action
dimension: the distribution ``logp``, the ratio and the entropy use. ``sigma = exp(log_std)`` is a learned
(features x actions) matrix, scaled, as the plain Gaussian's std is, by half the action range.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn
from torch.distributions import Normal

# added to the variance (SB3's epsilon): a lane whose features are all 0 still has a proper distribution
VARIANCE_FLOOR = 1e-6


class StateDependentNoise(nn.Module):
    """The learned ``log_std`` matrix and the lanes' exploration matrices (drawn, never saved)."""

    def __init__(self, latent_dim: int, action_dim: int, init_log_std: float, sample_freq: int):
        super().__init__()
        self.log_std = nn.Parameter(torch.full((latent_dim, action_dim), float(init_log_std)))
        self.sample_freq = int(sample_freq)  # <= 0: drawn once, and again only when the number of lanes changes
        self._matrices: Optional[torch.Tensor] = None  # (lanes, latent_dim, action_dim)
        self._steps = 0

    def dist(self, mean: torch.Tensor, latent: torch.Tensor, scale: torch.Tensor) -> "StateDependentNormal":
        z = latent.detach()
        std = torch.sqrt(z.pow(2) @ self.log_std.exp().pow(2) + VARIANCE_FLOOR) * scale
        return StateDependentNormal(mean, std, self, z, scale)

    def noise(self, z: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """This collect step's noise for lanes with features ``z`` (new matrices every ``sample_freq`` steps)."""
        lanes = len(z)
        stale = self.sample_freq > 0 and self._steps % self.sample_freq == 0
        if self._matrices is None or len(self._matrices) != lanes or stale:
            sigma = self.log_std.detach().exp()
            self._matrices = torch.randn((lanes,) + tuple(sigma.shape), device=sigma.device) * sigma
        self._steps += 1
        return torch.bmm(z.unsqueeze(1), self._matrices).squeeze(1) * scale


class StateDependentNormal(Normal):
    """The Gaussian given the features; :meth:`sample` draws the lanes' state-dependent noise, not white noise."""

    def __init__(
        self, mean: torch.Tensor, std: torch.Tensor, sde: StateDependentNoise, z: torch.Tensor, scale: torch.Tensor
    ):
        super().__init__(mean, std, validate_args=False)
        self._sde, self._z, self._scale = sde, z, scale

    def sample(self, sample_shape=torch.Size()) -> torch.Tensor:
        return self.mean + self._sde.noise(self._z, self._scale)
