"""Pendulum-v1 APPO (continuous actions), serial pipeline: ``parallel-rl serial -c configs/pendulum_appo.py``.

PPO's Pendulum settings (``pendulum_ppo.py``: a short horizon, gamma 0.9, 2,048-step segments, 256-row
minibatches, learning rate 1e-3, clip 0.2) on APPO's V-trace targets (rho_bar = c_bar = 1: the paper's,
Sample Factory's and RLlib's).
"""

main_config = dict(
    exp_name="pendulum_appo",
    env=dict(
        env_id="Pendulum-v1",
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=-250,
    ),
    policy=dict(
        type="appo",
        # a short horizon: Pendulum's reward is dense and the swing-up takes ~100 steps
        discount_factor=0.9,
        learn=dict(
            epoch_per_collect=10,
            batch_size=256,
            learning_rate=1e-3,
            clip_ratio=0.2,
            entropy_weight=0.0,
            max_grad_norm=0.5,
        ),
        collect=dict(n_sample=2048),
        eval=dict(evaluator=dict(eval_freq=5)),
    ),
    serial=dict(max_env_step=300_000),
)
