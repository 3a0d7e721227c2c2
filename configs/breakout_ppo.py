"""Atari Breakout PPO, serial pipeline: ``parallel-rl serial -c configs/breakout_ppo.py``.

``pong_ppo.py``'s settings (CleanRL's Atari PPO) on Breakout. Not measured on this box (Atari scores need the GPU).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(runpy.run_path(os.path.join(os.path.dirname(__file__), "pong_ppo.py"))["main_config"])
main_config["exp_name"] = "breakout_ppo"
main_config["env"]["env_id"] = "ALE/Breakout-v5"
main_config["env"]["stop_value"] = None  # no stop value: trains to its budget, then exits 0
