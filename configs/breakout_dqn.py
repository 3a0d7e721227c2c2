"""Atari Breakout DQN, serial pipeline: ``parallel-rl serial -c configs/breakout_dqn.py``.

``pong_dqn.py``'s settings (tianshou's Atari DQN, ALE's preprocessing with episodic life and FIRE at reset) on
Breakout (4 actions). Not measured on this box (Atari scores need the GPU).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(runpy.run_path(os.path.join(os.path.dirname(__file__), "pong_dqn.py"))["main_config"])
main_config["exp_name"] = "breakout_dqn"
main_config["env"]["env_id"] = "ALE/Breakout-v5"
main_config["env"]["stop_value"] = None  # no stop value: trains to its budget, then exits 0
