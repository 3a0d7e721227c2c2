"""Hopper-v5 SAC on a local cluster: ``parallel-rl run -c configs/hopper_sac_parallel.py``.

The cluster settings of ``halfcheetah_sac_parallel.py`` on Hopper (``hopper_sac.py``).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "halfcheetah_sac_parallel.py"))["main_config"]
)
main_config["exp_name"] = "hopper_sac_parallel"
main_config["env"]["env_id"] = "Hopper-v5"
