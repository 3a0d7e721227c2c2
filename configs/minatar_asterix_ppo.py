"""MinAtar Asterix PPO, serial pipeline: ``parallel-rl serial -c configs/minatar_asterix_ppo.py``.

``minatar_breakout_ppo.py``'s settings (gymnax-blines' MinAtar PPO) on Asterix (4 channels); gymnax-blines reports no PPO figure for it.
Not measured on this box yet.
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "minatar_breakout_ppo.py"))["main_config"]
)
main_config["exp_name"] = "minatar_asterix_ppo"
main_config["env"]["env_id"] = "MinAtar/Asterix-v1"
main_config["policy"]["model"]["encoder"]["shape"] = [10, 10, 4]
