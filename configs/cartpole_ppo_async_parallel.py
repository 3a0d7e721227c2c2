"""CartPole-v1 PPO on a local cluster, asynchronously: ``parallel-rl run -c configs/cartpole_ppo_async_parallel.py``.

The algorithm settings are those of ``cartpole_ppo.py``; ``policy.flow="async"`` picks the asynchronous
on-policy flow (docs/protocol.md): the collectors never wait for a policy version, they act with the newest
one they loaded, and wait only for room in the learner's queue (``parallel.commander.rollout_queue_batches``,
3 batches by default); the learner trains on the oldest queued ``n_sample`` rows within ``max_staleness``
versions of the iteration it trains them at, each row once, and publishes every update. PPO's clipped ratio against the
behaviour policy's ``logp`` (recorded with every row) bounds the update on rows a few versions old; rows
older than ``max_staleness`` are dropped and counted (``dropped_stale`` in ``GET /api/v1/buffers``).
"""

import copy
import os
import runpy

main_config = copy.deepcopy(runpy.run_path(os.path.join(os.path.dirname(__file__), "cartpole_ppo.py"))["main_config"])
main_config["exp_name"] = "cartpole_ppo_async_parallel"
del main_config["serial"]
main_config["policy"]["flow"] = "async"
main_config["policy"]["other"] = dict()
main_config["parallel"] = dict(
    commander=dict(
        # every 5th version (the learner publishes every update)
        eval_freq=5,
        max_env_step=400_000,
        max_seconds=300.0,
    ),
)
