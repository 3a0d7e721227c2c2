"""The acting part of a policy as one ``nn.Module``: a batch of observations in, greedy actions out.

Observations come in the env's dtype (float32, or uint8 frames and bool boards, which the networks convert as
in training: :func:`parallel_rl.policy.nets.obs_float`).

It holds the policy's own networks (not copies) and does what its ``forward_eval`` does without an action
mask: flatten, normalise with the checkpoint's running statistics (PPO's ``model.obs_norm``), the network,
then argmax (Discrete) or the squashed mean scaled to the action bounds (Box). ``export`` traces it to
TorchScript or ONNX, :class:`Agent` runs it; tests hold it equal to ``forward_eval``.

A policy with memory (``policy.model.recurrent``) acts with its recurrent state: its module takes
``(obs, hidden_h[, hidden_c])`` (each state (N, H) float32, zeros at an episode's start) and returns
``(action, next hidden_h[, next hidden_c])``; ``state_sizes`` names the state's parts and their widths.
:class:`Agent` carries that state between ``act`` calls (``reset()`` starts new episodes).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
import torch
from torch import nn

from ..policy.nets import obs_float


class _Acting(nn.Module):
    """``forward(obs) = decide(inputs(obs))``: ``inputs`` is what the network reads (flat, converted, normalised),
    ``decide`` the network and the greedy choice; a recurrent core goes between them (:class:`RecurrentActing`).
    Box actions: ``tanh``-squashed outputs in [-1, 1] (PPO with ``model.squash_mean=False``: linear, clipped), scaled
    to the space's bounds."""

    def __init__(self, spec=None, scale=None, bias=None):
        super().__init__()
        self.discrete = spec is None or spec.kind == "discrete"
        if not self.discrete:
            self.register_buffer("action_scale", torch.as_tensor(scale, dtype=torch.float32).flatten().clone())
            self.register_buffer("action_bias", torch.as_tensor(bias, dtype=torch.float32).flatten().clone())

    def to_env(self, unit: torch.Tensor) -> torch.Tensor:
        return unit * self.action_scale + self.action_bias

    def inputs(self, obs: torch.Tensor) -> torch.Tensor:
        return obs_float(obs.flatten(1))

    def decide(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.decide(self.inputs(obs))


class RecurrentActing(nn.Module):
    """A policy with memory: ``(obs, *state) -> (action, *next state)``, one step of its ``core`` from the state
    fed in between ``acting``'s inputs and its decision (which reads the first ``split`` features; 0: all)."""

    def __init__(self, acting: _Acting, core: nn.Module, split: int = 0):
        super().__init__()
        self.acting, self.core, self.split = acting, core, int(split or 0)
        self.state_sizes = {k: core.out_dim for k in core.state_keys}

    def forward(self, obs: torch.Tensor, *state: torch.Tensor):
        features, after = self.core.step(self.acting.inputs(obs), state)
        return (self.acting.decide(features[..., : self.split] if self.split else features), *after)


class DQNActing(_Acting):
    def __init__(self, policy):
        super().__init__()
        self.q_network = policy.model

    def decide(self, x: torch.Tensor) -> torch.Tensor:
        return self.q_network(x).argmax(-1)


class R2D2Acting(DQNActing):
    """R2D2's Q-head over its core's features (greedy, as its eval mode)."""

    def decide(self, features: torch.Tensor) -> torch.Tensor:
        return self.q_network.q(features).argmax(-1)


def r2d2_acting(policy) -> nn.Module:
    return RecurrentActing(R2D2Acting(policy), policy.model.core)


class PPOActing(_Acting):
    def __init__(self, policy):
        model = policy.model
        super().__init__(policy.spec, getattr(model, "action_scale", None), getattr(model, "action_bias", None))
        self.actor = model.actor
        self.squash = getattr(model, "squash_mean", True)
        self.obs_rms = model.obs_rms
        self.obs_clip = float(policy.cfg.model.get("obs_clip", 10.0))

    def inputs(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.flatten(1)
        if self.obs_rms is not None:  # statistics of the raw values, as the policy keeps them
            x = self.obs_rms.normalize(x.float(), self.obs_clip)
        return obs_float(x)  # as ActorCritic's forward: uint8 scaled, bool as 0/1

    def decide(self, x: torch.Tensor) -> torch.Tensor:
        out = self.actor(x)
        if self.discrete:
            return out.argmax(-1)
        # the mean in the bounds: tanh-squashed, or linear and clipped (as PPOPolicy.forward_eval)
        return self.to_env(torch.tanh(out) if self.squash else out.clamp(-1.0, 1.0))


def ppo_acting(policy) -> nn.Module:
    model = policy.model
    return PPOActing(policy) if model.core is None else RecurrentActing(PPOActing(policy), model.core, model.split)


class SACActing(_Acting):
    def __init__(self, policy):
        super().__init__(policy.spec, policy.action_scale.cpu(), policy.action_bias.cpu())
        self.actor_net = policy.actor.net

    def decide(self, x: torch.Tensor) -> torch.Tensor:
        mean, _log_std = self.actor_net(x).chunk(2, dim=-1)
        return self.to_env(torch.tanh(mean))


class TD3Acting(_Acting):
    def __init__(self, policy):
        super().__init__(policy.spec, policy.action_scale.cpu(), policy.action_bias.cpu())
        self.actor = policy.actor

    def decide(self, x: torch.Tensor) -> torch.Tensor:
        return self.to_env(self.actor(x))


# IMPALA and APPO act with PPO's actor-critic
ACTING: Dict[str, Callable[[Any], nn.Module]] = {
    "dqn": DQNActing,
    "r2d2": r2d2_acting,
    "ppo": ppo_acting,
    "sac": SACActing,
    "td3": TD3Acting,
    "impala": ppo_acting,
    "appo": ppo_acting,
}


def acting_module(policy) -> nn.Module:
    """The acting module of a built policy (on the CPU, eval mode)."""
    from ..errors import ConfigError

    kind = policy.cfg.get("type", "dqn")
    if kind not in ACTING:
        raise ConfigError(
            f"policy.type={kind!r} has no acting module to export or load (known: {', '.join(sorted(ACTING))})"
        )
    return ACTING[kind](policy).cpu().eval()


class Agent:
    """A trained policy that acts: ``act(obs)`` takes one observation (returns one action) or a batch.

    Runs any callable from a batch of the env's observations (``obs_dtype``: float32, or uint8 frames and bool
    boards as the env gives them) to actions: the acting module, a TorchScript file or an ONNX Runtime session
    (:func:`parallel_rl.load_policy` picks). A policy with memory (``state_sizes``: its state's parts and
    widths) is called ``forward(obs, *state) -> (actions, *state)``: the agent keeps the state from one ``act``
    to the next (each row of a batch is one episode's lane); :meth:`reset` starts new episodes (call it whenever
    an episode ends; a batch of another size starts over too)."""

    def __init__(
        self,
        forward: Callable[..., Any],
        obs_shape: Tuple[int, ...],
        action_kind: str,
        source: str = "",
        obs_dtype: str = "float32",
        state_sizes: Optional[Dict[str, int]] = None,
    ):
        self._forward = forward
        self.obs_shape = tuple(int(s) for s in obs_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        self.action_kind = action_kind
        self.source = source
        self.state_sizes = dict(state_sizes or {})
        self.state: Optional[Tuple[np.ndarray, ...]] = None

    def reset(self) -> None:
        """Forget the recurrent state: the next ``act`` starts new episodes (no-op without memory)."""
        self.state = None

    def act(self, obs) -> np.ndarray:
        obs = np.asarray(obs, dtype=self.obs_dtype)
        single = obs.shape == self.obs_shape
        if not single and obs.shape[1:] != self.obs_shape:
            raise ValueError(
                f"act(obs): expected an observation of shape {self.obs_shape} or a batch "
                f"(N, {', '.join(map(str, self.obs_shape))}), got {obs.shape}"
            )
        batch = obs[None] if single else obs
        if not self.state_sizes:
            actions = self._forward(batch)
        else:
            if self.state is None or len(self.state[0]) != len(batch):
                self.state = tuple(np.zeros((len(batch), n), dtype=np.float32) for n in self.state_sizes.values())
            actions, *state = self._forward(batch, *self.state)
            self.state = tuple(np.asarray(s, dtype=np.float32) for s in state)
        return actions[0] if single else actions

    def __repr__(self) -> str:
        return f"Agent({self.source!r}, obs_shape={self.obs_shape}, actions={self.action_kind})"


def torch_forward(module: Callable) -> Callable[..., Any]:
    """A numpy batch -> numpy actions wrapper of a torch module (no grad); with a recurrent state
    ``(obs, *state) -> (actions, *state)``, all numpy."""

    def forward(obs: np.ndarray, *state: np.ndarray):
        with torch.no_grad():
            out = module(torch.from_numpy(obs), *(torch.from_numpy(s) for s in state))
        return out.numpy() if isinstance(out, torch.Tensor) else tuple(o.numpy() for o in out)

    return forward
