"""CartPole-v1 DQN, serial pipeline: ``parallel-rl serial -c configs/cartpole_dqn.py``."""

main_config = dict(
    exp_name="cartpole_dqn",
    env=dict(
        env_id="CartPole-v1",
    ),
    serial=dict(max_env_step=200_000),
)
