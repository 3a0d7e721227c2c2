"""Policy sections, importable without torch (the coordinator never imports torch): each algorithm's ``policy``
section with its defaults, bounds and docs on its fields.

Every policy type brings its own section; ``compile_config`` merges the defaults of the type named by
``policy.type`` and checks the values against that type's fields. ``on_policy`` (DI-engine's key) and, for an
on-policy type, ``flow`` choose the data flow the collectors and the coordinator ask for: off-policy data goes
through the replay buffer, on-policy data is used once, as whole segments (``flow="segments"``) or as the newest
asynchronous rollouts (``flow="async"``), and dropped.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional

from easydict import EasyDict

from ..config.section import Section, setting

# policy.learn.optimizer (DQN, R2D2): policy/optim.py's make_optimizer (checked by compile_config)
OPTIMIZERS = ("adam", "rmsprop")
# policy.model.encoder (policy/nets.py)
ENCODER_TYPES = ("mlp", "conv", "minatar", "nature")
LAYOUTS = ("auto", "hwc", "chw")
# the actor-critic's hidden activations (policy/ppo.py)
ACTIVATIONS = ("tanh", "relu")


# ---- parts the algorithms share ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EncoderSection(Section):
    """What reads the observation before hidden_size_list (policy/nets.py): mlp, conv over (H, W, C) boards with
    shape=[H, W, C], channels=[...], kernel_size (odd), or the minatar / nature conv stacks."""

    title = "Observation encoder"

    type: str = setting("mlp", choices=ENCODER_TYPES, doc="mlp, conv, minatar or nature")
    shape: List[int] = setting([], doc="conv: the board's [H, W, C]")
    channels: List[int] = setting([32, 64], doc="conv: the channels of each layer")
    kernel_size: int = setting(3, lo=1, doc="conv: the kernel's size (odd)")
    layout: str = setting("auto", choices=LAYOUTS, doc="minatar, nature: the observation's layout")
    fc: Optional[int] = setting(
        None,
        lo=1,
        nullable=True,
        doc="""minatar, nature: the width of their ReLU layer
        (None: the published 128 / 512)""",
    )


@dataclasses.dataclass(frozen=True)
class PolicySection(Section):
    """The keys every algorithm has (DI-engine's names)."""

    path = "policy"
    title = "Policy"

    type: str = setting("dqn", doc="the algorithm (a registered PolicySpec's name)")
    on_policy: bool = setting(False, doc="DI-engine's key: whether the algorithm trains on its own fresh data")
    cuda: bool = setting(False, doc="DI-engine's key: train the learner on the GPU; policy.device wins when set")
    device: str = setting("", doc="cpu, cuda or auto; empty: policy.cuda decides")


@dataclasses.dataclass(frozen=True)
class OffPolicySection(PolicySection):
    """The off-policy (replay) algorithms' keys."""

    random_collect_size: int = setting(
        0,
        lo=0,
        doc="""DI-engine's key (RL Zoo's learning_starts): env steps
        collected with uniformly random actions before the first update; serial pushes them first, the cluster's
        collectors act randomly until the cluster has collected this many (0: none; at most the replay buffer's
        size)""",
    )


# ---- DQN ----------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class DQNModel(Section):
    title = "DQN's network"

    hidden_size_list: List[int] = setting([128, 128, 64], doc="the widths of the hidden layers after the encoder")
    dueling: bool = setting(True, doc="a dueling head (value and advantage streams)")
    encoder: Dict[str, Any] = setting(EncoderSection, doc="what reads the observation")


@dataclasses.dataclass(frozen=True)
class RMSpropSection(Section):
    """DQN's papers' RMSprop (Mnih et al. 2015, Young & Tian 2019): the papers' "gradient momentum" 0.95 is the
    centered mean gradient's decay, which torch's centered RMSprop ties to alpha; their MinAtar code
    (examples/dqn.py) passes no momentum (0)."""

    title = "RMSprop's settings"

    alpha: float = setting(0.95, lo=0, hi=1, doc="the squared gradient's decay")
    momentum: float = setting(0.0, lo=0, doc="momentum")
    eps: float = setting(0.01, above=0, doc="added to the denominator")
    centered: bool = setting(True, doc="centered RMSprop")


@dataclasses.dataclass(frozen=True)
class DQNLearn(Section):
    title = "DQN's training"

    update_per_collect: int = setting(4, lo=1, doc="updates per collect call")
    batch_size: int = setting(64, lo=1, doc="rows per update")
    learning_rate: float = setting(1e-3, above=0, doc="the optimizer's learning rate")
    target_update_freq: int = setting(
        100, lo=0, doc="hard copy to the target network every N updates (0: use target_theta)"
    )
    target_theta: float = setting(0.005, above=0, hi=1, doc="soft update factor when target_update_freq == 0")
    double: bool = setting(True, doc="double DQN's target")
    max_grad_norm: float = setting(10.0, lo=0, doc="clip the gradient's norm (0: no clipping)")
    optimizer: str = setting("adam", doc="adam or rmsprop (with policy.learn.rmsprop's settings)")
    rmsprop: Dict[str, Any] = setting(RMSpropSection, doc="RMSprop's settings")


@dataclasses.dataclass(frozen=True)
class CollectSection(Section):
    title = "Collection"

    n_sample: int = setting(64, lo=1, doc="rows per collect call")


@dataclasses.dataclass(frozen=True)
class EpsSection(Section):
    """The collectors' epsilon-greedy exploration."""

    title = "Epsilon-greedy exploration"

    type: str = setting("exp", choices=("exp", "linear"), doc="exponential or linear decay")
    start: float = setting(0.95, lo=0, hi=1, doc="epsilon at the start")
    end: float = setting(0.05, lo=0, hi=1, doc="epsilon at the end")
    decay: int = setting(5000, lo=1, doc="env steps of the decay")


@dataclasses.dataclass(frozen=True)
class DQNOther(Section):
    title = "DQN's exploration"

    eps: Dict[str, Any] = setting(EpsSection, doc="epsilon-greedy exploration")


@dataclasses.dataclass(frozen=True)
class DQNSection(OffPolicySection):
    """DQN (Mnih et al. 2015) with double Q and a dueling head."""

    title = "DQN"

    type: str = setting("dqn", doc="the algorithm")
    model: Dict[str, Any] = setting(DQNModel, doc="the network")
    discount_factor: float = setting(0.99, above=0, hi=1, doc="gamma")
    nstep: int = setting(3, lo=1, doc="n-step returns")
    learn: Dict[str, Any] = setting(DQNLearn, doc="training")
    collect: Dict[str, Any] = setting(CollectSection, doc="collection")
    eval: Dict[str, Any] = setting({}, doc="evaluation")
    other: Dict[str, Any] = setting(DQNOther, doc="exploration")


# ---- R2D2 ---------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class R2D2Model(DQNModel):
    title = "R2D2's network"

    hidden_size_list: List[int] = setting([64], doc="the widths of the hidden layers after the core")
    recurrent: Dict[str, Any] = setting(
        {"type": "lstm", "hidden_size": 64},
        doc="""the core (policy/nets.py, as
        PPO's policy.model.recurrent) between the encoder and hidden_size_list: type lstm or gru, hidden_size""",
    )


@dataclasses.dataclass(frozen=True)
class R2D2Learn(DQNLearn):
    title = "R2D2's training"

    learning_rate: float = setting(5e-4, above=0, doc="the optimizer's learning rate")
    target_update_freq: int = setting(
        2500, lo=0, doc="hard copy to the target network every N updates (0: use target_theta)"
    )
    unroll_len: int = setting(
        40,
        lo=1,
        doc="""rows trained on per sequence (one sequence every unroll_len rows of a
        lane; each sequence holds burnin_step + unroll_len + nstep rows)""",
    )
    value_rescale: bool = setting(
        True, doc="h(x) = sign(x)(sqrt(|x| + 1) - 1) + 1e-3 x on the targets (Pohlen et al. 2018)"
    )
    priority_eta: float = setting(
        0.9,
        lo=0,
        hi=1,
        doc="""a sequence's priority: eta * max |td| + (1 - eta) * mean |td|
        over its trained rows""",
    )


@dataclasses.dataclass(frozen=True)
class R2D2Collect(CollectSection):
    n_sample: int = setting(8, lo=1, doc="sequences per collect call")


@dataclasses.dataclass(frozen=True)
class R2D2Eps(EpsSection):
    decay: int = setting(10000, lo=1, doc="env steps of the decay")


@dataclasses.dataclass(frozen=True)
class R2D2Other(DQNOther):
    eps: Dict[str, Any] = setting(R2D2Eps, doc="epsilon-greedy exploration")


@dataclasses.dataclass(frozen=True)
class R2D2Section(DQNSection):
    """R2D2 (Kapturowski et al. 2019; policy/r2d2.py): DQN's keys and the paper's, with DI-engine's r2d2 defaults
    where it has them (discount 0.997, value rescaling, eps decay 10000)."""

    title = "R2D2"

    type: str = setting("r2d2", doc="the algorithm")
    model: Dict[str, Any] = setting(R2D2Model, doc="the network")
    discount_factor: float = setting(0.997, above=0, hi=1, doc="gamma")
    nstep: int = setting(5, lo=1, doc="n-step returns")
    learn: Dict[str, Any] = setting(R2D2Learn, doc="training")
    collect: Dict[str, Any] = setting(R2D2Collect, doc="collection")
    other: Dict[str, Any] = setting(R2D2Other, doc="exploration")
    burnin_step: int = setting(
        20, lo=0, doc="rows at a sequence's start that only refresh the stored state (no gradient)"
    )


# ---- the actor-critics: PPO, IMPALA, APPO ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ActorCriticModel(Section):
    """PPO's actor-critic (policy/ppo.py), which IMPALA and APPO share."""

    title = "The actor-critic"

    hidden_size_list: List[int] = setting([64, 64], doc="the widths of the actor's and critic's hidden layers")
    activation: str = setting(
        "tanh",
        choices=ACTIVATIONS,
        doc="""after each hidden layer of the actor and critic
        MLPs: tanh (CleanRL, SB3's PPO) or relu""",
    )
    encoder: Dict[str, Any] = setting(EncoderSection, doc="what reads the observation")
    init_log_std: float = setting(
        -0.5, doc="Box actions: log std is a learned parameter, independent of the observation"
    )
    obs_norm: bool = setting(
        False,
        doc="""normalize observations by running mean/std (gymnasium's
        NormalizeObservation), clipped to +-obs_clip; the statistics live in the model, so every checkpoint carries
        them""",
    )
    obs_clip: float = setting(10.0, above=0, doc="the normalized observations' clip")
    squash_mean: bool = setting(
        True,
        doc="""Box actions: the Gaussian's mean tanh-squashed into the space's bounds
        (true), or linear (false, SB3's PPO: the env clips each action to the bounds); the std is
        exp(init_log_std...) times half the range""",
    )
    use_sde: bool = setting(
        False,
        doc="""gSDE (Box actions): noise linear in the actor's last hidden features, its
        (features x actions) log std learned from init_log_std""",
    )
    sde_sample_freq: int = setting(-1, doc="gSDE: new noise matrices every sde_sample_freq collect steps (<= 0: once)")
    orthogonal_init: bool = setting(
        False,
        doc="""orthogonal weights (gain sqrt(2); actor head 0.01, critic head 1),
        zero biases: CleanRL's layer_init""",
    )
    recurrent: Optional[Dict[str, Any]] = setting(
        None,
        doc="""memory (policy/nets.py): null, or dict(type="lstm" |
        "gru", hidden_size=H[, shared=False]): a core after the encoder, one LSTM for the actor and one for the
        critic (shared=True: one for both); the collectors carry its state per env lane and store it with every
        row""",
    )


@dataclasses.dataclass(frozen=True)
class ActorCriticEval(Section):
    title = "The actor-critic's evaluation"

    sample: bool = setting(
        False,
        doc="""the evaluator's actions drawn from the policy (true; gymnax-blines'
        evaluation) instead of the most likely one / the mean (false): a greedy policy on a deterministic env
        repeats one episode (with model.use_sde the draw is the collectors' current noise matrices)""",
    )


@dataclasses.dataclass(frozen=True)
class PPOLearn(Section):
    title = "PPO's training"

    epoch_per_collect: int = setting(10, lo=1, doc="epochs over each collected segment (DI-engine: epoch_per_collect)")
    batch_size: int = setting(64, lo=1, doc="rows per minibatch")
    learning_rate: float = setting(3e-4, above=0, doc="Adam's learning rate")
    clip_ratio: float = setting(0.2, above=0, doc="the surrogate's clip")
    value_weight: float = setting(0.5, lo=0, doc="the value loss's weight")
    entropy_weight: float = setting(0.0, lo=0, doc="the entropy bonus's weight")
    value_clip: bool = setting(False, doc="clip the value loss around the collected value like the policy ratio")
    adv_norm: bool = setting(True, doc="normalize the advantages per minibatch")
    max_grad_norm: float = setting(0.5, lo=0, doc="clip the gradient's norm (0: no clipping)")
    gae_lambda: float = setting(0.95, lo=0, hi=1, doc="GAE's lambda")
    update_per_collect: int = setting(1, lo=1, doc="unused by PPO; kept so a shared pipeline may read it")
    reward_norm: bool = setting(
        False,
        doc="""scale rewards by the running std of the discounted return (gymnasium's
        NormalizeReward), then clip to +-reward_clip; the statistics are kept by the learner (see
        docs/protocol.md)""",
    )
    reward_clip: float = setting(10.0, above=0, doc="the normalized rewards' clip")
    lr_anneal_env_steps: int = setting(
        0,
        lo=0,
        doc="""anneal the learning rate linearly to 0 over this many env
        steps trained on (0: constant; CleanRL anneals over the whole run)""",
    )
    adam_eps: float = setting(1e-8, above=0, doc="Adam's epsilon (SB3's and CleanRL's PPO: 1e-5)")
    clip_anneal: bool = setting(
        False,
        doc="""anneal clip_ratio linearly to 0 over lr_anneal_env_steps too (RL Zoo's
        clip_range: lin_0.2)""",
    )
    unroll_len: int = setting(
        32,
        lo=1,
        doc="""with model.recurrent: each lane's rows are cut into sequences of this
        many steps, the core re-run over each from its stored starting state; a minibatch holds as many whole
        sequences as make batch_size rows on average""",
    )


@dataclasses.dataclass(frozen=True)
class OnPolicySection(PolicySection):
    """The on-policy algorithms' keys: the data flow and the actor-critic."""

    on_policy: bool = setting(True, doc="DI-engine's key: whether the algorithm trains on its own fresh data")
    flow: str = setting(
        "segments",
        doc="""the on-policy data flow (parallel_rl.data.flows): segments (synchronous:
        collectors wait for each version) or async (collectors never wait for a version, only for room in the
        learner's queue; rows within max_staleness versions, each trained on once)""",
    )
    model: Dict[str, Any] = setting(ActorCriticModel, doc="the actor-critic")
    discount_factor: float = setting(0.99, above=0, hi=1, doc="gamma")
    nstep: int = setting(1, lo=1, doc="n-step returns (1: the flows check it)")


@dataclasses.dataclass(frozen=True)
class PPOCollect(CollectSection):
    n_sample: int = setting(512, lo=1, doc="rows per collect call (a segment)")


@dataclasses.dataclass(frozen=True)
class PPOSection(OnPolicySection):
    """PPO (Schulman et al. 2017), DI-engine's key names."""

    title = "PPO"

    type: str = setting("ppo", doc="the algorithm")
    learn: Dict[str, Any] = setting(PPOLearn, doc="training")
    collect: Dict[str, Any] = setting(PPOCollect, doc="collection")
    eval: Dict[str, Any] = setting(ActorCriticEval, doc="evaluation")
    other: Dict[str, Any] = setting({}, doc="other")


@dataclasses.dataclass(frozen=True)
class VtraceLearn(Section):
    """The learn keys IMPALA and APPO share (PPO's minibatch loop and normalisation, V-trace's truncation)."""

    title = "V-trace training"

    rho_bar: float = setting(
        1.0,
        above=0,
        doc="""V-trace's truncation of the importance weights pi/mu in the targets'
        TD errors and the policy-gradient advantage (Espeholt et al. 2018; 1.0 in the paper, Sample Factory and
        RLlib)""",
    )
    c_bar: float = setting(1.0, above=0, doc="V-trace's truncation of the importance weights in the traces")
    lambda_: float = setting(
        1.0,
        lo=0,
        hi=1,
        doc="""the paper's lambda in the traces, c_t = lambda * min(c_bar,
        ratio) (its section 4.1 remark; DI-engine's IMPALA key): 1.0 is plain V-trace; lower trades bias for less
        variance, as GAE's lambda does for PPO""",
    )
    value_weight: float = setting(0.5, lo=0, doc="the value loss's weight")
    adv_norm: bool = setting(False, doc="normalize the advantages per minibatch")
    update_per_collect: int = setting(1, lo=1, doc="unused; kept so a shared pipeline may read it")
    reward_norm: bool = setting(False, doc="scale rewards by the running std of the discounted return (see PPO's)")
    reward_clip: float = setting(10.0, above=0, doc="the normalized rewards' clip")
    lr_anneal_env_steps: int = setting(
        0, lo=0, doc="anneal the learning rate linearly to 0 over this many env steps (0: constant)"
    )
    unroll_len: int = setting(32, lo=1, doc="with model.recurrent: the sequences' length (see PPO's)")
    epoch_per_collect: int = setting(1, lo=1, doc="epochs over each batch")
    batch_size: int = setting(500, lo=1, doc="rows per minibatch")
    learning_rate: float = setting(5e-4, above=0, doc="the optimizer's learning rate")
    entropy_weight: float = setting(0.01, lo=0, doc="the entropy bonus's weight")
    max_grad_norm: float = setting(40.0, lo=0, doc="clip the gradient's norm (0: no clipping)")


@dataclasses.dataclass(frozen=True)
class ImpalaCollect(CollectSection):
    n_sample: int = setting(500, lo=1, doc="rows per collect call")


@dataclasses.dataclass(frozen=True)
class ImpalaSection(OnPolicySection):
    """IMPALA (Espeholt et al. 2018): V-trace actor-critic. RLlib's IMPALA defaults (lr 5e-4, vf_loss_coeff 0.5,
    entropy_coeff 0.01, grad_clip 40, one SGD pass over each train batch of 500 env steps as one minibatch, V-trace
    clip thresholds 1.0); the actor-critic is PPO's."""

    title = "IMPALA"

    type: str = setting("impala", doc="the algorithm")
    flow: str = setting(
        "async",
        doc="""the data flow (parallel_rl.data.flows): asynchronous rollouts, each row
        trained on with its behaviour policy's logp""",
    )
    learn: Dict[str, Any] = setting(VtraceLearn, doc="training")
    collect: Dict[str, Any] = setting(ImpalaCollect, doc="collection")
    eval: Dict[str, Any] = setting(ActorCriticEval, doc="evaluation")
    other: Dict[str, Any] = setting({}, doc="other")


@dataclasses.dataclass(frozen=True)
class APPOLearn(VtraceLearn):
    title = "APPO's training"

    adv_norm: bool = setting(True, doc="normalize the advantages per minibatch")
    batch_size: int = setting(1024, lo=1, doc="rows per minibatch")
    learning_rate: float = setting(1e-4, above=0, doc="the optimizer's learning rate")
    clip_ratio: float = setting(0.1, above=0, doc="the surrogate's clip")
    entropy_weight: float = setting(0.003, lo=0, doc="the entropy bonus's weight")
    max_grad_norm: float = setting(4.0, lo=0, doc="clip the gradient's norm (0: no clipping)")
    value_clip: bool = setting(
        False, doc="clip the value loss around the collected value like the policy ratio (PPO's key)"
    )


@dataclasses.dataclass(frozen=True)
class APPOCollect(CollectSection):
    n_sample: int = setting(1024, lo=1, doc="rows per collect call")


@dataclasses.dataclass(frozen=True)
class APPOSection(ImpalaSection):
    """APPO: PPO's clipped surrogate on V-trace targets. Sample Factory's defaults (learning_rate 1e-4,
    ppo_clip_ratio 0.1, value_loss_coeff 0.5, exploration_loss_coeff 0.003, max_grad_norm 4, one epoch of one
    1,024-row minibatch, normalized advantages, vtrace_rho = vtrace_c = 1)."""

    title = "APPO"

    type: str = setting("appo", doc="the algorithm")
    learn: Dict[str, Any] = setting(APPOLearn, doc="training")
    collect: Dict[str, Any] = setting(APPOCollect, doc="collection")


# ---- the continuous-action off-policy algorithms: SAC, TD3 -------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ActorCriticQModel(Section):
    title = "Actor and critics"

    actor_hidden_size_list: List[int] = setting([256, 256], doc="the actor's hidden layers")
    critic_hidden_size_list: List[int] = setting([256, 256], doc="each critic's hidden layers")


def cuda_graph_setting() -> bool:
    """SAC's and TD3's ``learn.cuda_graph``: their update on CUDA (policy/graphs.py), one field for both sections."""
    return setting(
        True,
        doc="""on CUDA, each update replays a CUDA graph recorded after three eager warm-ups (policy/graphs.py; the
        same numbers, 7-10x the updates/s of a launch-bound eager update); no effect on the CPU""",
    )


@dataclasses.dataclass(frozen=True)
class SACLearn(Section):
    title = "SAC's training"

    update_per_collect: int = setting(1, lo=1, doc="updates per collect call")
    batch_size: int = setting(256, lo=1, doc="rows per update")
    learning_rate_q: float = setting(1e-3, above=0, doc="the critics' learning rate")
    learning_rate_policy: float = setting(1e-3, above=0, doc="the actor's learning rate")
    learning_rate_alpha: float = setting(1e-3, above=0, doc="the temperature's learning rate")
    target_theta: float = setting(0.005, above=0, hi=1, doc="Polyak factor of the target critics")
    init_alpha: float = setting(0.2, above=0, doc="the temperature at the start")
    auto_alpha: bool = setting(True, doc="learn the temperature")
    target_entropy_per_dim: float = setting(-1.0, doc="target entropy per action dimension (-1: the usual -dim(A))")
    cuda_graph: bool = cuda_graph_setting()


@dataclasses.dataclass(frozen=True)
class SmallCollect(CollectSection):
    n_sample: int = setting(8, lo=1, doc="rows per collect call")


@dataclasses.dataclass(frozen=True)
class SACSection(OffPolicySection):
    """SAC (Haarnoja et al. 2018) with twin Q and automatic temperature, DI-engine's key names."""

    title = "SAC"

    type: str = setting("sac", doc="the algorithm")
    model: Dict[str, Any] = setting(ActorCriticQModel, doc="the networks")
    discount_factor: float = setting(0.99, above=0, hi=1, doc="gamma")
    nstep: int = setting(1, lo=1, doc="n-step returns")
    learn: Dict[str, Any] = setting(SACLearn, doc="training")
    collect: Dict[str, Any] = setting(SmallCollect, doc="collection")
    eval: Dict[str, Any] = setting({}, doc="evaluation")
    other: Dict[str, Any] = setting({}, doc="other")


@dataclasses.dataclass(frozen=True)
class TD3Learn(Section):
    title = "TD3's training"

    update_per_collect: int = setting(1, lo=1, doc="updates per collect call")
    batch_size: int = setting(256, lo=1, doc="rows per update")
    learning_rate_actor: float = setting(3e-4, above=0, doc="the actor's learning rate")
    learning_rate_critic: float = setting(3e-4, above=0, doc="the critics' learning rate")
    target_theta: float = setting(0.005, above=0, hi=1, doc="Polyak factor of the target actor and critics")
    policy_delay: int = setting(
        2,
        lo=1,
        doc="""the actor and the targets move every policy_delay critic updates
        (delayed policy updates)""",
    )
    policy_noise: float = setting(
        0.2,
        lo=0,
        doc="""target policy smoothing: N(0, policy_noise) clipped to
        +-noise_clip, in the [-1, 1] action scale""",
    )
    noise_clip: float = setting(0.5, lo=0, doc="target policy smoothing's clip")
    cuda_graph: bool = cuda_graph_setting()


@dataclasses.dataclass(frozen=True)
class TD3Collect(SmallCollect):
    exploration_noise: float = setting(
        0.1,
        lo=0,
        doc="""collectors act with the actor's action plus N(0,
        exploration_noise) ([-1, 1] action scale)""",
    )


@dataclasses.dataclass(frozen=True)
class TD3Section(SACSection):
    """TD3 (Fujimoto et al. 2018): CleanRL's td3_continuous_action defaults."""

    title = "TD3"

    type: str = setting("td3", doc="the algorithm")
    learn: Dict[str, Any] = setting(TD3Learn, doc="training")
    collect: Dict[str, Any] = setting(TD3Collect, doc="collection")


# the seed names: each algorithm's defaults
def dqn_default_config() -> EasyDict:
    return DQNSection.defaults()


def r2d2_default_config() -> EasyDict:
    return R2D2Section.defaults()


def ppo_default_config() -> EasyDict:
    return PPOSection.defaults()


def impala_default_config() -> EasyDict:
    return ImpalaSection.defaults()


def appo_default_config() -> EasyDict:
    return APPOSection.defaults()


def sac_default_config() -> EasyDict:
    return SACSection.defaults()


def td3_default_config() -> EasyDict:
    return TD3Section.defaults()
