"""R2D2 (recurrent DQN) on CartPole-v1 with its velocities masked, on a local cluster:
``parallel-rl run -c configs/cartpole_novel_r2d2_parallel.py``.

The algorithm settings are those of ``cartpole_novel_r2d2.py`` (DI-engine's ``cartpole_r2d2_config.py``
adapted); this file adds the cluster's, as ``cartpole_dqn_parallel.py`` does for DQN. Each collector carries its
envs' LSTM states across chunks and policy versions and cuts each env's rows into sequences (burn-in + trained
rows + n-step target rows) with the state the first row was acted with; a chunk row is a whole sequence, so
the coordinator's prioritized replay index samples and re-prioritizes sequences.
"""

import copy
import os
import runpy

main_config = copy.deepcopy(
    runpy.run_path(os.path.join(os.path.dirname(__file__), "cartpole_novel_r2d2.py"))["main_config"]
)
main_config["exp_name"] = "cartpole_novel_r2d2_parallel"
del main_config["serial"]
main_config["parallel"] = dict(
    commander=dict(
        # evaluations run on collectors, off the learner's CPU
        eval_freq=100,
        # the serial pipeline's replay ratio: 8 sequences of 20 new rows (160 env steps) per 8 updates
        max_env_steps_per_update=20.0,
        max_env_step=100_000,
        max_seconds=900.0,
    ),
    # a chunk row is one sequence of 35 rows (20 new env steps): 16 sequences ~ 320 env steps a chunk
    collector=dict(chunk_size=16),
    learner=dict(min_buffer_size=64),
)
