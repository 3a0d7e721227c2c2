"""Why `parallel-rl run` needs more learner iterations than `parallel-rl serial` to solve CartPole DQN: the serial
loop, in one process and deterministic per seed, with the cluster's differences added one at a time.

    PYTHONPATH=. .venv/bin/python benchmarks/cluster_lag_ablation.py [--seeds 20] [--ahead 1000] [--publish 50]
        [--prefetch 16] [--min-buffer 256]

- ``--ahead N``: N env steps collected before the first update (the cluster's warmup_env_steps: collectors run
  that far ahead of ``max_env_steps_per_update * train_iter``, and epsilon, which follows env steps, with them);
- ``--publish N``: the collectors act with a copy of the policy refreshed every N updates (publish_every); the
  serial collector acts with the learner's policy itself, refreshed every update_per_collect (4);
- ``--prefetch N``: batches sampled N at a time and trained over the next N updates (prefetch_batches);
- ``--min-buffer N``: no update before the buffer holds N rows (min_buffer_size).

Prints the iterations to solve per seed (evaluated every ``--eval-freq`` updates, as the cluster's eval_freq
counts policy versions). Iterations, not seconds: the number does not depend on the load of the box.

Measured (seeds 10-49, 40 runs per row; mean / median iterations, runs over 800): the serial loop 548 / 500, 0;
with the cluster's settings (--ahead 1000 --publish 50 --prefetch 16) 673 / 575, 6 (two never solved in 1500):
the cluster's 544-736 against serial's 400-500. --publish 10 with the rest: 593, 2. No one setting alone costs
much (seeds 0-9: --publish 50 480, --prefetch 16 450, --ahead 1000 580 against 470): the acting policy's lag
(up to publish_every updates; the serial collector's is under update_per_collect) adds to the other delays
between an action and the update that learns from it, and the sum gives a tail of runs that plateau.
"""
from __future__ import annotations

import argparse
import collections
import copy
import os
import runpy
import statistics

from parallel_rl.collector.serial import create_serial_collector
from parallel_rl.config import compile_config
from parallel_rl.data.buffer import create_buffer
from parallel_rl.envs.env_manager import EnvManager
from parallel_rl.evaluator.serial import InteractionSerialEvaluator
from parallel_rl.learner.learner import create_learner
from parallel_rl.policy import create_policy
from parallel_rl.policy.epsilon import exploration_schedule
from parallel_rl.runtime import set_torch_threads

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "cartpole_dqn.py")


def iterations_to_solve(raw: dict, seed: int, args: argparse.Namespace) -> int:
    """Learner iterations until the greedy evaluation reaches the stop value (``args.max_iter`` if never)."""
    cfg = compile_config({**copy.deepcopy(raw), "seed": seed})
    cenv = EnvManager.from_cfg(cfg.env, cfg.env.collector_env_num, seed=seed)
    eenv = EnvManager.from_cfg(cfg.env, cfg.env.evaluator_env_num, seed=seed + 10_000)
    policy = create_policy(cfg.policy, cenv.obs_dim, cenv.action_spec, seed=seed)
    actor = policy  # what the collector acts with
    if args.publish:
        actor = create_policy(cfg.policy, cenv.obs_dim, cenv.action_spec, seed=seed)
        actor.load_model_state_dict(policy.model_state_dict())
    learner = create_learner(cfg.policy.learn.learner, policy.learn_mode, exp_dir=None)
    collector = create_serial_collector(cfg.policy.collect.collector, cenv, actor.collect_mode, nstep=cfg.policy.nstep,
                                        discount_factor=cfg.policy.discount_factor)
    evaluator = InteractionSerialEvaluator(cfg.policy.eval.evaluator, eenv, policy.eval_mode, cfg.env.stop_value,
                                           cfg.env.n_evaluator_episode, seed=seed + 20_000)
    buffer = create_buffer(cfg.policy.other.replay_buffer)
    eps, learn = exploration_schedule(cfg.policy), cfg.policy.learn
    batches: collections.deque = collections.deque()
    try:
        if args.ahead:
            buffer.push(collector.collect(args.ahead, train_iter=0, policy_kwargs={"eps": eps(0)}), collector.envstep)
        last_eval = None
        while learner.train_iter < args.max_iter:
            if last_eval is None or learner.train_iter - last_eval >= args.eval_freq:
                last_eval = learner.train_iter
                if evaluator.eval(None, learner.train_iter, collector.envstep)[0]:
                    return learner.train_iter
            data = collector.collect(cfg.policy.collect.n_sample, train_iter=learner.train_iter,
                                     policy_kwargs={"eps": eps(collector.envstep)})
            buffer.push(data, cur_collector_envstep=collector.envstep)
            if buffer.count() < max(args.min_buffer, learn.batch_size):
                continue
            for _ in range(learn.update_per_collect):
                if not batches:
                    batches.extend(buffer.sample(learn.batch_size, learner.train_iter) for _ in range(args.prefetch))
                learner.train(batches.popleft(), collector.envstep)
                if args.publish and learner.train_iter % args.publish == 0:
                    actor.load_model_state_dict(policy.model_state_dict())
        return args.max_iter
    finally:
        cenv.close()
        eenv.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--ahead", type=int, default=0)
    parser.add_argument("--publish", type=int, default=0)
    parser.add_argument("--prefetch", type=int, default=1)
    parser.add_argument("--min-buffer", type=int, default=0)
    parser.add_argument("--eval-freq", type=int, default=100)
    parser.add_argument("--max-iter", type=int, default=1500)
    args = parser.parse_args()
    set_torch_threads(1)
    raw = runpy.run_path(CONFIG)["main_config"]
    iters = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        iters.append(iterations_to_solve(raw, seed, args))
        print(f"seed {seed}: {iters[-1]} iterations", flush=True)
    slow = sum(i > 800 for i in iters)
    print(f"ahead={args.ahead} publish={args.publish} prefetch={args.prefetch} min_buffer={args.min_buffer}: "
          f"mean {statistics.mean(iters):.0f} median {statistics.median(iters):.0f} iterations, {slow}/{len(iters)} "
          f"over 800 ({args.max_iter} = not solved)")


if __name__ == "__main__":
    main()
