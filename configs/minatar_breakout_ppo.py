"""MinAtar Breakout PPO, serial pipeline: ``parallel-rl serial -c configs/minatar_breakout_ppo.py``.

gymnax-blines' PPO settings for MinAtar (``agents/Breakout-MinAtar/ppo.yaml``, the source of its 1M-step
reference, Breakout 16.6 and SpaceInvaders 50.4): 64 envs x 128 steps a segment (8,192 env steps), 4 epochs
of 8 minibatches (1,024 rows), Adam at 5e-4, gamma 0.999, GAE lambda 0.95, clip 0.2, value loss weight 0.5
(clipped around the collected value), entropy bonus 0.01, gradient norm 0.5, normalized advantages, and
their network: the flattened board through two hidden layers of 256 (``flatten_3d``; the MinAtar conv is one
``--set policy.model.encoder.type=minatar --set policy.model.hidden_size_list=[]`` away). Differences: their
hidden layers are ReLU, PPO's here tanh; their learning rate warms up over the first 5% of updates, ours
starts at 5e-4; their actor and critic share no layers, as ours. Env: MinAtar's ``-v1`` ids (minimal action
set, as gymnax's MinAtar ports) with MinAtar's defaults (sticky actions 0.1).
"""
main_config = dict(
    exp_name="minatar_breakout_ppo",
    seed=0,
    env=dict(
        env_id="MinAtar/Breakout-v1",
        import_names=["minatar"],
        collector_env_num=64,
        evaluator_env_num=8,
        n_evaluator_episode=16,
        stop_value=100_000,  # no stop: runs to its budget
    ),
    policy=dict(
        type="ppo",
        model=dict(hidden_size_list=[256, 256], encoder=dict(type="mlp", shape=[10, 10, 4])),
        discount_factor=0.999,
        learn=dict(
            epoch_per_collect=4,
            batch_size=1024,
            learning_rate=5e-4,
            clip_ratio=0.2,
            value_weight=0.5,
            entropy_weight=0.01,
            value_clip=True,
            adv_norm=True,
            max_grad_norm=0.5,
            gae_lambda=0.95,
        ),
        # one segment per update: 64 envs x 128 steps
        collect=dict(n_sample=8192),
        # one evaluation every 10 segments (81,920 env steps)
        eval=dict(evaluator=dict(eval_freq=10)),
    ),
    serial=dict(max_env_step=1_000_000),
)
