"""Policy defaults, importable without torch (the coordinator never imports torch).

Every policy type brings its own config tree; ``compile_config`` merges the
tree of the type named by ``policy.type``. ``on_policy`` (DI-engine's key) and,
for an on-policy type, ``flow`` choose the data flow the collectors and the
coordinator ask for: off-policy data goes through the replay buffer, on-policy
data is used once, as whole segments (``flow="segments"``) or as the newest
asynchronous rollouts (``flow="async"``), and dropped.
"""
from __future__ import annotations

from easydict import EasyDict


def _common(type_: str, on_policy: bool) -> dict:
    return dict(
        type=type_,
        on_policy=on_policy,
        # DI-engine's key: train the learner on the GPU; policy.device ("cpu" | "cuda" | "auto") wins when set
        cuda=False,
        device="",
    )


def _off_policy() -> dict:
    """Keys of the off-policy (replay) algorithms."""
    return dict(
        # DI-engine's key (RL Zoo's learning_starts): env steps collected with uniformly random actions
        # before the first update; serial pushes them first, the cluster's collectors act randomly until the
        # cluster has collected this many (0: none)
        random_collect_size=0,
    )


def _encoder() -> dict:
    """``policy.model.encoder`` (policy/nets.py): mlp | conv (``channels``, ``kernel_size``) | minatar | nature
    (``layout`` hwc / chw / auto, ``fc``: the width of their ReLU layer, null: the published 128 / 512)."""
    return dict(type="mlp", shape=[], channels=[32, 64], kernel_size=3, layout="auto", fc=None)


def dqn_default_config() -> EasyDict:
    return EasyDict(
        **_common("dqn", on_policy=False),
        **_off_policy(),
        # encoder: what reads the observation before hidden_size_list (policy/nets.py): mlp, conv over (H, W, C)
        # boards with shape=[H, W, C], channels=[...], kernel_size (odd), or the minatar / nature conv stacks
        model=dict(hidden_size_list=[128, 128, 64], dueling=True, encoder=_encoder()),
        discount_factor=0.99,
        nstep=3,
        learn=dict(
            update_per_collect=4,
            batch_size=64,
            learning_rate=1e-3,
            # hard copy to the target network every N updates (0: use target_theta)
            target_update_freq=100,
            # soft update factor when target_update_freq == 0
            target_theta=0.005,
            double=True,
            max_grad_norm=10.0,
            # "adam" or "rmsprop" (DQN's papers': Mnih et al. 2015, Young & Tian 2019), with these settings: the
            # papers' "gradient momentum" 0.95 is the centered mean gradient's decay, which torch's centered
            # RMSprop ties to alpha; their MinAtar code (examples/dqn.py) passes no momentum (0)
            optimizer="adam",
            rmsprop=dict(alpha=0.95, momentum=0.0, eps=0.01, centered=True),
        ),
        collect=dict(n_sample=64),
        eval=dict(),
        other=dict(eps=dict(type="exp", start=0.95, end=0.05, decay=5000)),
    )


def r2d2_default_config() -> EasyDict:
    """R2D2 (Kapturowski et al. 2019; policy/r2d2.py): DQN's keys and the paper's, with DI-engine's r2d2 defaults
    where it has them (discount 0.997, value rescaling, eps decay 10000)."""
    cfg = dqn_default_config()
    cfg.update(type="r2d2", discount_factor=0.997, nstep=5,
               # rows at a sequence's start that only refresh the stored state (no gradient)
               burnin_step=20)
    # the core (policy/nets.py, as PPO's policy.model.recurrent) sits between the encoder and hidden_size_list
    cfg.model.update(hidden_size_list=[64], recurrent=dict(type="lstm", hidden_size=64))
    cfg.learn.update(
        # rows trained on per sequence (one sequence every unroll_len rows of a lane; each sequence holds
        # burnin_step + unroll_len + nstep rows)
        unroll_len=40,
        learning_rate=5e-4,
        target_update_freq=2500,
        # h(x) = sign(x)(sqrt(|x| + 1) - 1) + 1e-3 x on the targets (Pohlen et al. 2018)
        value_rescale=True,
        # a sequence's priority: eta * max |td| + (1 - eta) * mean |td| over its trained rows
        priority_eta=0.9,
    )
    cfg.collect.n_sample = 8  # sequences per collect call
    cfg.other.eps.decay = 10000
    return cfg


