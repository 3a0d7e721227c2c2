"""R2D2 (Kapturowski et al. 2019): DQN with a recurrent Q-network learning from replayed sequences.

The paper's pieces, in its names: sequences of ``burnin_step + unroll_len (+ nstep)`` rows cut by the
collectors (:class:`~parallel_rl.data.sequence.SequenceBuilder`) with the state their first row was acted with
(stored state); ``burnin_step`` rows that only refresh that state (run without gradient); n-step double-Q
targets from the target network over the same sequence, with value rescaling ``h``; a priority per sequence,
``eta * max|td| + (1 - eta) * mean|td|``. Episodes may begin inside a sequence: the core zeroes the state
there (:meth:`~parallel_rl.policy.nets.RecurrentCore.unroll` with ``starts``), as the collector did.

A sequence is one replay row, so the prioritized buffer (``advanced``) serves R2D2 unchanged, in the serial
pipeline and as the coordinator's replay index; the acting, the epsilon schedule, the target network and the
checkpoints are DQN's (:mod:`.dqn`). Hyperparameters: DI-engine's ``cartpole_r2d2_config.py``, see
``configs/cartpole_novel_r2d2.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence

import numpy as np
import torch
from easydict import EasyDict
from torch import nn

from ..data.sequence import SequenceBuilder
from ..errors import ConfigError
from .base import PolicyMode
from .defaults import r2d2_default_config
from .dqn import DQNPolicy
from .nets import State, body, obs_float, recurrent_core, to_tensor


def value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x (Pohlen et al. 2018; R2D2's eps = 1e-3)."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def inverse_value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)."""
    return torch.sign(x) * (((torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)) ** 2 - 1.0)


class RecurrentQNetwork(nn.Module):
    """The encoder and the LSTM/GRU ``core`` (``policy.model.recurrent``), then ``hidden_size_list`` and a plain or
    dueling head, as DQN's :class:`~parallel_rl.policy.dqn.QNetwork` ends."""

    def __init__(
        self,
        obs_dim: int,
        action_num: int,
        hidden_size_list: Sequence[int],
        dueling: bool,
        encoder: Optional[dict],
        recurrent: Optional[dict],
    ):
        super().__init__()
        if not recurrent:
            raise ConfigError(
                "policy.type='r2d2' needs a recurrent core: set policy.model.recurrent="
                "dict(type='lstm', hidden_size=64) (or type='gru')"
            )
        self.core = recurrent_core(obs_dim, encoder, recurrent, nn.ReLU)
        layers, last = body(self.core.out_dim, hidden_size_list, "policy.model.hidden_size_list", nn.ReLU)
        self.hidden = nn.Sequential(*layers)
        self.dueling = dueling
        self.head = nn.Linear(last, action_num + 1 if dueling else action_num)

    def q(self, features: torch.Tensor) -> torch.Tensor:
        """Q-values from the core's features (any leading axes)."""
        out = self.head(self.hidden(features))
        if not self.dueling:
            return out
        value, advantage = out[..., :1], out[..., 1:]
        return value + advantage - advantage.mean(dim=-1, keepdim=True)

    def unroll(self, obs: torch.Tensor, state: State, starts: torch.Tensor):
        """(T, B, D) observations -> (T, B, A) Q-values and the final state (see ``RecurrentCore.unroll``)."""
        features, state = self.core.unroll(obs, state, starts)
        return self.q(features), state


@dataclass(frozen=True)
class SequenceCollectMode(PolicyMode):
    """A collect mode whose rows the collector builds into R2D2 sequences (``sample_builder``, the collectors'
    hook for a policy that builds its own samples)."""

    sample_builder: Optional[Callable] = None


