"""Tic-tac-toe PPO self-play, serial: ``parallel-rl serial -c configs/tictactoe_selfplay_ppo.py``.

The game, the evaluation (1,000 games per side against the random bot, the issue's target as the stop
rule) and the league's opponents are those of ``tictactoe_selfplay.py``; this file trains PPO instead
of DQN. The masked Categorical policy (illegal moves get probability 0 when it collects, is evaluated
and learns) plays itself, its past snapshots and the random and lookahead bots (PFSP). Each collect is
one on-policy segment: every row the trained player(s) completed, GAE over each player's own moves.
One learner iteration is one segment, so snapshots and evaluations are counted in segments.
"""

import copy
import os
import runpy

_dqn = runpy.run_path(os.path.join(os.path.dirname(__file__), "tictactoe_selfplay.py"))["main_config"]
main_config = copy.deepcopy(_dqn)
main_config["exp_name"] = "tictactoe_selfplay_ppo"
main_config["policy"] = dict(
    type="ppo",
    model=dict(hidden_size_list=[128, 128]),
    learn=dict(epoch_per_collect=4, batch_size=256, learning_rate=1e-3, entropy_weight=0.01),
    # rows per trained player and segment (self-play trains both players: twice this)
    eval=dict(evaluator={**_dqn["policy"]["eval"]["evaluator"], "eval_freq": 40}),
)
main_config["league"]["snapshot_every"] = 20  # segments
main_config["serial"] = dict(max_env_step=3_000_000, max_seconds=1200)
