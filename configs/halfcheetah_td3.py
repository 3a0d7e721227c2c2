"""HalfCheetah-v5 TD3, serial pipeline: ``parallel-rl serial -c configs/halfcheetah_td3.py``.

Hyperparameters of CleanRL's ``td3_continuous_action.py`` (the TD3 authors' current settings): Adam at 3e-4,
batch 256, 256x256 networks, Polyak 0.005, gamma 0.99, policy delay 2, target policy noise 0.2 clipped at
0.5, exploration noise 0.1, one update per env step, uniform replay of 1M transitions; random warm-up of
10k env steps as in the TD3 paper's HalfCheetah runs (CleanRL uses 25k). Evaluation: 5 deterministic
episodes every 5,000 updates. ``configs/halfcheetah_td3_parallel.py`` runs it as a cluster.
"""

main_config = dict(
    exp_name="halfcheetah_td3",
    env=dict(
        env_id="HalfCheetah-v5",
        collector_env_num=1,
        evaluator_env_num=5,
        n_evaluator_episode=5,
        stop_value=None,  # no stop value: HalfCheetah trains to its budget, then exits 0
    ),
    policy=dict(
        type="td3",
        random_collect_size=10_000,
        collect=dict(n_sample=1),
        eval=dict(evaluator=dict(eval_freq=5000)),
        other=dict(replay_buffer=dict(type="naive", replay_buffer_size=1_000_000)),
    ),
    serial=dict(max_env_step=100_000),
)
