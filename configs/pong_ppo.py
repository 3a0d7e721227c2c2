"""Atari Pong PPO, serial pipeline: ``parallel-rl serial -c configs/pong_ppo.py``.

Env: ``pong_dqn.py``'s (ALE's vector env and preprocessing; whole-game, unclipped returns in evaluations).
Algorithm: CleanRL's ``ppo_atari.py`` (Huang et al. 2022, "The 37 implementation details of PPO"; SB3 RL Zoo's
Atari PPO alike): 8 envs x 128 steps a segment (1,024 env steps), 4 epochs of 4 minibatches (256 rows), Adam
at 2.5e-4, gamma 0.99, GAE lambda 0.95, clip 0.1, value loss weight 0.5 (clipped), entropy bonus 0.01,
gradient norm 0.5, normalized advantages, the Nature CNN. Differences: CleanRL's actor and critic share the
CNN, here each has its own; CleanRL anneals the learning rate to 0, ours stays. Not measured on this box
(Atari scores need the GPU); ``configs/pong_ppo_parallel.py`` runs it as a cluster.
"""

import copy
import os
import runpy

_dqn = runpy.run_path(os.path.join(os.path.dirname(__file__), "pong_dqn.py"))["main_config"]
main_config = dict(
    exp_name="pong_ppo",
    env={**copy.deepcopy(_dqn["env"]), "collector_env_num": 8},
    policy=dict(
        type="ppo",
        model=dict(hidden_size_list=[], encoder=dict(type="nature", shape=[4, 84, 84])),
        learn=dict(
            epoch_per_collect=4,
            batch_size=256,
            learning_rate=2.5e-4,
            clip_ratio=0.1,
            entropy_weight=0.01,
            value_clip=True,
        ),
        # one segment per update: 8 envs x 128 steps
        collect=dict(n_sample=1024),
        eval=dict(evaluator=dict(eval_freq=100)),
    ),
    serial=dict(max_env_step=10_000_000),
)
