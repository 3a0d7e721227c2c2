"""Small building blocks shared by the policies: encoders (MLP, or a conv stack over board/image observations)
with an MLP on top, state dicts on the CPU.

``policy.model.encoder`` picks what reads the observation before the hidden layers
(``hidden_size_list``): ``type="mlp"`` (the flattened observation goes straight
to them) or ``type="conv"``: ``shape`` is the observation's shape with channels
last, (H, W, C) as PettingZoo's boards (Connect Four: ``[6, 7, 2]``) and
images come; ``channels`` are the conv layers' output channels, each with a
``kernel_size`` x ``kernel_size`` kernel (odd: the board keeps its size) and
the policy's activation. Observations travel flat; the conv stack reshapes them.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError

ENCODER_TYPES = ("mlp", "conv")


class ChannelsLastConv(nn.Module):
    """Conv layers over flat observations of shape (H, W, C); returns their output flattened."""

    def __init__(self, shape: Sequence[int], channels: Sequence[int], kernel_size: int, activation=nn.ReLU):
        super().__init__()
        self.shape = tuple(int(s) for s in shape)
        layers, last = [], self.shape[-1]
        for size in channels:
            layers += [nn.Conv2d(last, int(size), kernel_size, padding=kernel_size // 2), activation()]
            last = int(size)
        self.net = nn.Sequential(*layers)
        self.out_dim = last * self.shape[0] * self.shape[1]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.reshape(-1, *self.shape).permute(0, 3, 1, 2)  # (N, C, H, W)
        return self.net(x).flatten(1)


def encoder_layers(in_dim: int, encoder: Optional[Dict[str, Any]], activation=nn.ReLU) -> Tuple[List[nn.Module], int]:
    """The layers that read a flat observation of ``in_dim`` values (none for ``mlp``) and their output size."""
    encoder = encoder or {"type": "mlp"}
    kind = encoder.get("type", "mlp")
    if kind not in ENCODER_TYPES:
        raise ConfigError(f"policy.model.encoder.type must be one of {ENCODER_TYPES}, got {kind!r}")
    if kind == "mlp":
        return [], in_dim
    shape, channels = list(encoder.get("shape") or []), list(encoder.get("channels") or [])
    kernel_size = int(encoder.get("kernel_size", 3))
    if len(shape) != 3 or int(np.prod(shape)) != in_dim:
        raise ConfigError(f"policy.model.encoder.shape must be the observation's (H, W, C) shape holding its "
                          f"{in_dim} values, got {shape=}")
    if not channels or min(int(c) for c in channels) <= 0:
        raise ConfigError(f"policy.model.encoder.channels must list > 0 output channels per conv layer, got {channels=}")
    if kernel_size <= 0 or kernel_size % 2 == 0:
        raise ConfigError(f"policy.model.encoder.kernel_size must be odd and > 0 (the board keeps its size), "
                          f"got {kernel_size=}")
    conv = ChannelsLastConv(shape, channels, kernel_size, activation)
    return [conv], conv.out_dim


def body(in_dim: int, hidden_size_list: Sequence[int], key: str, activation=nn.ReLU,
         encoder: Optional[Dict[str, Any]] = None) -> Tuple[List[nn.Module], int]:
    """The encoder's layers, then ``hidden...`` with ``activation`` after each; and the last layer's size."""
    if not hidden_size_list:
        raise ConfigError(f"{key} must not be empty, got {hidden_size_list!r}")
    layers, last = encoder_layers(in_dim, encoder, activation)
    for size in hidden_size_list:
        layers += [nn.Linear(last, int(size)), activation()]
        last = int(size)
    return layers, last


def mlp(in_dim: int, hidden_size_list: Sequence[int], out_dim: int, key: str, activation=nn.ReLU,
        encoder: Optional[Dict[str, Any]] = None) -> nn.Sequential:
    """``in_dim -> [encoder] -> hidden... -> out_dim`` with ``activation`` between layers (none after the last)."""
    layers, last = body(in_dim, hidden_size_list, key, activation, encoder)
    layers.append(nn.Linear(last, out_dim))
    return nn.Sequential(*layers)


def cpu_state_dict(module: nn.Module) -> Dict[str, torch.Tensor]:
    """A module's state dict with CPU tensors (what goes to the shared disk, whatever the device)."""
    return {k: v.detach().to("cpu", copy=True) if v.device.type != "cpu" else v for k, v in module.state_dict().items()}


def to_tensor(array, device: str, dtype=torch.float32) -> torch.Tensor:
    """A numpy column as a tensor on ``device`` (no copy on the CPU)."""
    t = torch.as_tensor(array)
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    return t.to(device, non_blocking=True) if device != "cpu" else t


class RunningMeanStd(nn.Module):
    """Running mean and variance of a stream of arrays (what gymnasium's NormalizeObservation and
    NormalizeReward keep), as buffers: they are part of the model's state dict, so they travel with every
    policy checkpoint to collectors and evaluators and are resumed with the learner's state.

    ``update`` merges a batch with the parallel-variance formula (Chan et al.), so statistics gathered
    anywhere combine exactly; ``normalize`` is ``clip((x - mean) / sqrt(var + eps), -clip, clip)``."""

    def __init__(self, shape: Tuple[int, ...] = (), epsilon: float = 1e-8):
        super().__init__()
        self.epsilon = float(epsilon)
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(0.0, dtype=torch.float64))

    @torch.no_grad()
    def update(self, batch: np.ndarray) -> None:
        x = torch.as_tensor(np.asarray(batch, dtype=np.float64)).reshape(-1, *self.mean.shape)
        if len(x) == 0:
            return
        batch_mean, batch_var, n = x.mean(0), x.var(0, unbiased=False), float(len(x))
        delta, total = batch_mean - self.mean, self.count + n
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.fill_(total)

    def normalize(self, x: torch.Tensor, clip: float) -> torch.Tensor:
        scale = (self.var + self.epsilon).sqrt().to(x.dtype)
        return ((x - self.mean.to(x.dtype)) / scale).clamp(-clip, clip)
