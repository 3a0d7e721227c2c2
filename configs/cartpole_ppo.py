"""CartPole-v1 PPO, serial pipeline: ``parallel-rl serial -c configs/cartpole_ppo.py``."""
main_config = dict(
    exp_name="cartpole_ppo",
    seed=0,
    env=dict(
        env_id="CartPole-v1",
        collector_env_num=8,
        evaluator_env_num=8,
        n_evaluator_episode=8,
        stop_value=195,
    ),
    policy=dict(
        type="ppo",
        cuda=False,
        model=dict(hidden_size_list=[64, 64]),
        discount_factor=0.99,
        learn=dict(
            epoch_per_collect=10,
            batch_size=128,
            learning_rate=1e-3,
            clip_ratio=0.2,
            value_weight=0.5,
            entropy_weight=0.0,
            value_clip=False,
            adv_norm=True,
            max_grad_norm=0.5,
            gae_lambda=0.95,
        ),
        # one segment per update: 8 envs x 64 steps
        collect=dict(n_sample=512),
        # one train iteration is one segment (its epochs of minibatches)
        eval=dict(evaluator=dict(eval_freq=2)),
    ),
    serial=dict(max_env_step=200_000),
)
