"""MinAtar Freeway DQN, serial pipeline: ``parallel-rl serial -c configs/minatar_freeway_dqn.py``.

``minatar_breakout_dqn.py``'s settings (Young & Tian 2019's DQN) on Freeway (7 channels), with two more of
theirs: their optimizer, centered RMSprop (lr 2.5e-4, alpha 0.95, eps 0.01, no momentum: ``examples/dqn.py``),
and the full action set of 6 (``use_minimal_action_set=False``, what ``MinAtar/Freeway-v0`` registers, without
its deprecation warning; their README: "the results included in this repo and the associated paper use the full
action set"). With Adam at 1e-4 (the other MinAtar configs' optimizer) DQN learned Freeway fast and then
plateaued: greedy evaluations 30-45, training returns 28-35 up to 1M env steps. With their RMSprop it learns
little for the first ~200-300k env steps (RMSprop's eps of 0.01, added after the square root as torch does,
makes its steps tiny while gradients are small: their own curve is flat for ~250k frames too) and then passes
Adam. Their reference (returns over training episodes, read off their figures): ~48 at 1M env steps,
~50 at 5M. As a cluster: ``configs/minatar_freeway_dqn_parallel.py`` (measured there).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "minatar_breakout_dqn.py"))["main_config"]
)
main_config["exp_name"] = "minatar_freeway_dqn"
main_config["env"]["env_id"] = "MinAtar/Freeway-v1"
main_config["env"]["env_kwargs"] = dict(use_minimal_action_set=False)
main_config["policy"]["model"]["encoder"]["shape"] = [10, 10, 7]
main_config["policy"]["learn"].update(optimizer="rmsprop", learning_rate=0.00025)
