"""MinAtar Breakout PPO on a local cluster: ``parallel-rl run -c configs/minatar_breakout_ppo_parallel.py``.

The algorithm settings are those of ``minatar_breakout_ppo.py`` (gymnax-blines' MinAtar PPO); this file adds the
cluster's, as ``cartpole_ppo_parallel.py`` does: the two collectors (``run``'s default) of 32 envs each together
collect one 8,192-step segment per policy version (each 32 envs x 128 steps: gymnax-blines' 64 x 128), the
learner trains on it once and publishes the next version; an evaluation every 10 versions (81,920 env steps).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "minatar_breakout_ppo.py"))["main_config"]
)
main_config["exp_name"] = "minatar_breakout_ppo_parallel"
del main_config["serial"]
main_config["env"]["collector_env_num"] = 32
main_config["policy"]["other"] = dict()
main_config["parallel"] = dict(
    commander=dict(
        collector_task_env_steps=81_920,
        # one iteration is one segment
        eval_freq=10,
        max_env_step=1_000_000,
    ),
    # a collector's share of a segment (32 envs x 128 steps) in one chunk: four files fewer a version (the
    # learner's env lanes run on across a collector's consecutive chunks either way)
    collector=dict(chunk_size=4096),
)
