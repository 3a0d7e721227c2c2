"""Recurrent PPO (LSTM) on Pendulum-v1 with its angular velocity masked, serial pipeline:
``parallel-rl serial -c configs/pendulum_novel_ppo_lstm.py``.

``env.mask_velocity=True`` zeroes the angular velocity (RL Zoo's ``PendulumNoVel-v1``): the policy sees cos and
sin of the angle only. The settings are RL Zoo's ``hyperparams/ppo_lstm.yml`` for ``PendulumNoVel-v1``
(sb3-contrib's RecurrentPPO, ``MlpLstmPolicy``), as its trained agent's card lists them: 4 envs x ``n_steps`` 1024
= 4096 rows a segment, ``n_epochs`` 10, ``gamma`` 0.9, ``gae_lambda`` 0.95, ``ent_coef`` 0, ``learning_rate``
1e-3, ``clip_range`` 0.2, ``normalize: {norm_obs: true, norm_reward: false}`` (``model.obs_norm``),
``policy_kwargs`` ``lstm_hidden_size=64, enable_critic_lstm=True, net_arch=[dict(pi=[64], vf=[64])],
activation_fn=nn.ReLU, ortho_init=False``, ``use_sde: true, sde_sample_freq: 4`` (gSDE, ``model.use_sde``,
policy/gsde.py), and RecurrentPPO's defaults: ``batch_size`` 128 (four sequences of 32), ``vf_coef`` 0.5,
``max_grad_norm`` 0.5, normalized advantages, Adam's eps 1e-5, ``log_std_init`` 0, and SB3's linear mean
with the action clipped to the bounds by the env (``squash_mean=False``). Differences: our std is scaled by half
the action range (2), so twice SB3's in the env's units at the same ``log_std_init``; sequences are cut every 32
rows (``unroll_len``; SB3's minibatches of 128 consecutive rows run the LSTM over up to 128).
Measured while choosing (serial, 100k env steps, seeds 0-4, best eval >= -220): with a tanh-squashed mean 2 of 5
solved (with gSDE; without gSDE seed 0 reached -537), with the linear mean 5 of 5 (README's benchmark table).
RL Zoo's result: -217.9 +- 140 at 1e5 steps (``benchmark.md``).
"""

main_config = dict(
    exp_name="pendulum_novel_ppo_lstm",
    env=dict(
        env_id="Pendulum-v1",
        mask_velocity=True,
        collector_env_num=4,
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=-220,
    ),
    policy=dict(
        type="ppo",
        model=dict(
            hidden_size_list=[64],
            activation="relu",
            obs_norm=True,
            init_log_std=0.0,
            squash_mean=False,
            use_sde=True,
            sde_sample_freq=4,
            recurrent=dict(type="lstm", hidden_size=64),
        ),
        discount_factor=0.9,
        learn=dict(
            batch_size=128,
            learning_rate=1e-3,
            value_weight=1.0,  # SB3's vf_coef 0.5 (its loss: vf_coef * mse; ours: value_weight * 0.5 * mse)
            adam_eps=1e-5,
        ),
        collect=dict(n_sample=4096),
        eval=dict(evaluator=dict(eval_freq=2)),
    ),
    serial=dict(max_env_step=100_000),
)
