"""CartPole-v1 IMPALA on a local cluster: ``parallel-rl run -c configs/cartpole_impala_parallel.py``.

The algorithm settings are those of ``cartpole_impala.py``; this file adds the cluster's. The data flow is the one
the policy type asks for (``policy.flow``): until the asynchronous flow is in, IMPALA runs on PPO's
synchronous segments (every version published, the collectors split one segment of
``policy.collect.n_sample`` env steps per version, each segment trained on once), with V-trace correcting
for the learner's policy moving during its epochs over a segment. The buffer is the flow's default.
"""
import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "cartpole_impala.py"))["main_config"])
main_config["exp_name"] = "cartpole_impala_parallel"
del main_config["serial"]
main_config["parallel"] = dict(
    commander=dict(
        collector_task_env_steps=4096,
        # one iteration is one segment: evaluate every 2 policy versions (on a collector)
        eval_freq=2,
        max_env_step=200_000,
        max_seconds=300.0,
    ),
    collector=dict(chunk_size=1024, flush_interval=0.05),
)
