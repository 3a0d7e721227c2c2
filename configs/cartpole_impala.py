"""CartPole-v1 IMPALA, serial pipeline: ``parallel-rl serial -c configs/cartpole_impala.py``.

IMPALA (``policy/impala.py``): a V-trace actor-critic. RLlib's CartPole example for IMPALA (Adam, learning
rate 5e-4, grad_clip 40 by global norm, entropy_coeff 0, train batches of 500 env steps, here 512 = 8 envs x
64 steps, one pass over each, here in minibatches of 128 rows) and RLlib's V-trace thresholds
rho_bar = c_bar = 1. RLlib's example weighs the value loss 0.05 with layers shared by actor and critic; the
networks here are separate, so the weight only scales the critic's gradient (0.5, RLlib's default).
"""

main_config = dict(
    exp_name="cartpole_impala",
    env=dict(
        env_id="CartPole-v1",
    ),
    policy=dict(
        type="impala",
        learn=dict(
            batch_size=128,
            entropy_weight=0.0,
        ),
        collect=dict(n_sample=512),
        eval=dict(evaluator=dict(eval_freq=2)),
    ),
    serial=dict(max_env_step=200_000),
)
