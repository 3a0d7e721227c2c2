"""CartPole-v1 APPO, serial pipeline: ``parallel-rl serial -c configs/cartpole_appo.py``.

APPO (``policy/appo.py``): PPO's clipped surrogate on V-trace advantages, value targets v_s. The defaults
(``policy/defaults.py``) are Sample Factory's, made for large asynchronous batches; CartPole in one process
learns faster with PPO's CartPole settings (``cartpole_ppo.py``: clip 0.2, learning rate 1e-3, 128-row
minibatches) and fewer epochs: the learner's policy moves during the epochs over one segment, and V-trace's
truncated importance weights (rho_bar = c_bar = 1, the paper's, Sample Factory's and RLlib's) correct for it.
V-trace's lambda stays 1.0 (``learn.lambda_``): 0.95, PPO's GAE lambda, solved later with 16 latency-bound
collectors (``benchmarks/async.py``'s runs to 195, seeds 0-7: median 28.5k env steps against 21.2k).
"""

main_config = dict(
    exp_name="cartpole_appo",
    env=dict(
        env_id="CartPole-v1",
    ),
    policy=dict(
        type="appo",
        learn=dict(
            epoch_per_collect=4,
            batch_size=128,
            learning_rate=1e-3,
            clip_ratio=0.2,
            entropy_weight=0.0,
            max_grad_norm=0.5,
        ),
        # one segment per update: 8 envs x 64 steps
        collect=dict(n_sample=512),
        eval=dict(evaluator=dict(eval_freq=2)),
    ),
    serial=dict(max_env_step=200_000),
)
