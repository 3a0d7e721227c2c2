"""CartPole-v1 DQN, serial pipeline: ``parallel-rl serial -c configs/cartpole_dqn.py``."""
main_config = dict(
    exp_name="cartpole_dqn",
    seed=0,
    env=dict(
        env_id="CartPole-v1",
        collector_env_num=8,
        evaluator_env_num=8,
        n_evaluator_episode=8,
        stop_value=195,
    ),
    policy=dict(
        model=dict(hidden_size_list=[128, 128, 64], dueling=True),
        discount_factor=0.99,
        nstep=3,
        learn=dict(update_per_collect=4, batch_size=64, learning_rate=1e-3, target_update_freq=100),
        collect=dict(n_sample=64),
        eval=dict(evaluator=dict(eval_freq=200)),
        other=dict(
            eps=dict(type="exp", start=0.95, end=0.05, decay=5000),
            replay_buffer=dict(type="advanced", replay_buffer_size=20000),
        ),
    ),
    serial=dict(max_env_step=200_000),
)
