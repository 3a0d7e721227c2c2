"""Tic-tac-toe DQN self-play, serial: ``parallel-rl serial -c configs/tictactoe_selfplay.py``.

The policy plays itself, a pool of its past snapshots and the random and
lookahead bots (PFSP); it is evaluated against the random bot from both sides
(1,000 games each) and stops at
the issue's target: never loses as first mover, wins >= 90 % as first mover,
loses <= 5 % as second mover (``env.stop_value``: the mean win rate of both sides).
"""

main_config = dict(
    exp_name="tictactoe_selfplay",
    env=dict(
        type="pettingzoo",
        env_id="pettingzoo.classic.tictactoe_v3",
        collector_env_num=16,
        # games per opponent and side at each evaluation (1,000 as in the target)
        n_evaluator_episode=1000,
        stop_value=0.7,
    ),
    policy=dict(
        model=dict(hidden_size_list=[128, 128]),
        discount_factor=0.9,
        learn=dict(update_per_collect=8, batch_size=128, target_update_freq=200),
        collect=dict(n_sample=128),
        eval=dict(
            evaluator=dict(
                eval_freq=1000,
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
    serial=dict(max_env_step=1_000_000, max_seconds=1200),
)
