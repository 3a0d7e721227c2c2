"""MinAtar Breakout PPO, serial pipeline: ``parallel-rl serial -c configs/minatar_breakout_ppo.py``.

gymnax-blines' PPO for MinAtar (``agents/Breakout-MinAtar/ppo.yaml``; its learning curves, ``docs/lcurves.png``,
are the source of the 1M-step references: Breakout ~16 and SpaceInvaders ~50 at lr 5e-4, Breakout ~19-20 at lr
1e-3) on gymnax's MinAtar semantics: 64 envs x 128 steps a segment (8,192 env steps), 4 epochs of 8 minibatches
(1,024 rows), gamma 0.999, GAE lambda 0.95, clip 0.2 for the ratio and the value (``value_clip``), value loss
weight 0.5, entropy bonus 0.01, gradient norm 0.5, advantages normalized per minibatch, Adam's epsilon 1e-5
(optax's scale_by_adam there), their network: separate actor and critic MLPs of two ReLU layers of 256 over the
flattened board (``flatten_3d``; the MinAtar conv is one ``--set policy.model.encoder.type=minatar --set
policy.model.hidden_size_list=[]`` away), and evaluations that sample actions (``policy.eval.sample``; theirs
average 164 sampled episodes, here 32).

Env: MinAtar's ``-v1`` ids (minimal action set, as gymnax's ports) with gymnax's semantics: no sticky actions and
episodes cut at 1,000 steps (``env.env_kwargs``; MinAtar's own defaults are sticky actions 0.1 and no cap: drop
the two keys for them). Without sticky actions the games are deterministic but for the start, and PPO here
settles into a fixed play: at their lr 5e-4 and torch's default initialisation every sampled Breakout episode
of the final policy broke exactly 7 bricks (1M env steps, serial seed 0); orthogonal initialisation
(``model.orthogonal_init``: CleanRL's, a near-uniform first policy) gave 11-12, and lr 1e-3 (the other rate of
gymnax-blines' sweep) 21-26 from 330k env steps on. Those two are set here.
"""

main_config = dict(
    exp_name="minatar_breakout_ppo",
    env=dict(
        env_id="MinAtar/Breakout-v1",
        import_names=["minatar"],
        collector_env_num=64,
        n_evaluator_episode=32,
        stop_value=None,  # no stop value: trains to its budget, then exits 0
        # gymnax's MinAtar: no sticky actions, 1,000-step episodes (evaluations too)
        env_kwargs=dict(sticky_action_prob=0.0, max_episode_steps=1000),
    ),
    policy=dict(
        type="ppo",
        model=dict(
            hidden_size_list=[256, 256], encoder=dict(shape=[10, 10, 4]), activation="relu", orthogonal_init=True
        ),
        discount_factor=0.999,
        learn=dict(
            epoch_per_collect=4,
            batch_size=1024,
            learning_rate=1e-3,
            adam_eps=1e-5,
            entropy_weight=0.01,
            value_clip=True,
        ),
        # one segment per update: 64 envs x 128 steps
        collect=dict(n_sample=8192),
        # one evaluation every 10 segments (81,920 env steps)
        eval=dict(evaluator=dict(eval_freq=10), sample=True),
    ),
    serial=dict(max_env_step=1_000_000),
)
