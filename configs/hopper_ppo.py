"""Hopper-v5 PPO, serial pipeline: ``parallel-rl serial -c configs/hopper_ppo.py``.

Hyperparameters of CleanRL's ``ppo_continuous_action.py`` (RL Zoo's MuJoCo PPO is close): segments of
2048 env steps, 10 epochs of minibatches of 64, Adam at 3e-4 annealed linearly to 0 over the 1M-step run,
gamma 0.99, GAE lambda 0.95, clip 0.2, value loss clipped, no entropy bonus, gradient norm 0.5,
normalized advantages, 64x64 tanh networks with orthogonal initialisation, observations normalized by
running statistics (clipped at 10), rewards scaled by the running std of the discounted return (clipped at
10). Differences: our Gaussian's mean is squashed into the action bounds (CleanRL clips the sampled action
only) and the log std starts at 0 as CleanRL's. ``configs/hopper_ppo_parallel.py`` runs it as a cluster.
"""

main_config = dict(
    exp_name="hopper_ppo",
    env=dict(
        env_id="Hopper-v5",
        collector_env_num=1,
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=None,  # no stop value: trains to its budget, then exits 0
    ),
    policy=dict(
        type="ppo",
        model=dict(init_log_std=0.0, obs_norm=True, orthogonal_init=True),
        learn=dict(
            lr_anneal_env_steps=1_000_000,
            value_clip=True,
            reward_norm=True,
        ),
        collect=dict(n_sample=2048),
        # one evaluation every 10 segments (20,480 env steps)
        eval=dict(evaluator=dict(eval_freq=10)),
    ),
    serial=dict(max_env_step=1_000_000),
)
