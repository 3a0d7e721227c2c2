"""Pendulum-v1 TD3, serial pipeline: ``parallel-rl serial -c configs/pendulum_td3.py``.

CleanRL's td3_continuous_action settings (Adam 3e-4, batch 256, policy delay 2, target noise 0.2 clipped at
0.5, exploration noise 0.1) with smaller networks and 1,000 random warm-up steps for this small task.
"""

main_config = dict(
    exp_name="pendulum_td3",
    env=dict(env_id="Pendulum-v1", collector_env_num=4, evaluator_env_num=5, n_evaluator_episode=5, stop_value=-250),
    policy=dict(
        type="td3",
        model=dict(actor_hidden_size_list=[128, 128], critic_hidden_size_list=[128, 128]),
        random_collect_size=1000,
        learn=dict(update_per_collect=4, batch_size=128, learning_rate_actor=1e-3, learning_rate_critic=1e-3),
        # 4 envs x 1 step, 4 updates: one update per env step
        collect=dict(n_sample=4),
        eval=dict(evaluator=dict(eval_freq=1000)),
        other=dict(replay_buffer=dict(type="naive", replay_buffer_size=100_000)),
    ),
    serial=dict(max_env_step=30_000),
)
