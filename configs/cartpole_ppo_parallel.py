"""CartPole-v1 PPO on a local cluster: ``parallel-rl run -c configs/cartpole_ppo_parallel.py``.

The algorithm settings are those of ``cartpole_ppo.py``; this file adds the cluster's. PPO is
on-policy: every update is published, the collectors together collect one segment of
``policy.collect.n_sample`` env steps with it (each its share) and wait for the next version; the
learner trains on segments of the current version only (``max_staleness=0``), each once
(``max_use=1``: its ``epoch_per_collect`` epochs), and the coordinator drops them.
"""

import copy
import os
import runpy

main_config = copy.deepcopy(runpy.run_path(os.path.join(os.path.dirname(__file__), "cartpole_ppo.py"))["main_config"])
main_config["exp_name"] = "cartpole_ppo_parallel"
del main_config["serial"]
main_config["policy"]["other"] = dict()
main_config["parallel"] = dict(
    commander=dict(
        # one iteration is one segment: evaluate every other policy version (on a collector)
        eval_freq=2,
        max_env_step=200_000,
        max_seconds=300.0,
    ),
)
