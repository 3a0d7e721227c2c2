"""Tic-tac-toe DQN self-play on the cluster: ``parallel-rl run -c configs/tictactoe_selfplay_parallel.py``.

Marine collectors play the training policy against the opponents the league
commander picks (itself, snapshots frozen every 400 policy versions, the
random and lookahead bots; PFSP); ``GET /api/v1/league`` shows the payoff
table. Evaluations (1,000 games per side against random, on a collector) stop
the run at the issue's target, as in ``configs/tictactoe_selfplay.py``.
"""

main_config = dict(
    exp_name="tictactoe_selfplay_parallel",
    env=dict(
        type="pettingzoo",
        env_id="pettingzoo.classic.tictactoe_v3",
        collector_env_num=16,
        n_evaluator_episode=1000,
        stop_value=0.7,
    ),
    policy=dict(
        model=dict(hidden_size_list=[128, 128]),
        discount_factor=0.9,
        learn=dict(batch_size=128, target_update_freq=200),
        collect=dict(n_sample=128),
        eval=dict(
            evaluator=dict(
                min_win_rate=dict(first=0.9),
                max_loss_rate=dict(first=0.0, second=0.05),
            )
        ),
        other=dict(
            eps=dict(start=0.9, decay=20000),
            replay_buffer=dict(type="naive", replay_buffer_size=50000),
        ),
    ),
    league=dict(
        snapshot_every=400,
        bots=["random", "lookahead"],
    ),
    parallel=dict(
        commander=dict(eval_freq=500, max_seconds=900.0, max_env_steps_per_update=32.0),
        collector=dict(chunk_size=256),
        learner=dict(publish_every=20),
    ),
)
