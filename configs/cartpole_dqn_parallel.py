"""CartPole-v1 DQN on a local cluster: ``parallel-rl run -c configs/cartpole_dqn_parallel.py``.

The algorithm settings are those of ``cartpole_dqn.py`` (same env, model and
hyperparameters); this file adds the cluster's. The coordinator sends the
compiled config to every worker it adopts, so workers need no config file.
"""

import copy
import os
import runpy

main_config = copy.deepcopy(runpy.run_path(os.path.join(os.path.dirname(__file__), "cartpole_dqn.py"))["main_config"])
main_config["exp_name"] = "cartpole_dqn_parallel"
del main_config["serial"]
main_config["parallel"] = dict(
    commander=dict(
        # evaluations run on collectors, off the learner's CPU: evaluating often detects a solve sooner
        eval_freq=100,
        max_env_step=500_000,
        max_seconds=300.0,
    ),
)
