"""Atari Pong DQN on a local cluster: ``parallel-rl run -c configs/pong_dqn_parallel.py``.

The algorithm and env settings are ``pong_dqn.py``'s (tianshou's Atari DQN); this file adds the cluster's: one
update per 10 env steps (collectors wait for the learner past ``random_collect_size + 10 * train_iter`` env
steps), chunks of 640 rows (each 84x84 frame stored once, ``parallel_rl.data.frames``: a chunk also holds each
lane's k - 1 older frames and the n - 1 frames its last rows look ahead, ~40 frames for 10 lanes, 6 % of 640
rows), an evaluation every 50,000 updates.
"""

import copy
import os
import runpy

main_config = copy.deepcopy(runpy.run_path(os.path.join(os.path.dirname(__file__), "pong_dqn.py"))["main_config"])
main_config["exp_name"] = "pong_dqn_parallel"
del main_config["serial"]
main_config["parallel"] = dict(
    commander=dict(
        collector_task_env_steps=10_000,
        eval_freq=50_000,
        # the serial replay ratio: 0.1 update per env step
        max_env_steps_per_update=10.0,
        allowance_grant=64,
        max_env_step=10_000_000,
    ),
    collector=dict(chunk_size=640, flush_interval=0.5),
    # the cache holds chunk_cache_size x chunk_size rows of single frames (~7.5 KB a row)
    learner=dict(publish_every=100, max_updates_per_transition=0.1, chunk_cache_size=128),
)
