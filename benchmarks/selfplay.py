"""Self-play to a target: games, env steps and wall time until the trained policy meets it, then a final check.

    .venv/bin/python benchmarks/selfplay.py [--config configs/tictactoe_selfplay.py] [--seeds 1] [--games 1000]
    .venv/bin/python benchmarks/selfplay.py --config configs/connect_four_selfplay.py
    .venv/bin/python benchmarks/selfplay.py --config configs/connect_four_selfplay.py --checkpoint ckpt_best.pt

Runs the serial self-play pipeline (in this process) until its evaluator's stop
rule holds, then plays the final policy and, when an earlier evaluation was the
best, the run's ``ckpt_best.pt`` too, ``--games`` games per side against every
opponent of ``--final-opponents`` (random and lookahead) on fresh games (another
seed than the evaluations') and prints win / draw / loss rates per side.
``--checkpoint`` does only that final check, for a saved checkpoint. The
baseline, measured in the same run, is the untrained policy (the same network
at initialisation) in the same final check; ``x`` is
the trained win rate over the baseline's. Tic-tac-toe target (issue #12): as
first mover never lose to random and win >= 90 %, as second mover lose <= 5 %.
Connect Four: >= 90 % against random and >= 60 % against lookahead, both sides
averaged.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from parallel_rl.config import load_config  # noqa: E402
from parallel_rl.envs.multiagent import BattleEnvManager  # noqa: E402
from parallel_rl.policy import create_policy  # noqa: E402
from parallel_rl.policy.bots import create_bot  # noqa: E402
from parallel_rl.runtime import setup_process  # noqa: E402
from parallel_rl.storage import torch_load  # noqa: E402
from parallel_rl.evaluator.battle import SIDES, BattleInteractionSerialEvaluator  # noqa: E402

TARGETS = {
    "pettingzoo.classic.tictactoe_v3": lambda r: (
        r["random"]["first"]["loss"] == 0.0
        and r["random"]["first"]["win"] >= 0.90
        and r["random"]["second"]["loss"] <= 0.05
    ),
    "pettingzoo.classic.connect_four_v3": lambda r: mean_win(r, "random") >= 0.90 and mean_win(r, "lookahead") >= 0.60,
}


def mean_win(results: dict, opponent: str) -> float:
    return sum(results[opponent][side]["win"] for side in SIDES) / len(SIDES)


def final_check(cfg, policy, opponents, games: int, seed: int) -> dict:
    env = BattleEnvManager.from_cfg(cfg.env, cfg.env.evaluator_env_num, seed=seed)
    n = env.action_spec.n
    evaluator = BattleInteractionSerialEvaluator(
        {"max_seconds": 0},
        env,
        policy.eval_mode,
        {name: create_bot(name, seed=seed + i, n_actions=n) for i, name in enumerate(opponents)},
        stop_value=1.0,
        n_evaluator_episode=games,
        seed=seed,
    )
    _, info = evaluator.eval()
    evaluator.close()
    return info["results"]


def policy_for(cfg, state: dict = None):
    """The config's policy for its game, with the weights of checkpoint ``state`` when given (else untrained)."""
    env = BattleEnvManager.from_cfg(cfg.env, 1)
    obs_dim, spec = env.obs_dim, env.action_spec
    env.close()
    policy = create_policy(cfg.policy, obs_dim, spec, seed=int(cfg.seed))
    if state is not None:
        policy.load_state_dict(state["policy"])
    return policy


def progress(info: dict) -> None:
    """One line per evaluation during training: where the run is and its mean win rate per opponent."""
    rates = ", ".join(f"{o} {rate:.3f}" for o, rate in info["win_rate"].items())
    print(
        f"  eval at {info['elapsed']:.0f}s: {info['train_iter']} updates, {info['envstep']} env steps, "
        f"{info['games']} games; mean win rate {rates}",
        flush=True,
    )


