"""Atari Pong PPO on a local cluster: ``parallel-rl run -c configs/pong_ppo_parallel.py``.

``pong_ppo.py``'s settings (CleanRL's Atari PPO) with the cluster's: synchronous segments (the learner trains
on each segment of its current policy version once), chunks of 1,024 rows, an evaluation every 100 segments.
"""

import copy
import os
import runpy

main_config = copy.deepcopy(runpy.run_path(os.path.join(os.path.dirname(__file__), "pong_ppo.py"))["main_config"])
main_config["exp_name"] = "pong_ppo_parallel"
del main_config["serial"]
main_config["policy"]["other"] = dict()
main_config["parallel"] = dict(
    commander=dict(collector_task_env_steps=8192, eval_freq=100, max_env_step=10_000_000),
    collector=dict(flush_interval=0.5),
    learner=dict(chunk_cache_size=16),
)
