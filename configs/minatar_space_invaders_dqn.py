"""MinAtar SpaceInvaders DQN, serial pipeline: ``parallel-rl serial -c configs/minatar_space_invaders_dqn.py``.

``minatar_breakout_dqn.py``'s settings (Young & Tian 2019's DQN) on SpaceInvaders (6 channels). Their reference
(returns over training episodes, read off their figures): ~31 at 1M env steps, ~43 at 5M. Not measured on
this box yet. As a cluster: ``configs/minatar_space_invaders_dqn_parallel.py``.
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "minatar_breakout_dqn.py"))["main_config"]
)
main_config["exp_name"] = "minatar_space_invaders_dqn"
main_config["env"]["env_id"] = "MinAtar/SpaceInvaders-v1"
main_config["policy"]["model"]["encoder"]["shape"] = [10, 10, 6]
