"""Hopper-v5 SAC, serial pipeline: ``parallel-rl serial -c configs/hopper_sac.py``.

RL Zoo's ``hyperparams/sac.yml`` for Hopper is SB3's SAC defaults plus ``learning_starts: 10000``: the
settings of ``halfcheetah_sac.py``, on Hopper (whose episodes end when it falls: ``done`` is termination
only, a time limit still bootstraps).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "halfcheetah_sac.py"))["main_config"]
)
main_config["exp_name"] = "hopper_sac"
main_config["env"]["env_id"] = "Hopper-v5"
