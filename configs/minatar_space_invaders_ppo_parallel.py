"""MinAtar SpaceInvaders PPO on a local cluster: ``parallel-rl run -c configs/minatar_space_invaders_ppo_parallel.py``.

``minatar_breakout_ppo_parallel.py`` (gymnax-blines' MinAtar PPO, two collectors of 32 envs) on SpaceInvaders
(6 channels).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "minatar_breakout_ppo_parallel.py"))["main_config"]
)
main_config["exp_name"] = "minatar_space_invaders_ppo_parallel"
main_config["env"]["env_id"] = "MinAtar/SpaceInvaders-v1"
main_config["policy"]["model"]["encoder"]["shape"] = [10, 10, 6]
