"""MinAtar SpaceInvaders PPO, serial pipeline: ``parallel-rl serial -c configs/minatar_space_invaders_ppo.py``.

``minatar_breakout_ppo.py``'s settings (gymnax-blines' MinAtar PPO on gymnax's env semantics) on SpaceInvaders (6
channels); gymnax-blines' PPO reaches ~50 at 1M env steps. Measured here (2026-11-25): serial seed 0 82 at 1M; the
cluster file, 3 seeds, 65.1 median (docs/benchmarks.md).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "minatar_breakout_ppo.py"))["main_config"]
)
main_config["exp_name"] = "minatar_space_invaders_ppo"
main_config["env"]["env_id"] = "MinAtar/SpaceInvaders-v1"
main_config["policy"]["model"]["encoder"]["shape"] = [10, 10, 6]
