"""PPO: clipped surrogate objective, GAE(lambda), value loss, entropy bonus (Schulman et al. 2017).

On-policy: the collector records, with every step, the ``logp`` of the action
taken and the critic's ``value`` of the observation, plus ``env_id`` and
``end`` (the episode ended there, by termination *or* truncation). One call of
:meth:`PPOPolicy.forward_learn` takes one whole segment of such rows, computes
the advantages with :func:`gae_advantages`, runs ``epoch_per_collect`` epochs
of minibatches over it, and is done with it: the segment is never used again.

Actions: a Categorical head for ``Discrete`` spaces; for ``Box`` spaces a
Gaussian whose mean is squashed into the space's bounds and whose log std is
a learned parameter (the env manager clips the sample to the bounds).

What published PPO needs on MuJoCo (CleanRL's ``ppo_continuous_action``), as config keys:
observation normalisation (``model.obs_norm``: running statistics in the model, so collectors and
evaluators act with the checkpoint's frozen statistics; the learner normalizes a segment with the
statistics its collectors used, then adds the segment's raw observations to them), reward scaling
(``learn.reward_norm``), learning-rate annealing (``learn.lr_anneal_env_steps``), value clipping
(``learn.value_clip``) and orthogonal initialisation (``model.orthogonal_init``).

IMPALA and APPO (:mod:`.impala`, :mod:`.appo`) are this policy with other learning targets (V-trace,
:meth:`PPOPolicy.learning_targets`) and, for IMPALA, another policy loss (:meth:`PPOPolicy.policy_loss`).
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional

import numpy as np
import torch
from easydict import EasyDict
from torch import nn
from torch.distributions import Categorical, Normal

from ..data.flows import SEGMENTS, flow_of
from ..envs.spaces import ActionSpec
from ..errors import ConfigError
from .defaults import ppo_default_config
from .base import Policy
from .nets import RunningMeanStd, State, cpu_state_dict, mlp, obs_float, recurrent_core, to_tensor
from .gsde import StateDependentNoise
from .returns import discounted_returns, gae_advantages, lane_order  # noqa: F401 (public here too)
from .recurrent import Sequences, cut_sequences, unroll_rows
from .optim import Adam


def orthogonal_init_(net: nn.Sequential, head_gain: float) -> None:
    """CleanRL's layer_init: orthogonal weights with gain sqrt(2), ``head_gain`` for the last layer, zero biases."""
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linears):
        nn.init.orthogonal_(layer.weight, head_gain if i == len(linears) - 1 else np.sqrt(2))
        nn.init.zeros_(layer.bias)


# policy.model.activation: after each hidden layer of the actor's and critic's MLPs (and of an mlp encoder)
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}

# the logit of an illegal action: exp() underflows to 0 in float32, and entropy stays finite (-inf would give nan)
ILLEGAL_LOGIT = -1e9


