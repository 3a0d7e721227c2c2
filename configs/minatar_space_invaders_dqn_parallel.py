"""MinAtar SpaceInvaders DQN on a local cluster: ``parallel-rl run -c configs/minatar_space_invaders_dqn_parallel.py``.

``minatar_breakout_dqn_parallel.py``'s settings (Young & Tian 2019's DQN; one update per env step, 1M env steps)
on SpaceInvaders (6 channels). Their reference (returns over training episodes, read off their figures): ~31 at
1M env steps.
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "minatar_breakout_dqn_parallel.py"))["main_config"]
)
main_config["exp_name"] = "minatar_space_invaders_dqn_parallel"
main_config["env"]["env_id"] = "MinAtar/SpaceInvaders-v1"
main_config["policy"]["model"]["encoder"]["shape"] = [10, 10, 6]
