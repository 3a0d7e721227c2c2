"""CartPole-v1 IMPALA, serial pipeline: ``parallel-rl serial -c configs/cartpole_impala.py``.

IMPALA (``policy/impala.py``): a V-trace actor-critic. RLlib's CartPole example for IMPALA (Adam, learning
rate 5e-4, grad_clip 40 by global norm, entropy_coeff 0, train batches of 500 env steps, here 512 = 8 envs x
64 steps, one pass over each, here in minibatches of 128 rows) and RLlib's V-trace thresholds
rho_bar = c_bar = 1. RLlib's example weighs the value loss 0.05 with layers shared by actor and critic; the
networks here are separate, so the weight only scales the critic's gradient (0.5, RLlib's default).
"""
main_config = dict(
    exp_name="cartpole_impala",
    seed=0,
    env=dict(
        env_id="CartPole-v1",
        collector_env_num=8,
        evaluator_env_num=8,
        n_evaluator_episode=8,
        stop_value=195,
    ),
    policy=dict(
        type="impala",
        cuda=False,
        model=dict(hidden_size_list=[64, 64]),
        discount_factor=0.99,
        learn=dict(
            epoch_per_collect=1,
            batch_size=128,
            learning_rate=5e-4,
            value_weight=0.5,
            entropy_weight=0.0,
            max_grad_norm=40.0,
            rho_bar=1.0,
            c_bar=1.0,
        ),
        collect=dict(n_sample=512),
        eval=dict(evaluator=dict(eval_freq=2)),
    ),
    serial=dict(max_env_step=200_000),
)
