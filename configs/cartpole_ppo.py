"""CartPole-v1 PPO, serial pipeline: ``parallel-rl serial -c configs/cartpole_ppo.py``."""

main_config = dict(
    exp_name="cartpole_ppo",
    env=dict(
        env_id="CartPole-v1",
    ),
    policy=dict(
        type="ppo",
        learn=dict(
            batch_size=128,
            learning_rate=1e-3,
        ),
        # one segment per update: 8 envs x 64 steps
        # one train iteration is one segment (its epochs of minibatches)
        eval=dict(evaluator=dict(eval_freq=2)),
    ),
    serial=dict(max_env_step=200_000),
)
