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
        collector_task_env_steps=4096,
        # evaluations run on collectors, off the learner's CPU: evaluating often detects a solve sooner
        eval_freq=100,
        # the same replay ratio as the serial pipeline: 64 transitions per 4 updates
        max_env_steps_per_update=16.0,
        max_env_step=500_000,
        max_seconds=300.0,
    ),
    collector=dict(chunk_size=1024, flush_interval=0.05),
    learner=dict(publish_every=50, prefetch_batches=16, min_buffer_size=256),
)
