"""Recurrent PPO (LSTM) on Pendulum-v1 with its angular velocity masked, serial pipeline:
``parallel-rl serial -c configs/pendulum_novel_ppo_lstm.py``.

``env.mask_velocity=True`` zeroes the angular velocity (RL Zoo's ``PendulumNoVel-v1``): the policy sees cos and
sin of the angle only. The settings are RL Zoo's ``hyperparams/ppo_lstm.yml`` for ``PendulumNoVel-v1``
(sb3-contrib's RecurrentPPO, ``MlpLstmPolicy``): 4 envs x ``n_steps`` 1024 = 4096 rows a segment, ``n_epochs``
10, ``gamma`` 0.9, ``gae_lambda`` 0.95, ``ent_coef`` 0, ``learning_rate`` 1e-3, ``clip_range`` 0.2, SB3's
``batch_size`` 64 (two sequences of 32), an LSTM of 256 units with 64-64 tanh heads, orthogonal init. Not
mapped: ``use_sde`` (gSDE exploration, ``sde_sample_freq`` 4): the Gaussian here has a state-independent log
std (``init_log_std``); and RecurrentPPO's separate critic LSTM (one LSTM is shared here). RL Zoo's result:
-217.9 +- 140 at 1e5 steps (``benchmark.md``).
"""
main_config = dict(
    exp_name="pendulum_novel_ppo_lstm",
    seed=0,
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
        cuda=False,
        model=dict(hidden_size_list=[64, 64], orthogonal_init=True, init_log_std=-0.5,
                   recurrent=dict(type="lstm", hidden_size=256)),
        discount_factor=0.9,
        learn=dict(
            epoch_per_collect=10,
            batch_size=64,
            unroll_len=32,
            learning_rate=1e-3,
            clip_ratio=0.2,
            value_weight=1.0,  # SB3's vf_coef 0.5 (its loss: vf_coef * mse; ours: value_weight * 0.5 * mse)
            entropy_weight=0.0,
            value_clip=False,
            adv_norm=True,
            max_grad_norm=0.5,
            gae_lambda=0.95,
        ),
        collect=dict(n_sample=4096),
        eval=dict(evaluator=dict(eval_freq=2)),
    ),
    serial=dict(max_env_step=100_000),
)
