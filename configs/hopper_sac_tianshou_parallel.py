"""Hopper-v5 SAC on a local cluster with tianshou's Hopper settings (examples/mujoco/mujoco_sac.py):
actor and critic learning rate 1e-3, a fixed temperature 0.2; otherwise hopper_sac_parallel.py."""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "hopper_sac_parallel.py"))["main_config"]
)
main_config["exp_name"] = "hopper_sac_tianshou_parallel"
learn = main_config["policy"]["learn"]
learn.update(learning_rate_policy=1e-3, learning_rate_q=1e-3, auto_alpha=False, init_alpha=0.2)
