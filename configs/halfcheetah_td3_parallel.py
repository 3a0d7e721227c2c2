"""HalfCheetah-v5 TD3 on a local cluster: ``parallel-rl run -c configs/halfcheetah_td3_parallel.py``.

The algorithm settings are those of ``halfcheetah_td3.py`` (CleanRL's); the cluster's are those of
``halfcheetah_sac_parallel.py`` (one update per env step, an evaluation every 5,000 updates).
"""

import copy
import os
import runpy

here = os.path.dirname(__file__)
main_config = copy.deepcopy(runpy.run_path(os.path.join(here, "halfcheetah_td3.py"))["main_config"])
main_config["exp_name"] = "halfcheetah_td3_parallel"
del main_config["serial"]
main_config["parallel"] = copy.deepcopy(
    runpy.run_path(os.path.join(here, "halfcheetah_sac_parallel.py"))["main_config"]["parallel"]
)
