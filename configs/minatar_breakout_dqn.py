"""MinAtar Breakout DQN, serial pipeline: ``parallel-rl serial -c configs/minatar_breakout_dqn.py``.

Young & Tian 2019 (MinAtar, arXiv:1903.03176; their ``examples/dqn.py``): the MinAtar network (one 16-filter
3x3 conv, stride 1, ReLU; a ReLU layer of 128; a linear Q head: ``encoder.type="minatar"``, no further hidden
layers, not dueling), batch 32, uniform replay of 100k transitions, target network copied every 1,000
updates, epsilon annealed linearly 1.0 -> 0.1 over the first 100k env steps, one update per env step after
5,000 env steps of random actions (their REPLAY_START_SIZE), gamma 0.99, 1-step targets, Huber loss, no
gradient clipping, single (not double) DQN. Theirs steps one env; here 4 envs and 4 updates per 4 steps
keep the ratio at one update per env step. Differences: they use centered RMSprop (lr 2.5e-4, alpha 0.95,
eps 0.01, no momentum: ``policy.learn.optimizer="rmsprop"``, which ``minatar_freeway_dqn.py`` takes); this
config steps Adam, at 1e-4 (the rate Obando-Ceron & Castro 2021, "Revisiting Rainbow", train DQN on MinAtar
with), with which its Breakout and SpaceInvaders figures were measured; our epsilon counts the 5,000 random
steps too (annealed by env step 100k, theirs by 105k). Env: MinAtar's ``-v1`` ids (minimal action set: 3
actions in Breakout; ``-v0`` has all 6, as their paper's runs) with MinAtar's defaults (sticky actions 0.1,
difficulty ramping on).

Other games: ``--set env.env_id=MinAtar/SpaceInvaders-v1 --set 'policy.model.encoder.shape=[10,10,6]'``
(channels: Asterix 4, Breakout 4, Freeway 7, Seaquest 10, SpaceInvaders 6). References at 1M env steps
(their figures, returns over training episodes): Breakout ~9, SpaceInvaders ~31, Freeway ~48 (Freeway:
``minatar_freeway_dqn.py``, with their optimizer and action set).
``configs/minatar_breakout_dqn_parallel.py`` runs it as a cluster.
"""

main_config = dict(
    exp_name="minatar_breakout_dqn",
    env=dict(
        env_id="MinAtar/Breakout-v1",
        # minatar 1.0.15 registers its ids with gymnasium only when asked: env.import_names does it
        import_names=["minatar"],
        collector_env_num=4,
        stop_value=None,  # no stop value: trains to its budget, then exits 0
    ),
    policy=dict(
        type="dqn",
        model=dict(hidden_size_list=[], dueling=False, encoder=dict(type="minatar", shape=[10, 10, 4])),
        nstep=1,
        random_collect_size=5000,
        learn=dict(batch_size=32, learning_rate=1e-4, target_update_freq=1000, double=False, max_grad_norm=0.0),
        collect=dict(n_sample=4),
        # one evaluation every 25,000 updates (25,000 env steps)
        eval=dict(evaluator=dict(eval_freq=25_000)),
        other=dict(
            eps=dict(type="linear", start=1.0, end=0.1, decay=100_000),
            replay_buffer=dict(type="naive", replay_buffer_size=100_000),
        ),
    ),
    serial=dict(max_env_step=1_000_000),
)
