"""Pendulum-v1 IMPALA (continuous actions), serial pipeline: ``parallel-rl serial -c configs/pendulum_impala.py``.

The settings of ``pendulum_appo.py`` (PPO's Pendulum ones: gamma 0.9, 2,048-step batches, 10 passes in 256-row
minibatches, learning rate 1e-3) on IMPALA's V-trace actor-critic: a plain policy gradient on V-trace
advantages, the truncated importance weights (rho_bar = c_bar = 1, the paper's) standing in for PPO's clipped
ratio over the passes after the first. Measured: -245 at 246k env steps serial (seed 0; 4 passes or 1 pass did
not learn within 300k).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(runpy.run_path(os.path.join(os.path.dirname(__file__), "pendulum_appo.py"))["main_config"])
main_config["exp_name"] = "pendulum_impala"
main_config["policy"]["type"] = "impala"
del main_config["policy"]["learn"]["clip_ratio"]
main_config["policy"]["learn"]["adv_norm"] = True  # APPO's default, not IMPALA's
main_config["serial"]["max_env_step"] = 500_000
