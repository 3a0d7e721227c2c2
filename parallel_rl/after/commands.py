"""The CLI's after-training commands: ``eval``, ``plot``, ``compare``, ``export`` (parsers and handlers)."""

from __future__ import annotations

import argparse
import json
import logging
import os

from ..errors import ConfigError

logger = logging.getLogger(__name__)

EVAL_EXAMPLE = """example:
  parallel-rl serial -c configs/cartpole_dqn.py           # train: checkpoints in cartpole_dqn/ckpt/
  parallel-rl eval -c configs/cartpole_dqn.py --episodes 100 --video videos/
  parallel-rl eval -c configs/cartpole_dqn_parallel.py --run cartpole_dqn_parallel/shared --json
  parallel-rl eval -c configs/cartpole_dqn.py --checkpoint newest   # not the best evaluated version

Of a run, the best evaluated version is taken unless --checkpoint says otherwise; which one, and why, is
printed first (best: version 1234, eval return 148.0 at env step 20480).
"""
PLOT_EXAMPLE = """example:
  parallel-rl plot cartpole_dqn_s0 cartpole_dqn_s1 cartpole_ppo -o curves.png --x env_steps
  parallel-rl plot cartpole_dqn_parallel -o curves.svg --reference docs/reference/cartpole.csv

A RUN_DIR is a serial run's experiment directory (its tensorboard/ scalars) or a cluster run's (or its
shared store, whose coordinator state keeps the eval history). Runs with the same config (apart from
exp_name and seed) are drawn as one line, their mean, with a min-max band. A --reference CSV has the
columns x,return[,label]: published points drawn as markers.
"""
COMPARE_EXAMPLE = """example:
  parallel-rl compare dqn_s0 dqn_s1 dqn_s2 ppo_s0 ppo_s1 ppo_s2 --csv scores.csv --png curves.png
  parallel-rl compare --group lr1e-4=a_s0,a_s1 --group lr1e-3=b_s0,b_s1 --at-env-step 50000 --reps 5000

Runs with the same config (apart from exp_name and seed; --group-by name: the same name without its seed
suffix) form a group. Each run's final score is its last evaluation at or before --at-env-step (default:
the smallest final env step among the runs, or the latest first evaluation where that comes after it); per group: IQM with a 95 % percentile-bootstrap CI over its
runs, median and mean. A directory that is not a run, or has no evaluations: one line, exit 2, nothing written.
"""
EXPORT_EXAMPLE = """example:
  parallel-rl export -c configs/cartpole_dqn.py --format onnx -o cartpole.onnx
  parallel-rl export -c configs/pendulum_sac.py --checkpoint pendulum_sac/ckpt/ckpt_best.pt \\
      --format torchscript -o pendulum.torchscript
  python -c "import parallel_rl; print(parallel_rl.load_policy('cartpole.onnx').act([0, 0, 0, 0]))"
"""


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32)


def _add_policy_source(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint",
        metavar="best|newest|PATH",
        default=None,
        help="which checkpoint of the run: best (default: its best evaluated version, the newest when "
        "no evaluation kept one), newest, or a checkpoint file (<exp_dir>/ckpt/*.pt, "
        "<shared>/policy/policy_*.pt; a file named best: ./best)",
    )
    p.add_argument(
        "--run",
        metavar="DIR",
        default=None,
        help="a serial experiment directory or a shared store (path or URL) "
        "(default: the config's exp_name directory, then its shared store)",
    )


