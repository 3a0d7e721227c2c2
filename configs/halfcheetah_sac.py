"""HalfCheetah-v5 SAC, serial pipeline: ``parallel-rl serial -c configs/halfcheetah_sac.py``.

Hyperparameters of RL Zoo's ``hyperparams/sac.yml`` for HalfCheetah (Stable-Baselines3's SAC defaults plus
``learning_starts: 10000``): Adam at 3e-4 for the critics, the actor and the temperature, batch 256, 256x256
networks, Polyak 0.005, gamma 0.99, one update per env step, temperature tuned to an entropy of -dim(A)
starting at 1.0, uniform replay of 1M transitions, 10k env steps of random actions first. Evaluation: 5
deterministic episodes every 5,000 updates. ``configs/halfcheetah_sac_parallel.py`` runs it as a cluster.
"""

main_config = dict(
    exp_name="halfcheetah_sac",
    env=dict(
        env_id="HalfCheetah-v5",
        collector_env_num=1,
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=None,  # no stop value: HalfCheetah trains to its budget, then exits 0
    ),
    policy=dict(
        type="sac",
        random_collect_size=10_000,
        learn=dict(
            learning_rate_q=3e-4,
            learning_rate_policy=3e-4,
            learning_rate_alpha=3e-4,
            init_alpha=1.0,
        ),
        collect=dict(n_sample=1),
        eval=dict(evaluator=dict(eval_freq=5000)),
        other=dict(replay_buffer=dict(type="naive", replay_buffer_size=1_000_000)),
    ),
    serial=dict(max_env_step=100_000),
)
