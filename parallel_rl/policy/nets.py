"""Small building blocks shared by the policies: MLPs over flattened observations, state dicts on the CPU."""
from __future__ import annotations

from typing import Dict, Sequence

import torch
from torch import nn

from ..errors import ConfigError


def mlp(in_dim: int, hidden_size_list: Sequence[int], out_dim: int, key: str, activation=nn.ReLU) -> nn.Sequential:
    """``in_dim -> hidden... -> out_dim`` with ``activation`` between layers (none after the last)."""
    if not hidden_size_list:
        raise ConfigError(f"{key} must not be empty, got {hidden_size_list!r}")
    layers, last = [], in_dim
    for size in hidden_size_list:
        layers += [nn.Linear(last, int(size)), activation()]
        last = int(size)
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
