"""Why `parallel-rl run` needs more learner iterations than `parallel-rl serial` to solve CartPole DQN: the serial
loop, in one process and deterministic per seed, with the cluster's differences added one at a time.

    PYTHONPATH=. .venv/bin/python benchmarks/cluster_lag_ablation.py [--seeds 20] [--ahead 1000] [--publish 50]
        [--prefetch 16] [--min-buffer 256]

- ``--ahead N``: N env steps collected before the first update (the cluster's warmup_env_steps: collectors run
  that far ahead of ``max_env_steps_per_update * train_iter``, and epsilon, which follows env steps, with them);
- ``--publish N``: the collectors act with a copy of the policy refreshed every N updates (publish_every); the
  serial collector acts with the learner's policy itself, refreshed every update_per_collect (4);
- ``--prefetch N``: batches sampled N at a time and trained over the next N updates, their new priorities given to
  the (prioritized) buffer with the next round's request (prefetch_batches; serial: after every update);
- ``--min-buffer N``: no update before the buffer holds N rows (min_buffer_size).

Prints the iterations to solve per seed (evaluated every ``--eval-freq`` updates, as the cluster's eval_freq
counts policy versions). Iterations, not seconds: the number does not depend on the load of the box.

Measured 2026-11-25 (seeds 10-29, 20 runs per row: mean / median iterations, runs over 800): the serial loop
520 / 500, 0; the cluster's settings (--ahead 1000 --publish 50 --prefetch 16) 620 / 600, 1 (the cluster measured
544-736 against serial's 400-500). Each delay alone costs a little (--ahead 1000 565, --prefetch 16 555), any two
about as much as all three (--ahead 1000 with --prefetch 16: 605, with --publish 50: 630), and none removed
recovers serial's count: --publish 10 615; without the head start the lag costs more (--publish 50 --prefetch 16:
680, 5 runs over 800; with --ahead 256: 685, 4), the head start's rows standing in for the ones still on their way.
The cluster's extra updates are the price of acting and learning a few dozen updates apart, not one bug.
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
    collector = create_serial_collector(
        cfg.policy.collect.collector,
        cenv,
        actor.collect_mode,
        nstep=cfg.policy.nstep,
        discount_factor=cfg.policy.discount_factor,
    )
    evaluator = InteractionSerialEvaluator(
        cfg.policy.eval.evaluator,
        eenv,
        policy.eval_mode,
        cfg.run.stop_value,
        cfg.env.n_evaluator_episode,
        seed=seed + 20_000,
    )
    buffer = create_buffer(cfg.policy.other.replay_buffer)
    eps, learn = exploration_schedule(cfg.policy), cfg.policy.learn
    batches: collections.deque = collections.deque()
    priorities: list = []  # of batches trained, not yet given to the buffer
    try:
        if args.ahead:
            buffer.push(collector.collect(args.ahead, train_iter=0, policy_kwargs={"eps": eps(0)}), collector.envstep)
        last_eval = None
        while learner.train_iter < args.max_iter:
            if last_eval is None or learner.train_iter - last_eval >= args.eval_freq:
                last_eval = learner.train_iter
                if evaluator.eval(None, learner.train_iter, collector.envstep)[0]:
                    return learner.train_iter
            data = collector.collect(
                cfg.policy.collect.n_sample,
                train_iter=learner.train_iter,
                policy_kwargs={"eps": eps(collector.envstep)},
            )
            buffer.push(data, cur_collector_envstep=collector.envstep)
            if buffer.count() < max(args.min_buffer, learn.batch_size):
                continue
            for _ in range(learn.update_per_collect):
                if not batches:  # the priorities of the batches trained since the last round go with the request
                    for info in priorities:
                        buffer.update(info)
                    priorities.clear()
                    batches.extend(buffer.sample(learn.batch_size, learner.train_iter) for _ in range(args.prefetch))
                learner.train(batches.popleft(), collector.envstep)
                if learner.priority_info is not None:
                    priorities.append(learner.priority_info)
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
    print(
        f"ahead={args.ahead} publish={args.publish} prefetch={args.prefetch} min_buffer={args.min_buffer}: "
        f"mean {statistics.mean(iters):.0f} median {statistics.median(iters):.0f} iterations, {slow}/{len(iters)} "
        f"over 800 ({args.max_iter} = not solved)"
    )


if __name__ == "__main__":
    main()