class ActorCritic(nn.Module):
    """Separate actor and critic networks (``policy.model.encoder``, then an MLP) over flattened observations.

    With ``recurrent`` (``policy.model.recurrent``) the encoder and an LSTM/GRU ``core`` come first (an LSTM for
    the actor and one for the critic, or one for both with ``recurrent.shared``), and the actor's and critic's
    MLPs read the core's features: ``dist`` and ``value`` then take features, not observations
    (:meth:`PPOPolicy.forward_collect` steps the core, the learner unrolls it over sequences)."""

    def __init__(
        self,
        obs_dim: int,
        spec: ActionSpec,
        hidden_size_list,
        init_log_std: float = -0.5,
        encoder: Optional[dict] = None,
        obs_norm: bool = False,
        reward_norm: bool = False,
        orthogonal_init: bool = False,
        recurrent: Optional[dict] = None,
        activation: str = "tanh",
        sde_sample_freq: Optional[int] = None,
        squash_mean: bool = True,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigError(f"policy.model.activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        act = ACTIVATIONS[activation]
        if sde_sample_freq is not None and spec.kind != "box":
            raise ConfigError(
                "policy.model.use_sde (gSDE) explores Box actions; this env's actions are discrete: drop use_sde"
            )
        self.spec, self.squash_mean = spec, bool(squash_mean)
        key = "policy.model.hidden_size_list"
        # the critic's own LSTM beside the actor's unless recurrent.shared (sb3-contrib's RecurrentPPO default)
        self.split = None  # a recurrent core's features: the actor reads [:split], the critic [split:]
        self.core = recurrent_core(obs_dim, encoder, recurrent, act, 1 if (recurrent or {}).get("shared", False) else 2)
        head_in = obs_dim
        if self.core is not None:
            encoder, head_in = None, self.core.hidden_size
            self.split = 0 if len(self.core.rnns) == 1 else head_in
        self.actor = mlp(head_in, hidden_size_list, spec.dim, key, act, encoder)
        self.critic = mlp(head_in, hidden_size_list, 1, key, act, encoder)
        if orthogonal_init:
            orthogonal_init_(self.actor, 0.01)
            orthogonal_init_(self.critic, 1.0)
        # running statistics: of the observations (model.obs_norm), of the discounted return (learn.reward_norm)
        self.obs_rms = RunningMeanStd((obs_dim,)) if obs_norm else None
        self.ret_rms = RunningMeanStd(()) if reward_norm else None
        if spec.kind == "box":
            low, high = torch.as_tensor(spec.low).flatten(), torch.as_tensor(spec.high).flatten()
            self.register_buffer("action_scale", (high - low) / 2.0)
            self.register_buffer("action_bias", (high + low) / 2.0)
            if sde_sample_freq is None:
                self.log_std = nn.Parameter(torch.full((spec.dim,), float(init_log_std)))
        # gSDE (model.use_sde, Box actions): noise from the actor's last hidden features (policy/gsde.py)
        self.sde = (
            None
            if sde_sample_freq is None
            else StateDependentNoise(self.actor[-1].in_features, spec.dim, init_log_std, sde_sample_freq)
        )

    def dist(self, obs: torch.Tensor, mask: Optional[torch.Tensor] = None):
        """The action distribution of observations (the core's features with a recurrent core); a boolean
        ``mask`` (Discrete only) gives illegal actions probability 0."""
        x = obs_float(obs) if not self.split else obs[..., : self.split]
        latent = self.actor[:-1](x) if self.sde is not None else None
        out = self.actor(x) if latent is None else self.actor[-1](latent)
        if self.spec.kind == "discrete":
            if mask is not None:
                out = out.masked_fill(~mask, ILLEGAL_LOGIT)
            return Categorical(logits=out, validate_args=False)
        # tanh: bounded by the space; linear (SB3's): the env clips the action
        mean = (torch.tanh(out) if self.squash_mean else out) * self.action_scale + self.action_bias
        if self.sde is not None:
            return self.sde.dist(mean, latent, self.action_scale)
        std = self.log_std.exp() * self.action_scale
        return Normal(mean, std.expand_as(mean), validate_args=False)

    def log_prob(self, dist, action: torch.Tensor) -> torch.Tensor:
        logp = dist.log_prob(action)
        return logp if self.spec.kind == "discrete" else logp.sum(-1)

    def entropy(self, dist) -> torch.Tensor:
        ent = dist.entropy()
        return ent if self.spec.kind == "discrete" else ent.sum(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs_float(obs) if not self.split else obs[..., self.split :]).squeeze(-1)


class LearnBatch(NamedTuple):
    """One segment as :meth:`PPOPolicy.forward_learn` trains on it."""

    obs: torch.Tensor
    action: torch.Tensor
    old_logp: torch.Tensor  # the behaviour policy's, recorded by the collector
    old_value: torch.Tensor  # the collector's critic's
    action_mask: Optional[torch.Tensor]
    reward: np.ndarray  # scaled (learn.reward_norm) or as collected
    # a recurrent core only: the state each row was acted with (the collector's), and the segment's sequences
    state: Optional[State] = None
    seqs: Optional[Sequences] = None


class PPOPolicy(Policy):
    # synchronous on-policy by default (one segment per policy version, trained on once); policy.flow="async"
    # makes it asynchronous (the clipped ratio against the behaviour policy's logp bounds the update on rows a
    # few versions old)
    flow = SEGMENTS
    # learning targets computed again before every epoch (V-trace: with the policy and critic as they are then)
    retarget_every_epoch = False

    @classmethod
    def default_config(cls) -> EasyDict:
        return ppo_default_config()

    def __init__(
        self, cfg: EasyDict, obs_dim: int, action: ActionSpec, seed: Optional[int] = None, device: str = "cpu"
    ):
        self.cfg = cfg
        self.flow = flow_of(cfg)
        self.spec = action if isinstance(action, ActionSpec) else ActionSpec.discrete(action)
        self.device = device
        if seed is not None:
            torch.manual_seed(seed)
        self._generator = np.random.default_rng(seed)
        m = cfg.model
        self.model = ActorCritic(
            obs_dim,
            self.spec,
            m.hidden_size_list,
            m.get("init_log_std", -0.5),
            m.get("encoder"),
            m.get("obs_norm", False),
            cfg.learn.get("reward_norm", False),
            m.get("orthogonal_init", False),
            m.get("recurrent"),
            m.get("activation", "tanh"),
            m.get("sde_sample_freq", -1) if m.get("use_sde", False) else None,
            m.get("squash_mean", True),
        ).to(device)
        self.optimizer = Adam(
            self.model.parameters(),
            lr=cfg.learn.learning_rate,
            eps=cfg.learn.get("adam_eps", 1e-8),
            max_grad_norm=cfg.learn.max_grad_norm or 0.0,
        )
        self.learn_steps = 0
        self.env_steps_trained = 0  # rows of all segments trained on (learning-rate annealing)

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        """Observations on the device, flat, in their own dtype (uint8/bool stay 1 byte a value: the model's
        forward converts them, :func:`.nets.obs_float`); with ``model.obs_norm`` float32 normalized by the
        model's running statistics (of the raw values, as ``update`` gathers them)."""
        if self.model.obs_rms is None:
            return to_tensor(obs, self.device, None).flatten(1)
        x = to_tensor(obs, self.device).flatten(1)
        return self.model.obs_rms.normalize(x, float(self.cfg.model.get("obs_clip", 10.0)))

    # ---- acting ----------------------------------------------------------------
    def _mask(self, mask: Optional[np.ndarray]) -> Optional[torch.Tensor]:
        if mask is None:
            return None
        if self.spec.kind != "discrete":
            raise ValueError("action masks need a Discrete action space")
        return to_tensor(np.asarray(mask) > 0, self.device, torch.bool)

    def initial_state(self, n: int) -> Optional[Dict[str, np.ndarray]]:
        core = self.model.core
        return None if core is None else core.initial_state(n)

    def _features(self, obs: np.ndarray, state: Optional[Dict[str, np.ndarray]]):
        """What the heads read: the observations (feed-forward), or one step of the core from ``state`` (None:
        episode starts) and the lanes' next state as arrays."""
        x, core = self._obs(obs), self.model.core
        if core is None:
            return x, None
        state = core.initial_state(len(obs)) if state is None else state
        x, after = core.step(x, core.state_tensors(state, self.device))
        return x, core.state_arrays(after)

    @torch.no_grad()
    def forward_collect(
        self,
        obs: np.ndarray,
        eps: float = 0.0,
        mask: Optional[np.ndarray] = None,
        state: Optional[Dict[str, np.ndarray]] = None,
    ) -> Dict[str, np.ndarray]:
        """Sampled actions with what learning needs later: their ``logp`` and the critic's ``value``.

        ``eps`` is accepted for the collectors' common call and unused (PPO explores by sampling). With a
        ``mask`` only legal actions are sampled, and the mask is returned as ``action_mask`` so that
        learning computes ``logp`` under the same distribution. A recurrent model acts from ``state`` (the
        lanes' state; None: zeros) and returns the lanes' ``next_state``."""
        x, next_state = self._features(obs, state)
        dist = self.model.dist(x, self._mask(mask))
        action = dist.sample()
        out = {"action": action, "logp": self.model.log_prob(dist, action), "value": self.model.value(x)}
        out = {k: v.cpu().numpy() for k, v in out.items()}
        if mask is not None:
            out["action_mask"] = np.asarray(mask, dtype=bool)
        if self.spec.kind == "box":
            out["action"] = out["action"].astype(np.float32).reshape((len(obs),) + self.spec.shape)
        if next_state is not None:
            out["next_state"] = next_state
        return out

    @torch.no_grad()
    def forward_eval(
        self, obs: np.ndarray, mask: Optional[np.ndarray] = None, state: Optional[Dict[str, np.ndarray]] = None
    ):
        """The most likely (legal, with ``mask``) action (greedy for Discrete, the mean for Box), or with
        ``eval.sample`` one drawn from the policy (as gymnax-blines evaluates). A recurrent model acts from
        ``state`` and returns ``{"action": ..., "next_state": ...}``."""
        x, next_state = self._features(obs, state)
        dist = self.model.dist(x, self._mask(mask))
        m, sample = self.model, self.cfg.eval.get("sample", False)
        if sample:
            action = dist.sample()
        elif self.spec.kind == "discrete":
            action = dist.logits.argmax(-1)
        else:
            action = dist.mean
        if self.spec.kind == "discrete":
            action = action.cpu().numpy()
        else:
            if sample or not m.squash_mean:  # a sample or a linear mean may leave the bounds: the env would clip
                action = torch.max(torch.min(action, m.action_bias + m.action_scale), m.action_bias - m.action_scale)
            action = action.cpu().numpy().astype(np.float32).reshape((len(obs),) + self.spec.shape)
        return action if next_state is None else {"action": action, "next_state": next_state}

    # ---- learning --------------------------------------------------------------
    def scaled_reward(self, segment: Dict[str, np.ndarray]) -> np.ndarray:
        """The segment's rewards, divided by the running std of the discounted return (updated with this
        segment first) and clipped, with ``learn.reward_norm``; as collected otherwise."""
        reward = segment["reward"].astype(np.float64)
        learn, rms = self.cfg.learn, self.model.ret_rms
        if rms is None:
            return reward
        rms.update(discounted_returns(reward, segment["end"], segment["env_id"], self.cfg.discount_factor))
        scale = float((rms.var + rms.epsilon).sqrt())
        return np.clip(reward / scale, -learn.reward_clip, learn.reward_clip)

    @torch.no_grad()
    def advantages(self, segment: Dict[str, np.ndarray], reward: Optional[np.ndarray] = None) -> np.ndarray:
        """GAE(lambda) of a segment with the values the collector recorded (next values: the critic's now);
        ``reward``: the segment's rewards already scaled (:meth:`scaled_reward`, which must run once per segment)."""
        value = segment["value"].astype(np.float64)
        return gae_advantages(
            self.scaled_reward(segment) if reward is None else reward,
            value,
            self.next_values(segment, value),
            segment["done"],
            segment["end"],
            segment["env_id"],
            self.cfg.discount_factor,
            self.cfg.learn.gae_lambda,
        )

    @torch.no_grad()
    def next_values(self, segment: Dict[str, np.ndarray], value: np.ndarray) -> np.ndarray:
        """V(next_obs) of every row: the critic's now. With a recurrent core the value of the lane's next row
        (``value``: per row) where the lane continues, and where it does not (an episode's or the lane's last
        row) the critic after two core steps from the row's stored state, over ``obs`` then ``next_obs``."""
        core = self.model.core
        if core is None:
            return self.model.value(self._obs(segment["next_obs"])).cpu().numpy().astype(np.float64)
        order, continues = lane_order(segment["env_id"], segment["end"])
        out = np.empty(len(order), dtype=np.float64)
        out[order[:-1][continues[:-1]]] = value[order[1:][continues[:-1]]]
        last = order[~continues]
        state = core.state_tensors({k: segment[k][last] for k in core.state_keys}, self.device)
        _, after = core.step(self._obs(segment["obs"][last]), state)
        x, _ = core.step(self._obs(segment["next_obs"][last]), after)
        out[last] = self.model.value(x).cpu().numpy()
        return out

    @torch.no_grad()
    def row_features(self, batch: "LearnBatch") -> torch.Tensor:
        """What the heads read for every row of a segment: the observations, or the core unrolled over the
        segment's sequences (no grad; V-trace's targets)."""
        if batch.seqs is None:
            return batch.obs
        idx, x = unroll_rows(self.model.core, batch.obs, batch.state, batch.seqs)
        out = x.new_empty((len(batch.obs), x.shape[-1]))
        out[idx] = x
        return out

    def learning_targets(self, segment: Dict[str, np.ndarray], batch: "LearnBatch"):
        """(advantages, value targets) as tensors: GAE(lambda) and the lambda-return. Computed once per segment
        (``retarget_every_epoch`` False): the collector's values do not change between epochs."""
        advantage = torch.as_tensor(self.advantages(segment, batch.reward)).to(self.device)
        return advantage, advantage + batch.old_value

    def log_prob(self, obs: np.ndarray, action: np.ndarray) -> torch.Tensor:
        """log pi(action | obs) under the current policy (no grad); feed-forward only (a recurrent policy's rows
        need their state: :meth:`minibatches`, :meth:`row_features`)."""
        if self.model.core is not None:
            raise ValueError(
                "log_prob(obs, action) needs a feed-forward policy; with policy.model.recurrent use "
                "row_features(learn_batch(segment)) and model.log_prob"
            )
        with torch.no_grad():
            dist = self.model.dist(self._obs(obs))
            return self.model.log_prob(dist, self._action(action))

    def _action(self, action: np.ndarray) -> torch.Tensor:
        if self.spec.kind == "discrete":
            return to_tensor(action, self.device, torch.long)
        return to_tensor(action, self.device).reshape(len(action), -1)

    def clip_ratio(self) -> float:
        """``learn.clip_ratio``, annealed linearly to 0 with the learning rate with ``learn.clip_anneal``."""
        learn = self.cfg.learn
        if learn.get("clip_anneal", False) and learn.get("lr_anneal_env_steps", 0) > 0:
            return learn.clip_ratio * max(0.0, 1.0 - self.env_steps_trained / learn.lr_anneal_env_steps)
        return learn.clip_ratio

    def policy_loss(self, logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor):
        """The clipped surrogate objective (as a loss), and the fraction of rows whose ratio the clip cut."""
        clip = self.clip_ratio()
        ratio = torch.exp(logp - old_logp)
        surrogate = torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv)
        with torch.no_grad():
            clip_fraction = ((ratio - 1.0).abs() > clip).float().mean()
        return -surrogate.mean(), clip_fraction

    def minibatch_loss(
        self,
        batch: "LearnBatch",
        idx: torch.Tensor,
        adv: torch.Tensor,
        value_target: torch.Tensor,
        x: Optional[torch.Tensor] = None,
    ):
        """The loss of the rows ``idx`` (policy loss + value_weight * value loss - entropy_weight * entropy) and
        its parts: loss, policy_loss, value_loss, entropy, approx_kl, clip_fraction. ``x``: what the heads read
        for those rows (a recurrent core's features; None: their observations)."""
        learn = self.cfg.learn
        if learn.adv_norm:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        x = batch.obs[idx] if x is None else x
        dist = self.model.dist(x, None if batch.action_mask is None else batch.action_mask[idx])
        logp = self.model.log_prob(dist, batch.action[idx])
        old_logp = batch.old_logp[idx]
        policy_loss, clip_fraction = self.policy_loss(logp, old_logp, adv)
        value = self.model.value(x)
        value_loss = (value - value_target).pow(2)
        if learn.get("value_clip", False):
            old_value = batch.old_value[idx]
            value_clipped = old_value + (value - old_value).clamp(-learn.clip_ratio, learn.clip_ratio)
            value_loss = torch.max(value_loss, (value_clipped - value_target).pow(2))
        value_loss = 0.5 * value_loss.mean()
        entropy = self.model.entropy(dist).mean()
        loss = policy_loss + learn.value_weight * value_loss - learn.entropy_weight * entropy
        with torch.no_grad():
            approx_kl = (old_logp - logp).mean()
        return loss, torch.stack([loss, policy_loss, value_loss, entropy, approx_kl, clip_fraction]).detach()

    def learn_batch(self, segment: Dict[str, np.ndarray]) -> "LearnBatch":
        """The segment as the learner's tensors (observations normalized with the collectors' statistics) and
        its rewards scaled once (:meth:`scaled_reward` updates the return statistics)."""
        core, state, seqs = self.model.core, None, None
        if core is not None:
            missing = [k for k in core.state_keys if k not in segment]
            if missing:
                raise ValueError(
                    f"a recurrent policy learns from rows that carry the collector's state {missing}; "
                    "these rows were collected by a feed-forward policy (policy.model.recurrent differs)"
                )
            state = core.state_tensors(segment, self.device)
            seqs = cut_sequences(segment["env_id"], segment["end"], int(self.cfg.learn.unroll_len), self.device)
        return LearnBatch(
            self._obs(segment["obs"]),
            self._action(segment["action"]),
            to_tensor(segment["logp"], self.device),
            to_tensor(segment["value"], self.device),
            self._mask(segment["action_mask"]) if "action_mask" in segment else None,
            self.scaled_reward(segment),
            state,
            seqs,
        )

    def minibatches(self, batch: "LearnBatch", batch_size: int):
        """One epoch's minibatches: ``(rows, what the heads read for them or None)``. Feed-forward: ``batch_size``
        random rows each; recurrent: random whole sequences making ``batch_size`` rows on average, the core re-run
        over them from their stored starting states (the state zeroed where an episode starts inside one)."""
        if batch.seqs is None:
            perm = torch.randperm(len(batch.old_logp), device=self.device)
            for start in range(0, len(perm) - batch_size + 1, batch_size):
                yield perm[start : start + batch_size], None
            return
        n_seq = len(batch.seqs.rows)
        # as many sequences as hold batch_size rows on average (a lane's last sequence may be short)
        per = min(n_seq, max(1, round(n_seq * batch_size / max(1, len(batch.old_logp)))))
        perm = torch.randperm(n_seq, device=self.device)
        for start in range(0, n_seq - per + 1, per):
            yield unroll_rows(self.model.core, batch.obs, batch.state, batch.seqs, perm[start : start + per])

    def forward_learn(self, segment: Dict[str, np.ndarray]) -> Dict:
        """``epoch_per_collect`` epochs of minibatch updates on one segment of on-policy rows.

        Returns 0-d tensors (means over the segment's updates): no host sync per update."""
        learn = self.cfg.learn
        if learn.get("lr_anneal_env_steps", 0) > 0:  # linear to 0 over the configured env steps
            self.optimizer.lr = learn.learning_rate * max(0.0, 1.0 - self.env_steps_trained / learn.lr_anneal_env_steps)
        batch = self.learn_batch(segment)
        n = len(batch.old_logp)
        batch_size = min(int(learn.batch_size), n)
        stats, targets = [], None
        for _epoch in range(int(learn.epoch_per_collect)):
            if targets is None or self.retarget_every_epoch:
                advantage, value_target = targets = self.learning_targets(segment, batch)
            for idx, x in self.minibatches(batch, batch_size):
                loss, parts = self.minibatch_loss(batch, idx, advantage[idx], value_target[idx], x)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()  # averaged over the learner ranks, clipped to max_grad_norm
                self.learn_steps += 1
                stats.append(parts)
        self.env_steps_trained += n
        if self.model.obs_rms is not None:  # the next version acts (and its segment trains) with these
            self.model.obs_rms.update(np.asarray(segment["obs"]).reshape(n, -1))
        mean = torch.stack(stats).mean(0) if stats else torch.zeros(6)
        names = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
        info = dict(zip(names, mean.unbind()))
        info["updates"] = len(stats)
        info["epochs"] = int(learn.epoch_per_collect)  # every segment is used exactly this many times
        info["learning_rate"] = self.optimizer.lr
        return info

    # ---- state -----------------------------------------------------------------
    def state_dict(self) -> Dict:
        return {
            "model": cpu_state_dict(self.model),
            "optimizer": self.optimizer.state_dict(),
            "learn_steps": self.learn_steps,
            "env_steps_trained": self.env_steps_trained,
        }

    def load_state_dict(self, state: Dict) -> None:
        self.model.load_state_dict(state["model"])
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        self.learn_steps = int(state.get("learn_steps", self.learn_steps))
        self.env_steps_trained = int(state.get("env_steps_trained", self.env_steps_trained))
