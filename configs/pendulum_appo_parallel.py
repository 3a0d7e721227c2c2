"""Pendulum-v1 APPO on a local cluster: ``parallel-rl run -c configs/pendulum_appo_parallel.py``.

The algorithm settings are those of ``pendulum_appo.py``; this file adds the cluster's. The data flow is the type's default,
the asynchronous one (``policy.flow="async"``): collectors never wait for a policy version, the learner trains
on the newest ``policy.collect.n_sample`` rows within ``max_staleness`` versions, and V-trace corrects for the
lag between the behaviour policy that collected a row and the learner's (``flow="segments"`` runs it on PPO's
synchronous segments instead). The buffer is the flow's default (rollout).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(runpy.run_path(os.path.join(os.path.dirname(__file__), "pendulum_appo.py"))["main_config"])
main_config["exp_name"] = "pendulum_appo_parallel"
del main_config["serial"]
main_config["parallel"] = dict(
    commander=dict(
        # one iteration is one segment: evaluate every 5 policy versions (on a collector)
        eval_freq=5,
        max_env_step=300_000,
        max_seconds=600.0,
    ),
)
