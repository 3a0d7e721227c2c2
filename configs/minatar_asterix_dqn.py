"""MinAtar Asterix DQN, serial pipeline: ``parallel-rl serial -c configs/minatar_asterix_dqn.py``.

``minatar_breakout_dqn.py``'s settings (Young & Tian 2019's DQN) on Asterix (4 channels). Their reference
(returns over training episodes, read off their figures): ~5 at 1M env steps, ~17 at 5M. Not measured on
this box yet. As a cluster: ``parallel-rl run -c configs/minatar_breakout_dqn_parallel.py --set
env.env_id=MinAtar/Asterix-v1 --set 'policy.model.encoder.shape=[10,10,4]'``.
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "minatar_breakout_dqn.py"))["main_config"]
)
main_config["exp_name"] = "minatar_asterix_dqn"
main_config["env"]["env_id"] = "MinAtar/Asterix-v1"
main_config["policy"]["model"]["encoder"]["shape"] = [10, 10, 4]
