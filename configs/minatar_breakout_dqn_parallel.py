"""MinAtar Breakout DQN on a local cluster: ``parallel-rl run -c configs/minatar_breakout_dqn_parallel.py``.

The algorithm settings are those of ``minatar_breakout_dqn.py`` (Young & Tian 2019's); this file adds the
cluster's: one update per env step (collectors wait for the learner past ``random_collect_size + train_iter``
env steps, the learner never makes more updates than there are transitions), an evaluation every 25,000
updates, 1M env steps (the budget of the 1M-step references).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "minatar_breakout_dqn.py"))["main_config"]
)
main_config["exp_name"] = "minatar_breakout_dqn_parallel"
del main_config["serial"]
main_config["parallel"] = dict(
    commander=dict(
        collector_task_env_steps=10_000,
        eval_freq=25_000,
        # the serial replay ratio: one update per env step
        max_env_steps_per_update=1.0,
        allowance_grant=64,
        max_env_step=1_000_000,
    ),
    # one update per env step: the collectors run at the learner's pace (~100-300 env steps/s), and their chunks
    # end every allowance_grant steps or sooner (a new policy, flush_interval): 4-80 rows, ~3,000 files for
    # the 100k replay. The learner's cache held chunk_cache_size chunks of chunk_size rows each: with the
    # defaults (512 of 256 rows) it missed on nearly every sampled row and its data thread spent more CPU
    # reading .npz files than the updates took (py-spy, 35 min into a run). Chunks of at most 64 rows and 4,096
    # of them cached hold the whole replay (~220 MB of uint8/bool rows). The cache now keeps rows in pages of 8
    # (the defaults' 131k rows would hold the replay too); these are the settings the figures were measured with
    collector=dict(chunk_size=64, flush_interval=2.0),
    learner=dict(publish_every=100, max_updates_per_transition=1.0, chunk_cache_size=4096),
)