class R2D2Policy(DQNPolicy):
    @classmethod
    def default_config(cls) -> EasyDict:
        return r2d2_default_config()

    def __init__(self, cfg: EasyDict, obs_dim: int, action_num, seed: Optional[int] = None, device: str = "cpu"):
        if int(cfg.nstep) < 1 or int(cfg.learn.unroll_len) < 1 or int(cfg.burnin_step) < 0:
            raise ConfigError(
                f"policy.type='r2d2' needs nstep >= 1, learn.unroll_len >= 1 and burnin_step >= 0, got "
                f"{cfg.nstep=} {cfg.learn.unroll_len=} {cfg.burnin_step=}"
            )
        buffer_type = cfg.other.get("replay_buffer", {}).get("type", "advanced")
        if buffer_type not in ("advanced", "naive"):
            raise ConfigError(
                f"policy.type='r2d2' stores one sequence per replay row: use policy.other.replay_buffer."
                f"type='advanced' (prioritized, the paper's) or 'naive', got {buffer_type!r}"
            )
        super().__init__(cfg, obs_dim, action_num, seed, device)

    def q_network(self, obs_dim: int) -> RecurrentQNetwork:
        m = self.cfg.model
        return RecurrentQNetwork(
            obs_dim, self.action_num, m.hidden_size_list, m.dueling, m.get("encoder"), m.get("recurrent")
        )

    # ---- acting ----------------------------------------------------------------
    def initial_state(self, n: int) -> Dict[str, np.ndarray]:
        return self.model.core.initial_state(n)

    @property
    def collect_mode(self) -> SequenceCollectMode:
        return SequenceCollectMode(
            self.forward_collect,
            self.model_state_dict,
            self.load_model_state_dict,
            self.initial_state,
            self.sample_builder,
        )

    def sample_builder(self, num_envs: int, n_sample: Optional[int] = None) -> SequenceBuilder:
        """The collectors' steps as this policy's replay sequences (the n-step returns are the learner's)."""
        return SequenceBuilder(num_envs, int(self.cfg.burnin_step), int(self.cfg.learn.unroll_len), int(self.cfg.nstep))

    @torch.no_grad()
    def _step(self, obs: np.ndarray, state: Optional[Dict[str, np.ndarray]], mask: Optional[np.ndarray]):
        """Greedy actions of one core step from ``state`` (None: zeros), and the lanes' next state."""
        core = self.model.core
        state = core.initial_state(len(obs)) if state is None else state
        features, after = core.step(
            to_tensor(obs.reshape(obs.shape[0], -1), self.device, None), core.state_tensors(state, self.device)
        )
        q_value = self.model.q(features)
        if mask is not None:
            q_value = q_value.masked_fill(~to_tensor(mask, self.device, torch.bool), -torch.inf)
        return q_value.argmax(dim=-1).cpu().numpy(), core.state_arrays(after)

    def forward_collect(
        self,
        obs: np.ndarray,
        eps: float = 0.0,
        mask: Optional[np.ndarray] = None,
        state: Optional[Dict[str, np.ndarray]] = None,
    ) -> Dict[str, np.ndarray]:
        """Epsilon-greedy actions from each lane's ``state``, and the lanes' ``next_state``."""
        actions, next_state = self._step(obs, state, mask)
        return {"action": self._explore(actions, eps, mask), "next_state": next_state}

    def forward_eval(
        self, obs: np.ndarray, mask: Optional[np.ndarray] = None, state: Optional[Dict[str, np.ndarray]] = None
    ) -> Dict[str, np.ndarray]:
        actions, next_state = self._step(obs, state, mask)
        return {"action": actions, "next_state": next_state}

    # ---- learning --------------------------------------------------------------
    def forward_learn(self, batch: Dict[str, np.ndarray]) -> Dict:
        """One update on a batch of sequences (columns (B, L, ...); ``hidden_*`` (B, H)).

        Returns scalar stats and ``priority`` per sequence (numpy)."""
        loss, q_value, td_error, use = self.sequence_loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()  # averaged over the learner ranks, clipped to max_grad_norm
        self.learn_steps += 1
        self._update_target_network()
        use_f = use.float()
        abs_td = td_error.detach().abs() * use_f
        mean = abs_td.sum(0) / use_f.sum(0).clamp(min=1.0)
        eta = float(self.cfg.learn.priority_eta)
        return {
            "loss": loss.detach(),
            "q_value": (q_value.detach() * use_f).sum() / use_f.sum().clamp(min=1.0),
            "td_error": mean.mean(),
            "priority": (eta * abs_td.max(0).values + (1.0 - eta) * mean).cpu().numpy(),
        }

    def sequence_loss(self, batch: Dict[str, np.ndarray]):
        """The loss of a batch of sequences, and per trained row (time-major (unroll_len, B)) Q(s, a), the TD error
        and whether the row has a target. ``obs`` may be a tensor (a test's, asking for its gradient)."""
        cfg, device = self.cfg, self.device
        burnin, unroll, n = int(cfg.burnin_step), int(cfg.learn.unroll_len), int(cfg.nstep)
        obs = to_tensor(batch["obs"], device, None).transpose(0, 1)  # time-major (L, B, ...)
        obs = obs_float(obs.reshape(obs.shape[0], obs.shape[1], -1))  # once for the three unrolls below
        if obs.shape[0] != burnin + unroll + n:
            raise ValueError(
                f"sequences of {obs.shape[0]} rows, the config asks for burnin_step + unroll_len + "
                f"nstep = {burnin + unroll + n}: the collectors and the learner must share the config"
            )
        end = to_tensor(batch["end"], device, torch.bool).t()
        starts = torch.zeros_like(end)
        starts[1:] = end[:-1]  # an episode begins after an end: the state is zeroed before that row
        state = self.model.core.state_tensors(batch, device)
        with torch.no_grad():  # burn-in: the stored state refreshed by the current weights, no gradient
            state_after = self.model.core.unroll(obs[:burnin], state, starts[:burnin])[1] if burnin else state
            target_q, _ = self.target_network.unroll(obs, state, starts)
        q_all, _ = self.model.unroll(obs[burnin:], state_after, starts[burnin:])  # (unroll + n, B, A)
        action = to_tensor(batch["action"], device, torch.long).t()[burnin : burnin + unroll]
        q_value = q_all[:unroll].gather(2, action.unsqueeze(2)).squeeze(2)
        with torch.no_grad():
            td_target, use = self._nstep_targets(batch, q_all.detach(), target_q[burnin:], unroll, n)
        td_error = td_target - q_value
        weight = (
            to_tensor(batch["weight"], device) if "weight" in batch else torch.ones(q_value.shape[1], device=device)
        )
        use_f = use.float()
        loss = ((td_error.pow(2) * use_f).sum(0) * weight).sum() / use_f.sum().clamp(min=1.0)
        return loss, q_value, td_error, use

    def _nstep_targets(
        self, batch: Dict[str, np.ndarray], online_q: torch.Tensor, target_q: torch.Tensor, unroll: int, n: int
    ):
        """n-step double-Q targets of the ``unroll`` rows after the burn-in (time-major (unroll, B)), and which rows
        have one. Per row t: the discounted rewards up to the episode's end or n steps; then, when the episode
        goes on, gamma^n Q_target(t + n, argmax_a Q(t + n, a)) in the rescaled space (h(R + gamma^n h^-1(q))).
        A row whose n steps meet a truncation (a time limit) has no target here (the value after the last
        observation is not in the sequence): it carries no loss."""
        device, gamma = self.device, float(self.cfg.discount_factor)
        burnin = int(self.cfg.burnin_step)
        reward = to_tensor(batch["reward"], device).t()[burnin:]
        terminated = to_tensor(batch["done"], device, torch.bool).t()[burnin:]
        end = to_tensor(batch["end"], device, torch.bool).t()[burnin:]
        ret = torch.zeros_like(reward[:unroll])
        alive = torch.ones_like(ret, dtype=torch.bool)  # no episode end in rows t .. t + j - 1
        use = torch.ones_like(alive)
        for j in range(n):
            ret += alive.float() * (gamma**j) * reward[j : j + unroll]
            ends = alive & end[j : j + unroll]
            use &= ~(ends & ~terminated[j : j + unroll])  # truncated: no bootstrap value to be had
            alive &= ~ends
        rescale = bool(self.cfg.learn.value_rescale)
        next_action = online_q[n : n + unroll].argmax(dim=2, keepdim=True)
        next_q = target_q[n : n + unroll].gather(2, next_action).squeeze(2)
        if rescale:
            next_q = inverse_value_rescale(next_q)
        target = ret + alive.float() * (gamma**n) * next_q
        return (value_rescale(target) if rescale else target), use
