"""Pendulum-v1 SAC on a local cluster: ``parallel-rl run -c configs/pendulum_sac_parallel.py``.

The algorithm settings are those of ``pendulum_sac.py``; this file adds the cluster's.
"""

import copy
import os
import runpy

main_config = copy.deepcopy(runpy.run_path(os.path.join(os.path.dirname(__file__), "pendulum_sac.py"))["main_config"])
main_config["exp_name"] = "pendulum_sac_parallel"
del main_config["serial"]
main_config["parallel"] = dict(
    commander=dict(
        eval_freq=500,
        # the serial replay ratio: one update per env step
        max_env_steps_per_update=1.0,
        allowance_grant=64,
        max_env_step=30_000,
        max_seconds=300.0,
    ),
    collector=dict(chunk_size=256),
)
