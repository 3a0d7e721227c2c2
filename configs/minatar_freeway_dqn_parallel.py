"""MinAtar Freeway DQN on a local cluster: ``parallel-rl run -c configs/minatar_freeway_dqn_parallel.py``.

``minatar_freeway_dqn.py``'s settings (Young & Tian 2019's DQN with their optimizer, centered RMSprop at 2.5e-4,
and their full action set of 6: that file says why) with ``minatar_breakout_dqn_parallel.py``'s cluster section
(one update per env step, 1M env steps). Their reference (returns over training episodes, read off their
figures): ~48 at 1M env steps.
"""

import copy
import os
import runpy

here = os.path.dirname(__file__)
main_config = copy.deepcopy(runpy.run_path(os.path.join(here, "minatar_freeway_dqn.py"))["main_config"])
main_config["exp_name"] = "minatar_freeway_dqn_parallel"
del main_config["serial"]
main_config["parallel"] = copy.deepcopy(
    runpy.run_path(os.path.join(here, "minatar_breakout_dqn_parallel.py"))["main_config"]["parallel"]
)
