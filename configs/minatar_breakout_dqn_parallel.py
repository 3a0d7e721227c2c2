"""MinAtar Breakout DQN on a local cluster: ``parallel-rl run -c configs/minatar_breakout_dqn_parallel.py``.

The algorithm settings are those of ``minatar_breakout_dqn.py`` (Young & Tian 2019's); this file adds the
cluster's: one update per env step (collectors wait for the learner past ``random_collect_size + train_iter``
env steps, the learner never makes more updates than there are transitions), an evaluation every 25,000
updates, 1M env steps (the budget of the 1M-step references).
"""
import copy
import os
import runpy

main_config = copy.deepcopy(runpy.run_path(os.path.join(os.path.dirname(__file__),
                                                        "minatar_breakout_dqn.py"))["main_config"])
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
    # full chunks: with one update per env step the collectors run at the learner's pace (~100-300 env steps/s),
    # and a 0.05 s flush cut chunks of 4-76 rows (3,336 files for the 100k replay): the learner's 512-chunk
    # cache missed on nearly every sampled row and its data thread spent more CPU reading .npz files than the
    # updates took. The collectors run 5,000 env steps (the random warm-up) ahead of the learner, so 2 s of
    # latency costs nothing
    collector=dict(chunk_size=256, flush_interval=2.0),
    learner=dict(publish_every=100, prefetch_batches=16, max_updates_per_transition=1.0),
)
