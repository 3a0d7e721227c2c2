"""Pendulum-v1 SAC, serial pipeline: ``parallel-rl serial -c configs/pendulum_sac.py``."""

main_config = dict(
    exp_name="pendulum_sac",
    env=dict(
        env_id="Pendulum-v1",
        collector_env_num=4,
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=-250,
    ),
    policy=dict(
        type="sac",
        model=dict(actor_hidden_size_list=[128, 128], critic_hidden_size_list=[128, 128]),
        learn=dict(
            update_per_collect=4,
            batch_size=128,
            learning_rate_alpha=3e-3,
        ),
        # 4 envs x 1 step, 4 updates: one update per env step
        collect=dict(n_sample=4),
        eval=dict(evaluator=dict(eval_freq=1000)),
        other=dict(replay_buffer=dict(replay_buffer_size=100_000)),
    ),
    serial=dict(max_env_step=30_000),
)
