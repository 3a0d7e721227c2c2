"""Feed-forward PPO on CartPole-v1 with its velocities masked: ``parallel-rl serial -c configs/cartpole_novel_ppo.py``.

The settings of ``cartpole_novel_ppo_lstm.py`` without the LSTM (``policy.model.recurrent=None``): the same
masked task, to show that it needs memory (from positions alone a policy cannot tell which way the pole falls).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "cartpole_novel_ppo_lstm.py"))["main_config"]
)
main_config["exp_name"] = "cartpole_novel_ppo"
main_config["policy"]["model"]["recurrent"] = None
