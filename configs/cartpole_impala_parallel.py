"""CartPole-v1 IMPALA on a local cluster: ``parallel-rl run -c configs/cartpole_impala_parallel.py``.

The algorithm settings are those of ``cartpole_impala.py``; this file adds the cluster's. The data flow is the type's default,
the asynchronous one (``policy.flow="async"``): collectors never wait for a policy version, the learner trains
on the newest ``policy.collect.n_sample`` rows within ``max_staleness`` versions, and V-trace corrects for the
lag between the behaviour policy that collected a row and the learner's (``flow="segments"`` runs it on PPO's
synchronous segments instead). The buffer is the flow's default (rollout).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "cartpole_impala.py"))["main_config"]
)
main_config["exp_name"] = "cartpole_impala_parallel"
del main_config["serial"]
main_config["parallel"] = dict(
    commander=dict(
        # one iteration is one segment: evaluate every 2 policy versions (on a collector)
        eval_freq=2,
        max_env_step=200_000,
        max_seconds=300.0,
    ),
)
