"""Recurrent PPO (LSTM) on CartPole-v1 with its velocities masked, on a local cluster:
``parallel-rl run -c configs/cartpole_novel_ppo_lstm_parallel.py``.

The algorithm settings are those of ``cartpole_novel_ppo_lstm.py`` (RL Zoo's ``CartPoleNoVel-v1``); this file
adds the cluster's, as ``cartpole_ppo_parallel.py`` does for PPO. Each collector carries its envs' LSTM states
from chunk to chunk and from policy version to policy version, storing with every row the state it acted with;
the learner cuts each chunk's lanes into sequences of ``unroll_len`` rows and re-runs the LSTM over them from
those stored states.
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "cartpole_novel_ppo_lstm.py"))["main_config"]
)
main_config["exp_name"] = "cartpole_novel_ppo_lstm_parallel"
# RL Zoo's 8 envs in all: 4 in each of `parallel-rl run`'s 2 collectors, so a segment is 8 lanes x 32 steps as in
# serial (with 8 envs each, 16 lanes x 16 steps, the masked task learned far slower: eval 24 by 38k env steps
# on the cluster, 44 by 22k serially with 16 envs, against 485 by 14k with 8)
main_config["env"]["collector_env_num"] = 4
del main_config["serial"]
main_config["policy"]["other"] = dict()
main_config["parallel"] = dict(
    commander=dict(
        collector_task_env_steps=2048,
        # one iteration is one segment of 256 rows: evaluate every 8th policy version (on a collector)
        eval_freq=8,
        max_env_step=100_000,
        max_seconds=1800.0,
    ),
    collector=dict(chunk_size=256),
)
