"""HalfCheetah-v5 SAC on a local cluster: ``parallel-rl run -c configs/halfcheetah_sac_parallel.py``.

The algorithm settings are those of ``halfcheetah_sac.py`` (RL Zoo's); this file adds the cluster's: one
update per env step (collectors wait for the learner past ``random_collect_size + train_iter`` env steps,
the learner never makes more updates than there are transitions), an evaluation every 5,000 updates.
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "halfcheetah_sac.py"))["main_config"]
)
main_config["exp_name"] = "halfcheetah_sac_parallel"
del main_config["serial"]
main_config["parallel"] = dict(
    commander=dict(
        collector_task_env_steps=10_000,
        eval_freq=5000,
        # the serial replay ratio: one update per env step
        max_env_steps_per_update=1.0,
        allowance_grant=64,
        max_env_step=100_000,
    ),
    collector=dict(chunk_size=256),
    learner=dict(publish_every=100, max_updates_per_transition=1.0),
)
