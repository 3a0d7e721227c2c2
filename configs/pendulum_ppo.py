"""Pendulum-v1 PPO (continuous actions), serial pipeline: ``parallel-rl serial -c configs/pendulum_ppo.py``."""

main_config = dict(
    exp_name="pendulum_ppo",
    env=dict(
        env_id="Pendulum-v1",
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=-400,
    ),
    policy=dict(
        type="ppo",
        # a short horizon: Pendulum's reward is dense and the swing-up takes ~100 steps
        discount_factor=0.9,
        learn=dict(
            batch_size=256,
            learning_rate=1e-3,
        ),
        collect=dict(n_sample=2048),
        eval=dict(evaluator=dict(eval_freq=5)),
    ),
    serial=dict(max_env_step=300_000),
)