def _actor_critic() -> dict:
    """The model keys of PPO's actor-critic (``policy/ppo.py``), which IMPALA and APPO share."""
    return dict(
        hidden_size_list=[64, 64],
        # after each hidden layer of the actor and critic MLPs: "tanh" (CleanRL, SB3's PPO) or "relu"
        activation="tanh",
        encoder=_encoder(),
        # Box actions: log std is a learned parameter, independent of the observation
        init_log_std=-0.5,
        # normalize observations by running mean/std (gymnasium's NormalizeObservation), clipped to
        # +-obs_clip; the statistics live in the model, so every checkpoint carries them
        obs_norm=False,
        obs_clip=10.0,
        # Box actions: the Gaussian's mean tanh-squashed into the space's bounds (true), or linear (false, SB3's
        # PPO: the env clips each action to the bounds); the std is exp(init_log_std...) times half the range
        squash_mean=True,
        # gSDE (Box actions): noise linear in the actor's last hidden features, its (features x actions) log std
        # learned from init_log_std; new noise matrices every sde_sample_freq collect steps (<= 0: once)
        use_sde=False,
        sde_sample_freq=-1,
        # orthogonal weights (gain sqrt(2); actor head 0.01, critic head 1), zero biases: CleanRL's layer_init
        orthogonal_init=False,
        # memory (policy/nets.py): null, or dict(type="lstm" | "gru", hidden_size=H[, shared=False]): a core after
        # the encoder, one LSTM for the actor and one for the critic (shared=True: one for both); the collectors
        # carry its state per env lane and store it with every row
        recurrent=None,
    )


def _actor_critic_eval() -> dict:
    return dict(
        # the evaluator's actions drawn from the policy (true; gymnax-blines' evaluation) instead of the most
        # likely one / the mean (false): a greedy policy on a deterministic env repeats one episode (with
        # model.use_sde the draw is the collectors' current noise matrices)
        sample=False,
    )


def ppo_default_config() -> EasyDict:
    """PPO (Schulman et al. 2017), DI-engine's key names."""
    return EasyDict(
        **_common("ppo", on_policy=True),
        # the on-policy data flow (parallel_rl.data.flows): "segments" (synchronous: collectors wait for each
        # version) or "async" (collectors never wait for a version, only for room in the learner's queue; rows
        # within max_staleness versions, each trained on once)
        flow="segments",
        model=_actor_critic(),
        discount_factor=0.99,
        nstep=1,
        learn=dict(
            # epochs over each collected segment (DI-engine: epoch_per_collect)
            epoch_per_collect=10,
            batch_size=64,
            learning_rate=3e-4,
            clip_ratio=0.2,
            value_weight=0.5,
            entropy_weight=0.0,
            # clip the value loss around the collected value like the policy ratio
            value_clip=False,
            adv_norm=True,
            max_grad_norm=0.5,
            gae_lambda=0.95,
            # unused by PPO; kept so a shared pipeline may read it
            update_per_collect=1,
            # scale rewards by the running std of the discounted return (gymnasium's NormalizeReward), then
            # clip to +-reward_clip; the statistics are kept by the learner (see docs/protocol.md)
            reward_norm=False,
            reward_clip=10.0,
            # anneal the learning rate linearly to 0 over this many env steps trained on (0: constant;
            # CleanRL anneals over the whole run)
            lr_anneal_env_steps=0,
            # Adam's epsilon (SB3's and CleanRL's PPO: 1e-5)
            adam_eps=1e-8,
            # anneal clip_ratio linearly to 0 over lr_anneal_env_steps too (RL Zoo's clip_range: lin_0.2)
            clip_anneal=False,
            # with model.recurrent: each lane's rows are cut into sequences of this many steps, the core re-run
            # over each from its stored starting state; a minibatch holds as many whole sequences as make
            # batch_size rows on average
            unroll_len=32,
        ),
        collect=dict(n_sample=512),
        eval=_actor_critic_eval(),
        other=dict(),
    )


def _vtrace_learn() -> dict:
    """The learn keys IMPALA and APPO share (PPO's minibatch loop and normalisation, V-trace's truncation)."""
    return dict(
        # V-trace's truncation of the importance weights pi/mu: rho_bar in the targets' TD errors and the
        # policy-gradient advantage, c_bar in the traces (Espeholt et al. 2018; 1.0 in the paper, Sample
        # Factory and RLlib)
        rho_bar=1.0,
        c_bar=1.0,
        # the paper's lambda in the traces, c_t = lambda * min(c_bar, ratio) (its section 4.1 remark; DI-engine's
        # IMPALA key): 1.0 is plain V-trace; lower trades bias for less variance, as GAE's lambda does for PPO
        lambda_=1.0,
        value_weight=0.5,
        adv_norm=False,
        # unused; kept so a shared pipeline may read it
        update_per_collect=1,
        reward_norm=False,
        reward_clip=10.0,
        lr_anneal_env_steps=0,
        # with model.recurrent: the sequences' length (see PPO's)
        unroll_len=32,
    )