def describe(results: dict) -> str:
    return "; ".join(
        f"vs {o} {side}: win {r['win']:.3f} draw {r['draw']:.3f} loss {r['loss']:.3f}"
        for o, sides in results.items()
        for side, r in sides.items()
    )


def main() -> int:
    from parallel_rl.entry.selfplay import selfplay_pipeline

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/tictactoe_selfplay.py")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--games", type=int, default=1000, help="final check: games per opponent and side")
    parser.add_argument("--final-opponents", default="random,lookahead")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--checkpoint", help="no training: the final check of this checkpoint (ckpt_best.pt, ...)")
    args = parser.parse_args()
    opponents = args.final_opponents.split(",")
    if args.checkpoint:
        return check_checkpoint(args, opponents)
    met_all = True
    for seed in range(args.seeds):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = load_config(
                args.config,
                [
                    f"seed={seed}",
                    f"exp_name={tmp}/exp",
                    "system.tensorboard=false",
                    "system.log_level=WARNING",
                    *args.overrides,
                ],
            )
            setup_process(cfg)
            baseline = final_check(cfg, policy_for(cfg), opponents, args.games, seed=12345 + seed)
            games = []
            start = time.perf_counter()
            result = selfplay_pipeline(cfg, on_eval=lambda info: (games.append(info["games"]), progress(info)))
            wall = time.perf_counter() - start
            # the policy the run ended with, and the one of its best evaluation when that came earlier (the
            # checkpoint a run delivers as its best: re-played here on fresh games, another seed)
            checked = {}
            for name in ("ckpt_final.pt", "ckpt_best.pt"):
                state = torch_load(os.path.join(tmp, "exp", "ckpt", name))
                if checked and state["train_iter"] == next(iter(checked.values()))[0]:
                    break  # the best evaluation was the last one: the same policy
                checked[name] = (
                    state["train_iter"],
                    final_check(cfg, policy_for(cfg, state), opponents, args.games, seed=54321 + seed),
                )
        print(
            f"seed {seed}: {'stop rule met' if result.solved else 'NOT met: ' + result.reason} after "
            f"{games[-1] if games else 0} training games, {result.env_steps} env steps (moves), "
            f"{result.train_iter} updates, {wall:.1f}s wall",
            flush=True,
        )
        print(f"  baseline, untrained policy: {describe(baseline)}")
        met_any = False
        for name, (train_iter, final) in checked.items():
            met = TARGETS.get(cfg.env.env_id, lambda r: True)(final)
            met_any |= met
            print(f"  final check of {name} ({train_iter} updates; {args.games} games per side): {describe(final)}")
            print(
                "    win rate over baseline: "
                + ", ".join(f"{o}: x{mean_win(final, o) / max(mean_win(baseline, o), 1e-9):.2f}" for o in opponents)
            )
            print(f"    issue #12 target for {cfg.env.env_id}: {'MET' if met else 'NOT MET'}", flush=True)
        met_all &= met_any
    return 0 if met_all else 1


def check_checkpoint(args, opponents) -> int:
    """The final check of a saved checkpoint (``--checkpoint``), as after training."""
    cfg = load_config(args.config, ["system.tensorboard=false", "system.log_level=WARNING", *args.overrides])
    setup_process(cfg)
    if not os.path.isfile(args.checkpoint):
        raise SystemExit(f"--checkpoint {args.checkpoint}: no such file (a run writes <exp_name>/ckpt/ckpt_best.pt)")
    state = torch_load(args.checkpoint)
    start = time.perf_counter()
    final = final_check(cfg, policy_for(cfg, state), opponents, args.games, seed=54321 + int(cfg.seed))
    met = TARGETS.get(cfg.env.env_id, lambda r: True)(final)
    print(
        f"{args.checkpoint} ({state.get('train_iter')} updates), {args.games} games per side "
        f"({time.perf_counter() - start:.1f}s): {describe(final)}"
    )
    print(f"  issue #12 target for {cfg.env.env_id}: {'MET' if met else 'NOT MET'}", flush=True)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
