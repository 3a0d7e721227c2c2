"""Small building blocks shared by the policies: encoders (MLP, or conv stacks over board/image observations)
with an MLP on top, state dicts on the CPU.

``policy.model.encoder`` picks what reads the observation before the hidden layers
(``hidden_size_list``); every encoder is built here, by :func:`encoder_layers`:

- ``type="mlp"`` (default): the flattened observation goes straight to the hidden layers.
- ``type="conv"``: ``channels`` conv layers, each ``kernel_size`` x ``kernel_size`` (odd, padded: the board
  keeps its size), stride 1, with the policy's activation (PettingZoo boards: Connect Four ``[6, 7, 2]``).
- ``type="minatar"``: MinAtar's network (Young & Tian 2019): one 16-filter 3x3 conv, stride 1, no padding,
  ReLU, then a ReLU layer of ``fc`` (128) units.
- ``type="nature"``: the Nature CNN (Mnih et al. 2015): 32 8x8 stride 4, 64 4x4 stride 2, 64 3x3 stride 1
  (ReLU, no padding), then a ReLU layer of ``fc`` (512) units (84x84 frames: 3136 conv features).

``shape`` is the observation's shape (3 axes, what the env gives: ``[10, 10, 4]`` for MinAtar Breakout,
``[4, 84, 84]`` for ALE's frame stacks). ``layout`` says where its channels are: ``"hwc"`` (channels last),
``"chw"`` (channels first) or ``"auto"`` (the default: channels first when the first axis is shorter than the
last, e.g. 4x84x84, else last, e.g. 10x10x4); ``conv`` reads (H, W, C) only, as it always has. Observations travel flat, in their own dtype; the encoder reshapes them to (N, C, H, W), the one
place where the layout is handled. uint8 is scaled by 1/255 and bool read as 0/1 before any layer
(:func:`obs_float`, at the front of every model's forward). With ``minatar`` and ``nature`` the hidden layers
may be empty (``hidden_size_list=[]``): the head sits on the encoder's ``fc`` layer, as published.

``policy.model.recurrent`` (null: none) puts a recurrent core between the encoder and the hidden layers:
``dict(type="lstm" | "gru", hidden_size=H)`` (:class:`RecurrentCore`). Its state is a dict of float32 arrays,
one row per env lane: ``hidden_h`` (and ``hidden_c`` for an LSTM), each (lanes, H), zeros at an episode's start
(:meth:`RecurrentCore.initial_state`); the collectors and evaluators carry it (``policy/memory.py``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from ..errors import ConfigError
from .defaults import ENCODER_TYPES, LAYOUTS

RECURRENT_TYPES = ("lstm", "gru")
# the published conv stacks: (out channels, kernel, stride) per layer, no padding; and their fc width
PUBLISHED_CONVS = {
    "minatar": ([(16, 3, 1)], 128),
    "nature": ([(32, 8, 4), (64, 4, 2), (64, 3, 1)], 512),
}


def channels_first(shape: Sequence[int], layout: str) -> bool:
    """Whether observations of ``shape`` (3 axes) hold their channels on the first axis (``layout``: hwc | chw |
    auto: first when the first axis is shorter than the last, 4x84x84, else last, 10x10x4)."""
    if layout not in LAYOUTS:
        raise ConfigError(f"policy.model.encoder.layout must be one of {LAYOUTS}, got {layout!r}")
    return layout == "chw" or (layout == "auto" and shape[0] < shape[-1])


class ConvEncoder(nn.Module):
    """Conv layers over flat observations of ``shape`` (channels first or last), then an optional ReLU ``fc``
    layer; returns the features flattened. ``layers``: (out channels, kernel, stride, padding) per conv."""

    def __init__(
        self,
        shape: Sequence[int],
        layers: Sequence[Tuple[int, int, int, int]],
        layout: str = "hwc",
        activation=nn.ReLU,
        fc: int = 0,
    ):
        super().__init__()
        self.shape = tuple(int(s) for s in shape)
        self.channels_first = channels_first(self.shape, layout)
        chw = self.shape if self.channels_first else (self.shape[2], self.shape[0], self.shape[1])
        convs, last = [], chw[0]
        for out, kernel, stride, padding in layers:
            convs += [nn.Conv2d(last, int(out), int(kernel), int(stride), int(padding)), activation()]
            last = int(out)
        self.net = nn.Sequential(*convs)
        with torch.no_grad():
            conv_dim = int(self.net(torch.zeros(1, *chw)).numel())
        self.fc = nn.Sequential(nn.Linear(conv_dim, int(fc)), nn.ReLU()) if fc else None
        self.out_dim = int(fc) if fc else conv_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.reshape(-1, *self.shape)
        if not self.channels_first:
            x = x.permute(0, 3, 1, 2)  # (N, H, W, C) -> (N, C, H, W)
        x = self.net(x).flatten(1)
        return x if self.fc is None else self.fc(x)


class ChannelsLastConv(ConvEncoder):
    """The ``conv`` encoder: ``channels`` same-size conv layers (stride 1, padded) over (H, W, C) boards."""

    def __init__(self, shape: Sequence[int], channels: Sequence[int], kernel_size: int, activation=nn.ReLU):
        super().__init__(shape, [(int(c), kernel_size, 1, kernel_size // 2) for c in channels], "hwc", activation)


def _encoder_shape(encoder: Dict[str, Any], in_dim: int) -> List[int]:
    shape = list(encoder.get("shape") or [])
    if len(shape) != 3 or int(np.prod(shape)) != in_dim:
        raise ConfigError(
            f"policy.model.encoder.shape must be the observation's 3-axis shape (H, W, C) or "
            f"(C, H, W) holding its {in_dim} values, got {shape=}"
        )
    return shape


def encoder_layers(in_dim: int, encoder: Optional[Dict[str, Any]], activation=nn.ReLU) -> Tuple[List[nn.Module], int]:
    """The layers that read a flat observation of ``in_dim`` values (none for ``mlp``) and their output size."""
    encoder = encoder or {"type": "mlp"}
    kind = encoder.get("type", "mlp")
    if kind not in ENCODER_TYPES:
        raise ConfigError(f"policy.model.encoder.type must be one of {ENCODER_TYPES}, got {kind!r}")
    if kind == "mlp":
        return [], in_dim
    shape = _encoder_shape(encoder, in_dim)
    if kind in PUBLISHED_CONVS:
        convs, fc = PUBLISHED_CONVS[kind]
        conv = ConvEncoder(
            shape,
            [(c, k, s, 0) for c, k, s in convs],
            encoder.get("layout", "auto"),
            nn.ReLU,
            fc if encoder.get("fc") is None else int(encoder["fc"]),
        )
        return [conv], conv.out_dim
    channels = list(encoder.get("channels") or [])
    kernel_size = int(encoder.get("kernel_size", 3))
    if not channels or min(int(c) for c in channels) <= 0:
        raise ConfigError(
            f"policy.model.encoder.channels must list > 0 output channels per conv layer, got {channels=}"
        )
    if kernel_size <= 0 or kernel_size % 2 == 0:
        raise ConfigError(
            f"policy.model.encoder.kernel_size must be odd and > 0 (the board keeps its size), got {kernel_size=}"
        )
    conv = ChannelsLastConv(shape, channels, kernel_size, activation)
    return [conv], conv.out_dim


def body(
    in_dim: int, hidden_size_list: Sequence[int], key: str, activation=nn.ReLU, encoder: Optional[Dict[str, Any]] = None
) -> Tuple[List[nn.Module], int]:
    """The encoder's layers, then ``hidden...`` with ``activation`` after each; and the last layer's size."""
    if not hidden_size_list and (encoder or {}).get("type") not in PUBLISHED_CONVS:
        raise ConfigError(
            f"{key} must not be empty (only the minatar and nature encoders end in a layer of their "
            f"own), got {hidden_size_list!r}"
        )
    layers, last = encoder_layers(in_dim, encoder, activation)
    for size in hidden_size_list or []:
        layers += [nn.Linear(last, int(size)), activation()]
        last = int(size)
    return layers, last


def mlp(
    in_dim: int,
    hidden_size_list: Sequence[int],
    out_dim: int,
    key: str,
    activation=nn.ReLU,
    encoder: Optional[Dict[str, Any]] = None,
) -> nn.Sequential:
    """``in_dim -> [encoder] -> hidden... -> out_dim`` with ``activation`` between layers (none after the last)."""
    layers, last = body(in_dim, hidden_size_list, key, activation, encoder)
    layers.append(nn.Linear(last, out_dim))
    return nn.Sequential(*layers)


State = Tuple[torch.Tensor, ...]  # a recurrent core's state as tensors: (h, c) for an LSTM, (h,) for a GRU


class RecurrentCore(nn.Module):
    """The encoder's layers, then one LSTM or GRU layer: what reads observations in a recurrent model.

    Time-major: :meth:`unroll` takes (T, B, D) observations, each sequence's starting state and where episodes
    begin inside the sequences (the state is zeroed before such a step); :meth:`step` is one step of B lanes.
    ``copies`` > 1 runs that many LSTMs side by side over the encoder's output (an actor's and a critic's, as
    sb3-contrib's RecurrentPPO does by default): features and state are theirs concatenated, ``copies * H``
    wide, copy i's in ``[i * H, (i + 1) * H)``."""

    def __init__(
        self,
        in_dim: int,
        encoder: Optional[Dict[str, Any]],
        recurrent: Dict[str, Any],
        activation=nn.ReLU,
        copies: int = 1,
    ):
        super().__init__()
        kind, hidden = recurrent.get("type", "lstm"), int(recurrent.get("hidden_size", 0) or 0)
        if kind not in RECURRENT_TYPES or hidden <= 0:
            raise ConfigError(
                f"policy.model.recurrent must be dict(type=one of {RECURRENT_TYPES}, hidden_size > 0) "
                f"or null, got {dict(recurrent)!r}"
            )
        layers, last = encoder_layers(in_dim, encoder, activation)
        self.encoder = nn.Sequential(*layers)
        self.rnns = nn.ModuleList((nn.LSTM if kind == "lstm" else nn.GRU)(last, hidden) for _ in range(copies))
        self.state_keys = ("hidden_h", "hidden_c") if kind == "lstm" else ("hidden_h",)
        self.hidden_size = hidden
        self.out_dim = hidden * copies

    def initial_state(self, n: int) -> Dict[str, np.ndarray]:
        """The state of ``n`` lanes at their episodes' start: zeros."""
        return {k: np.zeros((n, self.out_dim), dtype=np.float32) for k in self.state_keys}  # copies * H wide

    def state_tensors(self, state: Dict[str, np.ndarray], device) -> State:
        return tuple(torch.as_tensor(state[k], dtype=torch.float32, device=device) for k in self.state_keys)

    def state_arrays(self, state: State) -> Dict[str, np.ndarray]:
        return {k: s.detach().cpu().numpy() for k, s in zip(self.state_keys, state)}

    def _rnn(self, x: torch.Tensor, state: State) -> Tuple[torch.Tensor, State]:
        """``x`` (T, B, F) from ``state`` (each (B, copies * H)) with nothing reset."""
        outs, news = [], []
        for i, rnn in enumerate(self.rnns):
            own = tuple(s[:, i * self.hidden_size : (i + 1) * self.hidden_size].unsqueeze(0) for s in state)
            out, new = rnn(x, own if len(own) > 1 else own[0])
            outs.append(out)
            news.append(new if isinstance(new, tuple) else (new,))
        if len(self.rnns) == 1:
            return outs[0], tuple(s.squeeze(0) for s in news[0])
        return torch.cat(outs, -1), tuple(torch.cat([n[k] for n in news], -1).squeeze(0) for k in range(len(state)))

    def step(self, obs: torch.Tensor, state: State) -> Tuple[torch.Tensor, State]:
        """One step of B lanes: (B, D) observations (any dtype: :func:`obs_float`) -> (B, H) features and the next
        state."""
        out, new = self._rnn(self.encoder(obs_float(obs)).unsqueeze(0), state)
        return out.squeeze(0), new

    def unroll(self, obs: torch.Tensor, state: State, starts: torch.Tensor) -> Tuple[torch.Tensor, State]:
        """(T, B, D) observations -> (T, B, H) features and the final state, from ``state`` (each (B, H)); where
        ``starts[t, b]`` an episode begins, the state is zeroed before step t. The steps between two such rows
        run as one call of the LSTM (cuDNN's kernel on a GPU), split only where some sequence restarts."""
        T, B = obs.shape[:2]
        x = self.encoder(obs_float(obs.reshape(T * B, *obs.shape[2:]))).reshape(T, B, -1)
        cuts = [0] + (torch.nonzero(starts[1:].any(1)).flatten() + 1).tolist() + [T]
        outs = []
        for begin, stop in zip(cuts[:-1], cuts[1:]):
            keep = (~starts[begin]).unsqueeze(-1).to(x.dtype)
            out, state = self._rnn(x[begin:stop], tuple(s * keep for s in state))
            outs.append(out)
        return torch.cat(outs) if len(outs) > 1 else outs[0], state


def recurrent_core(
    in_dim: int,
    encoder: Optional[Dict[str, Any]],
    recurrent: Optional[Dict[str, Any]],
    activation=nn.ReLU,
    copies: int = 1,
) -> Optional[RecurrentCore]:
    """The core ``policy.model.recurrent`` asks for over the encoder ``encoder``; None without one."""
    return RecurrentCore(in_dim, encoder, recurrent, activation, copies) if recurrent else None


def cpu_state_dict(module: nn.Module) -> Dict[str, torch.Tensor]:
    """A module's state dict with CPU tensors (what goes to the shared disk, whatever the device)."""
    return {k: v.detach().to("cpu", copy=True) if v.device.type != "cpu" else v for k, v in module.state_dict().items()}


def obs_float(obs: torch.Tensor) -> torch.Tensor:
    """Observations as the networks read them, converted where they already are (the learner's device): uint8
    frames scaled by 1/255, bool boards as 0/1, float as it is. Rows and chunks keep uint8/bool (1 byte a value);
    every model's forward starts here, so a batch is converted once per forward, on the device."""
    if obs.dtype == torch.uint8:
        return obs.float().mul_(1.0 / 255.0)
    return obs if obs.is_floating_point() else obs.float()


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
