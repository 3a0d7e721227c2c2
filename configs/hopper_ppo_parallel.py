"""Hopper-v5 PPO on a local cluster: ``parallel-rl run -c configs/hopper_ppo_parallel.py --collectors 2``.

The algorithm settings are those of ``hopper_ppo.py`` (CleanRL's); this file adds the cluster's, as
``cartpole_ppo_parallel.py`` does: the collectors together collect one 2048-step segment per policy version
(each its share), the learner trains on it once and publishes the next version with the observation
statistics it has gathered so far (collectors and evaluators act with those, frozen).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(runpy.run_path(os.path.join(os.path.dirname(__file__), "hopper_ppo.py"))["main_config"])
main_config["exp_name"] = "hopper_ppo_parallel"
del main_config["serial"]
main_config["policy"]["other"] = dict()
main_config["parallel"] = dict(
    commander=dict(
        collector_task_env_steps=20_480,
        # one iteration is one segment: evaluate every 10 versions (20,480 env steps)
        eval_freq=10,
        max_env_step=1_000_000,
    ),
)
