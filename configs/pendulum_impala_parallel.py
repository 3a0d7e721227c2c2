"""Pendulum-v1 IMPALA on a local cluster: ``parallel-rl run -c configs/pendulum_impala_parallel.py``.

The algorithm settings are those of ``pendulum_impala.py``; this file adds the cluster's. The data flow is the type's default,
the asynchronous one (``policy.flow="async"``): collectors never wait for a policy version, the learner trains
on the newest ``policy.collect.n_sample`` rows within ``max_staleness`` versions, and V-trace corrects for the
lag between the behaviour policy that collected a row and the learner's (``flow="segments"`` runs it on PPO's
synchronous segments instead). The buffer is the flow's default (rollout).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "pendulum_impala.py"))["main_config"]
)
main_config["exp_name"] = "pendulum_impala_parallel"
# rows lag the learner by a few versions here (the queue and the pipeline): without PPO's clipped ratio, 10 passes
# at 1e-3 over such rows did not learn within 500k env steps (best -576, -736, -1,150 on seeds 0-2); 4 passes at
# 3e-4 reached -160 at 456k (seed 0)
main_config["policy"]["learn"].update(epoch_per_collect=4, learning_rate=3e-4)
del main_config["serial"]
main_config["parallel"] = dict(
    commander=dict(
        # one iteration is one segment: evaluate every 5 policy versions (on a collector)
        eval_freq=5,
        max_env_step=800_000,
        max_seconds=600.0,
    ),
)