def add_parsers(sub, config_args) -> None:
    """Add ``eval``, ``plot`` and ``export`` to the CLI's sub-parsers; ``config_args`` adds -c and --set."""
    p = sub.add_parser(
        "eval",
        help="play a trained policy: mean return, optional videos",
        epilog=EVAL_EXAMPLE,
        formatter_class=_formatter,
        description="Evaluate a saved policy on fresh envs.",
    )
    config_args(p)
    _add_policy_source(p)
    p.add_argument("--episodes", type=int, default=10, help="episodes to play (default 10)")
    p.add_argument("--seed", type=int, default=12345, help="seed of the fresh envs (default 12345)")
    p.add_argument("--video", metavar="DIR", default=None, help="write MP4s of the first episodes to DIR")
    p.add_argument("--video-episodes", type=int, default=1, help="how many episodes --video records (default 1)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON, not a table")

    p = sub.add_parser(
        "plot",
        help="learning curves of one or many runs (PNG/SVG)",
        epilog=PLOT_EXAMPLE,
        formatter_class=_formatter,
        description="Plot eval return against env steps, wall time or updates.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (serial or cluster)")
    p.add_argument("-o", "--output", default="curves.png", help="output file, .png or .svg (default curves.png)")
    p.add_argument(
        "--x", choices=["env_steps", "wall", "updates"], default="env_steps", help="x axis (default env_steps)"
    )
    p.add_argument("--reference", metavar="FILE", default=None, help="CSV of published points: x,return[,label]")
    p.add_argument("--title", default=None, help="the plot's title")

    p = sub.add_parser(
        "compare",
        help="compare groups of runs: IQM with bootstrap CIs, mean curves, CSV",
        epilog=COMPARE_EXAMPLE,
        formatter_class=_formatter,
        description="Compare runs as Agarwal et al. (2021) recommend: final scores as IQM with 95 %% "
        "bootstrap CIs, mean curves with bootstrap bands.",
    )
    p.add_argument("runs", nargs="*", metavar="RUN_DIR", help="run directories (serial or cluster)")
    p.add_argument(
        "--group-by",
        choices=["config", "name"],
        default="config",
        help="how RUN_DIRs are grouped: config (the same config apart from exp_name and seed; the "
        "default) or name (the same name without its seed suffix _s1/-seed1)",
    )
    p.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME=DIR,DIR",
        help="a group of its own of the runs named (repeatable)",
    )
    p.add_argument("--csv", metavar="OUT.csv", default=None, help="write a row per run and per group")
    p.add_argument(
        "--png",
        metavar="OUT.png",
        default=None,
        help="draw each group's mean curve with a 95 %% bootstrap band (.png or .svg)",
    )
    p.add_argument(
        "--at-env-step",
        type=float,
        default=None,
        metavar="N",
        help="score each run by its last evaluation at or before N env steps (default: the smallest "
        "final env step among the runs)",
    )
    p.add_argument("--reps", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")

    p = sub.add_parser(
        "export",
        help="write the acting policy as TorchScript or ONNX",
        epilog=EXPORT_EXAMPLE,
        formatter_class=_formatter,
        description="Export the acting part of a policy (observation normalisation included).",
    )
    config_args(p)
    _add_policy_source(p)
    p.add_argument("--format", choices=["torchscript", "onnx"], required=True, help="file format")
    p.add_argument("-o", "--output", required=True, help="the file to write")


def _policy_for(args: argparse.Namespace, num_envs: int, seed: int):
    """(cfg, checkpoint, env, policy): the config's env (``num_envs`` copies; a two-player game's env manager for
    one) and the checkpoint's policy."""
    from ..config import load_config
    from ..envs.fit import check_env_fits
    from ..runtime import set_torch_threads
    from .checkpoints import build_policy, find_checkpoint, spaces_env

    cfg = load_config(args.config, args.overrides)
    check_env_fits(cfg)
    set_torch_threads(cfg.system.torch_num_threads)
    checkpoint = find_checkpoint(cfg, args.checkpoint, args.run)
    if checkpoint.why and not getattr(args, "json", False):  # --json: its "checkpoint_choice"
        print(f"{args.command}: {checkpoint.why} ({checkpoint.source})", flush=True)
    env = spaces_env(cfg, num_envs, seed, evaluating=True)
    try:
        return cfg, checkpoint, env, build_policy(cfg, checkpoint, env)
    except BaseException:
        env.close()
        raise


def cmd_eval(args: argparse.Namespace) -> int:
    from ..commands import render_table
    from ..envs.multiagent import is_battle_env
    from .evaluate import BackgroundRecording, battle_rows, evaluate_battle, evaluate_policy, summary_rows

    if args.episodes <= 0 or args.video_episodes < 0:
        raise ConfigError(
            f"--episodes must be > 0 and --video-episodes >= 0, got {args.episodes}, {args.video_episodes}"
        )
    if args.video:
        from ..envs.video import ffmpeg_writer

        ffmpeg_writer()  # a missing imageio-ffmpeg fails before the episodes are played
    cfg, checkpoint, env, policy = _policy_for(args, 1, args.seed)
    env.close()  # it told the policy the spaces; the evaluation plays on its own envs
    battle = is_battle_env(cfg.env)
    if battle and args.video:
        raise ConfigError("--video records single-agent envs only; drop it for a two-player game")
    videos = []
    if args.video and args.video_episodes:  # recorded beside the evaluation, not after it
        with BackgroundRecording(cfg.env, policy.eval_mode, args.video, args.video_episodes, args.seed) as recording:
            info = evaluate_policy(cfg, policy, args.episodes, args.seed)
            videos = recording.result()
    else:
        info = (evaluate_battle if battle else evaluate_policy)(cfg, policy, args.episodes, args.seed)
    out = {
        "checkpoint": checkpoint.source,
        "checkpoint_choice": checkpoint.why or None,
        "env_id": cfg.env.env_id,
        "policy": cfg.policy.type,
        "episodes": info["episodes"],
        "length_mean": info["episode_length_mean"],
        "env_steps": info["env_steps"],
        "seconds": round(info["duration"], 3),
        "env_steps_per_second": round(info["env_steps"] / max(info["duration"], 1e-9), 1),
    }
    if battle:
        out.update(win_rate=info["win_rate"], results=info["results"])
    else:
        out.update(
            return_mean=info["eval_episode_return_mean"],
            return_std=info["eval_episode_return_std"],
            return_min=info["eval_episode_return_min"],
            return_max=info["eval_episode_return_max"],
            videos=[v["path"] for v in videos],
            video_seconds=round(sum(v["seconds"] for v in videos), 3),
        )  # the recording's own time
    if getattr(args, "json", False):
        print(json.dumps(out, indent=2))
        return 0
    print(
        f"{out['policy']} on {out['env_id']}: {out['episodes']} episodes of {checkpoint.source} "
        f"({out['env_steps']} env steps in {out['seconds']:.2f}s, {out['env_steps_per_second']:.0f}/s)"
    )
    if battle:
        print(render_table(battle_rows(info), ["opponent", "side", "win", "draw", "loss", "games"]))
    else:
        print(render_table(summary_rows(info), ["metric", "mean", "std", "min", "max"]))
    for path in out.get("videos", []):
        print(f"video: {path}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .acting import acting_module
    from .export import export_acting

    cfg, checkpoint, env, policy = _policy_for(args, 1, 0)
    try:
        if cfg.env.type == "pettingzoo":  # the acting module knows no action masks: it would play illegal moves
            raise ConfigError(
                "export: two-player games (env.type='pettingzoo') are not exported yet: their "
                "policies need the game's action mask"
            )
        obs_shape, kind, obs_dtype = env.obs_shape, env.action_spec.kind, env.obs_dtype
    finally:
        env.close()
    path = export_acting(acting_module(policy), obs_shape, kind, args.format, args.output, obs_dtype.name)
    print(f"export: {checkpoint.source} -> {path} ({args.format}, obs {tuple(obs_shape)} -> {kind} actions)")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from .plot import plot_runs

    path, groups = plot_runs(args.runs, args.output, args.x, args.reference, args.title)
    for label, runs in groups.items():
        print(f"plot: {label}: {len(runs)} run(s): {', '.join(os.path.basename(r.rstrip('/')) for r in runs)}")
    print(f"plot: wrote {path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from ..commands import render_table
    from .compare import check_options, compare, plot_groups, write_csv

    check_options(args.csv, args.png, args.reps, args.seed, args.at_env_step)
    # every run is read before anything is written
    result = compare(args.runs, args.group, args.group_by, args.at_env_step, args.reps, args.seed)
    groups, step = result.groups, result.env_step
    written = [write_csv(groups, args.csv)] if args.csv else []  # written before the tables: a failure is one line
    if args.png:
        written.append(plot_groups(groups, args.png, step, args.reps, args.seed))
    how = "--at-env-step" if args.at_env_step is not None else result.default_step
    print(
        f"compare: scores at env step {step:g} ({how}); IQM with a 95 % percentile-bootstrap CI over runs "
        f"({args.reps} resamples, seed {args.seed})"
    )

    def num(x: float) -> str:
        return f"{x:.6g}"

    for group in groups:
        print(f"\n{group.name}: {len(group.runs)} run(s)")
        print(
            render_table(
                [
                    {
                        "run": r.name,
                        "seed": r.seed,
                        "env_steps": num(r.final_env_steps),
                        "score": num(r.final_score),
                        "dir": r.run_dir,
                    }
                    for r in group.runs
                ],
                ["run", "seed", "env_steps", "score", "dir"],
            )
        )
    print()
    print(
        render_table(
            [
                {
                    "group": g.name,
                    "runs": len(g.runs),
                    "iqm": num(g.iqm),
                    "95% ci": f"[{num(g.ci[0])}, {num(g.ci[1])}]",
                    "median": num(g.median),
                    "mean": num(g.mean),
                }
                for g in groups
            ],
            ["group", "runs", "iqm", "95% ci", "median", "mean"],
        )
    )
    for group in groups:
        if group.note:
            print(f"note: {group.name}: {group.note}")
    for path in written:
        print(f"compare: wrote {path}")
    return 0


COMMANDS = {"eval": cmd_eval, "export": cmd_export, "plot": cmd_plot, "compare": cmd_compare}