def impala_default_config() -> EasyDict:
    """IMPALA (Espeholt et al. 2018): V-trace actor-critic. RLlib's IMPALA defaults (lr 5e-4, vf_loss_coeff
    0.5, entropy_coeff 0.01, grad_clip 40, one SGD pass over each train batch of 500 env steps as one
    minibatch, V-trace clip thresholds 1.0); the actor-critic is PPO's."""
    learn = _vtrace_learn()
    learn.update(epoch_per_collect=1, batch_size=500, learning_rate=5e-4, entropy_weight=0.01, max_grad_norm=40.0)
    return EasyDict(
        **_common("impala", on_policy=True),
        # the data flow (parallel_rl.data.flows): asynchronous rollouts, each row trained on with its behaviour
        # policy's logp
        flow="async",
        model=_actor_critic(),
        discount_factor=0.99,
        nstep=1,
        learn=learn,
        collect=dict(n_sample=500),
        eval=_actor_critic_eval(),
        other=dict(),
    )


def appo_default_config() -> EasyDict:
    """APPO: PPO's clipped surrogate on V-trace targets. Sample Factory's defaults (learning_rate 1e-4,
    ppo_clip_ratio 0.1, value_loss_coeff 0.5, exploration_loss_coeff 0.003, max_grad_norm 4, one epoch of
    one 1,024-row minibatch, normalized advantages, vtrace_rho = vtrace_c = 1)."""
    learn = _vtrace_learn()
    learn.update(epoch_per_collect=1, batch_size=1024, learning_rate=1e-4, clip_ratio=0.1, entropy_weight=0.003,
                 max_grad_norm=4.0, adv_norm=True,
                 # clip the value loss around the collected value like the policy ratio (PPO's key)
                 value_clip=False)
    return EasyDict(
        **_common("appo", on_policy=True),
        flow="async",  # see impala_default_config
        model=_actor_critic(),
        discount_factor=0.99,
        nstep=1,
        learn=learn,
        collect=dict(n_sample=1024),
        eval=_actor_critic_eval(),
        other=dict(),
    )


def sac_default_config() -> EasyDict:
    """SAC (Haarnoja et al. 2018) with twin Q and automatic temperature, DI-engine's key names."""
    return EasyDict(
        **_common("sac", on_policy=False),
        **_off_policy(),
        model=dict(actor_hidden_size_list=[256, 256], critic_hidden_size_list=[256, 256]),
        discount_factor=0.99,
        nstep=1,
        learn=dict(
            update_per_collect=1,
            batch_size=256,
            learning_rate_q=1e-3,
            learning_rate_policy=1e-3,
            learning_rate_alpha=1e-3,
            # Polyak factor of the target critics
            target_theta=0.005,
            init_alpha=0.2,
            auto_alpha=True,
            # target entropy per action dimension (-1: the usual -dim(A))
            target_entropy_per_dim=-1.0,
            # on CUDA, each update replays a recorded CUDA graph (policy/graphs.py); no effect on the CPU
            cuda_graph=True,
        ),
        collect=dict(n_sample=8),
        eval=dict(),
        other=dict(),
    )


def td3_default_config() -> EasyDict:
    """TD3 (Fujimoto et al. 2018): CleanRL's td3_continuous_action defaults."""
    return EasyDict(
        **_common("td3", on_policy=False),
        **_off_policy(),
        model=dict(actor_hidden_size_list=[256, 256], critic_hidden_size_list=[256, 256]),
        discount_factor=0.99,
        nstep=1,
        learn=dict(
            update_per_collect=1,
            batch_size=256,
            learning_rate_actor=3e-4,
            learning_rate_critic=3e-4,
            # Polyak factor of the target actor and critics
            target_theta=0.005,
            # the actor and the targets move every policy_delay critic updates (delayed policy updates)
            policy_delay=2,
            # target policy smoothing: N(0, policy_noise) clipped to +-noise_clip, in the [-1, 1] action scale
            policy_noise=0.2,
            noise_clip=0.5,
            # on CUDA, each update replays a recorded CUDA graph (policy/graphs.py); no effect on the CPU
            cuda_graph=True,
        ),
        # collectors act with the actor's action plus N(0, exploration_noise) ([-1, 1] action scale)
        collect=dict(n_sample=8, exploration_noise=0.1),
        eval=dict(),
        other=dict(),
    )


POLICY_DEFAULTS = {"dqn": dqn_default_config, "r2d2": r2d2_default_config, "ppo": ppo_default_config,
                   "sac": sac_default_config,
                   "td3": td3_default_config, "impala": impala_default_config, "appo": appo_default_config}
# which action spaces each policy type trains on
POLICY_ACTION_SPACES = {"dqn": ("discrete",), "r2d2": ("discrete",), "ppo": ("discrete", "box"), "sac": ("box",),
                        "td3": ("box",),
                        "impala": ("discrete", "box"), "appo": ("discrete", "box")}


# policy.learn.optimizer (DQN, R2D2): policy/optim.py's make_optimizer (checked by compile_config)
OPTIMIZERS = ("adam", "rmsprop")
