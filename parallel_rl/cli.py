"""The ``parallel-rl`` command line.

Exit codes: 0 solved (or a budget reached by a run with no stop value), 1 a
failure with a one-line reason, 2 a usage or config error, 3 a training
budget ran out before the stop value, 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import signal
import math
import os
import sys
from typing import List, Optional

from .errors import ParallelRLError

logger = logging.getLogger(__name__)


def port_number(text: str) -> int:
    """``--port``: 0-65535 (0 lets the OS pick); anything else is a usage error (exit 2), not an
    OverflowError from the socket once the command has started."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number: use 0-65535 (0 lets the OS pick)") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is out of range: a port is 0-65535 (0 lets the OS pick)")
    return port


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"{value} is not in 0..2**32-1")
    return value


def coordinator_url(text: str) -> str:
    """``--coordinator`` (and ``PARALLEL_RL_COORDINATOR``): a URL with its scheme; ``localhost:8000`` failed
    deep in the HTTP library (LocationValueError)."""
    if text and not text.lower().startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"{text!r} has no scheme: use http://HOST:PORT")
    return text


def _add_config_args(p: argparse.ArgumentParser, required: bool = True) -> None:
    env_config = os.environ.get("PARALLEL_RL_CONFIG")
    p.add_argument(
        "-c",
        "--config",
        required=required and not env_config,
        default=env_config,
        help="config file: Python defining main_config, or YAML (.yaml, .yml) with the same keys "
        "(env PARALLEL_RL_CONFIG)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set policy.learn.batch_size=128 (repeatable; the value is a JSON "
        "literal, inf or -inf, else a string)",
    )


def _add_server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=None, help="address to bind (default from config, 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=None, help="port to bind; 0 lets the OS pick (printed)")
    p.add_argument(
        "--shared-dir",
        default=None,
        help="shared store: a local path, file://, or s3://bucket/prefix (overrides parallel.shared_dir)",
    )


def _add_coordinator_url(p: argparse.ArgumentParser, default: object = None) -> None:
    p.add_argument(
        "--coordinator",
        type=coordinator_url,
        default=os.environ.get("PARALLEL_RL_COORDINATOR") if default is None else default,
        help="coordinator URL, e.g. http://127.0.0.1:8000 (env PARALLEL_RL_COORDINATOR)",
    )


def _client_parent() -> argparse.ArgumentParser:
    """The client options (--coordinator, --json, --token-file), accepted before or after every client sub-command.

    A sub-command's copy defaults to SUPPRESS, so a value given before it is not overwritten."""
    p = argparse.ArgumentParser(add_help=False)
    _add_coordinator_url(p, default=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON, not a table")
    _add_token_file(p, default=argparse.SUPPRESS)
    return p


def _add_token_file(p: argparse.ArgumentParser, default: object = None) -> None:
    p.add_argument(
        "--token-file",
        default=default,
        metavar="PATH",
        help="read the cluster token from PATH (the file `parallel-rl run` prints: `token: in PATH`); "
        "default: env PARALLEL_RL_TOKEN",
    )


def _add_lab_args(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument(
        "--parallel",
        type=positive_int,
        default=None,
        metavar="K",
        help="trials trained at once (default 1; with --service every trial: the pool queues them)",
    )
    p.add_argument(
        "--service",
        default=None,
        metavar="URL",
        help="train the trials as runs of this service (parallel-rl serve) on its pool of workers (a cluster "
        "config; pbt: each member's step a run started from its last checkpoint); the token from --token-file or "
        "PARALLEL_RL_TOKEN",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help=f"where the trials' directories, logs and the table go (default: <exp_name>-{command})",
    )
    p.add_argument(
        "--sampler-seed",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="seed of the sampler that draws the settings (default 0)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parallel-rl", description="Distributed RL training service.")
    # client options may also come before the sub-command: `parallel-rl --coordinator URL status`
    _add_coordinator_url(parser)
    parser.add_argument("--json", action="store_true", help="client commands: print JSON, not a table")
    _add_token_file(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serial", help="train in one process (serial pipeline)")
    _add_config_args(p)
    p.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help="continue the serial run whose experiment directory is DIR (policy, optimizer, env steps, "
        "train iterations, best eval return; the replay buffer starts empty)",
    )

    p = sub.add_parser("run", help="run a whole cluster as local processes")
    _add_config_args(p)
    p.add_argument("--collectors", type=positive_int, default=2, help="number of collector processes (default 2)")
    p.add_argument("--port", type=port_number, default=None, help="coordinator REST port (0: OS picks)")
    p.add_argument("--host", default=None, help="coordinator bind address")
    p.add_argument(
        "--shared-dir",
        default=None,
        help="shared store: a local path, file://, or s3://bucket/prefix (overrides parallel.shared_dir)",
    )
    p.add_argument(
        "--resume",
        metavar="DIR",
        default=None,
        help="continue the interrupted run whose shared directory is DIR (counters, buffer, policy, "
        "eval history, learner state)",
    )

    p = sub.add_parser("coordinator", help="run the coordinator (master)")
    _add_config_args(p)
    _add_server_args(p)
    p.add_argument(
        "--advertise", default=None, help="URL workers use to reach the coordinator (default http://HOST:PORT)"
    )
    fresh = p.add_mutually_exclusive_group()
    fresh.add_argument(
        "--resume",
        action="store_true",
        help="require saved coordinator state in the shared directory and continue from it "
        "(without this flag saved state is resumed too; with none, it starts fresh)",
    )
    fresh.add_argument(
        "--fresh", action="store_true", help="discard saved coordinator state in the shared directory and start over"
    )
    p.add_argument(
        "--linger",
        action="store_true",
        help="when training ends, let the workers go but keep serving the REST API, /metrics and the "
        "dashboard until stopped (SIGTERM/Ctrl-C); the exit code is still the run's outcome",
    )

    for role in ("learner", "collector"):
        p = sub.add_parser(role, help=f"run a {role} slave that registers with a coordinator")
        _add_config_args(p, required=False)
        _add_server_args(p)
        _add_coordinator_url(p)
        p.add_argument(
            "--advertise",
            default=None,
            help="URL the coordinator should use to reach this worker (default http://HOST:PORT)",
        )
        p.add_argument(
            "--worker-id",
            default=None,
            help="the worker id to ask the coordinator for (given when free; default: it picks)",
        )
        p.add_argument(
            "--insecure-no-token",
            action="store_true",
            help="start without PARALLEL_RL_TOKEN: anybody who reaches the port can connect this worker "
            "and choose what it imports and runs (local experiments only; logged loudly)",
        )
        p.add_argument(
            "--max-tasks",
            type=int,
            default=0,
            help="exit after this many tasks (0: no limit; evaluations run inside a collector task do not count)",
        )

    p = sub.add_parser(
        "learner-rank",
        help="run learner rank $RANK of $WORLD_SIZE (parallel.learner.world_size), "
        "joining rank 0 at $MASTER_ADDR:$MASTER_PORT",
    )
    p.add_argument(
        "--shared-dir", default=None, help="the shared store's root on this host (default: the path rank 0 uses)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds the rendezvous and each collective may wait (parallel.learner.collective_timeout)",
    )
    p.add_argument(
        "--rejoin",
        action="store_true",
        help="after a group ends (its task, a lost rank), join the next one at the same address; for "
        "ranks started on their own (compose, other hosts), not by the learner",
    )

    p = sub.add_parser(
        "slurm",
        help="run one training as a Slurm batch job: render its sbatch script into the run directory and submit it",
    )
    _add_config_args(p)
    p.add_argument("--collectors", type=positive_int, default=2, metavar="N", help="collector tasks (default 2)")
    p.add_argument("--partition", default=None, metavar="P", help="the Slurm partition (default: the cluster's)")
    p.add_argument("--gres", default=None, metavar="GRES", help="the learner's generic resources, e.g. gpu:1")
    p.add_argument(
        "--shared-dir",
        default=None,
        metavar="DIR",
        help="shared store on the cluster's filesystem, or s3://bucket/prefix (overrides "
        "parallel.shared_dir); the script, token file and output go there (s3: the experiment dir)",
    )
    p.add_argument(
        "--port",
        type=port_number,
        default=None,
        metavar="P",
        help="the coordinator's REST port on its node (default: 20000 + job id %% 12000)",
    )
    p.add_argument(
        "--sbatch",
        dest="sbatch_options",
        action="append",
        default=[],
        metavar="OPTION",
        help="one more #SBATCH line, e.g. --sbatch=--time=02:00:00 (repeatable)",
    )
    fresh = p.add_mutually_exclusive_group()
    fresh.add_argument(
        "--resume",
        action="store_true",
        help="continue the training saved in the shared directory (a requeued job does so itself)",
    )
    fresh.add_argument(
        "--join",
        action="store_true",
        help="submit a job of --collectors collectors that join the training running in the shared directory",
    )
    p.add_argument("--render-only", action="store_true", help="write the script and the token file; do not submit")

    p = sub.add_parser(
        "sweep", help="seeds, a grid and random settings over one config: one training per trial, results in one table"
    )
    _add_config_args(p)
    p.add_argument(
        "--seeds",
        default=None,
        metavar="0-4|0,2,5",
        help="the seeds of every setting: a range (both ends in) or a list (default: the config's seed)",
    )
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="a config key and its values, as JSON literals (else strings); every combination of the "
        "--grid keys runs (repeatable)",
    )
    p.add_argument(
        "--random",
        type=positive_int,
        default=None,
        metavar="N",
        help="N random draws of the --space file's settings (Optuna's random sampler)",
    )
    p.add_argument(
        "--space",
        default=None,
        metavar="SPACE.py",
        help="a Python file defining def space(trial) -> {dotted.key: value} (Optuna's suggest_* API)",
    )
    _add_lab_args(p, "sweep")

    p = sub.add_parser(
        "tune",
        help="hyperparameter search with Optuna: TPE sampling, a median pruner fed by each "
        "trial's evaluation curve, the study in SQLite (rerun: resumed)",
    )
    _add_config_args(p)
    p.add_argument(
        "--trials",
        type=positive_int,
        required=True,
        metavar="N",
        help="the study's total of finished trials (a rerun counts the earlier ones and adds the rest)",
    )
    p.add_argument(
        "--space",
        required=True,
        metavar="SPACE.py",
        help="a Python file defining def space(trial) -> {dotted.key: value} (Optuna's suggest_* API)",
    )
    p.add_argument(
        "--storage",
        default=None,
        metavar="sqlite:///DIR/study.db",
        help="the study's storage (default sqlite:///OUT/study.db)",
    )
    p.add_argument("--study", default=None, metavar="NAME", help="the study's name (default: the config's name)")
    p.add_argument(
        "--startup-trials",
        type=positive_int,
        default=5,
        metavar="N",
        help="trials sampled at random and never pruned before TPE and the median pruner start (default 5)",
    )
    p.add_argument(
        "--warmup-steps",
        type=non_negative_int,
        default=0,
        metavar="ENV_STEPS",
        help="a trial is not pruned before this many env steps (default 0)",
    )
    p.add_argument(
        "--report-every",
        type=non_negative_int,
        default=0,
        metavar="ENV_STEPS",
        help="report each trial's curve to the pruner at the multiples of this many env steps (the "
        "newest evaluation at each), so that trials evaluated at different env steps (cluster "
        "configs) are compared at the same ones (default 0: each evaluation at its env step)",
    )
    p.add_argument(
        "--seeds",
        default=None,
        metavar="0-2|0,2,5",
        help="train every trial once per seed (a range, both ends in, or a list) and take the median of their "
        "values: one seed's luck decides less (no pruning then; default: one training, the config's seed)",
    )
    p.add_argument(
        "--objective",
        choices=["return", "solve-steps"],
        default="return",
        help="what the search optimises: return (the final eval return, maximised; the default) or solve-steps "
        "(the env steps to reach the config's stop value, minimised; a trial that does not reach it within its "
        "budget counts twice its env steps; no pruning)",
    )
    _add_lab_args(p, "tune")

    p = sub.add_parser(
        "pbt",
        help="population-based training: K members train in steps of T env steps; after each, the bottom "
        "quantile copies the weights and hyperparameters of the top and perturbs them",
    )
    _add_config_args(p)
    p.add_argument("--population", type=int, required=True, metavar="K", help="members (>= 2)")
    p.add_argument(
        "--interval", type=int, required=True, metavar="T", help="env steps each member trains between exploits"
    )
    p.add_argument(
        "--space",
        required=True,
        metavar="SPACE.py",
        help="a Python file defining def space(trial) -> {dotted.key: value} (Optuna's suggest_* API): the "
        "hyperparameters members draw and perturb",
    )
    p.add_argument(
        "--quantile",
        type=float,
        default=0.25,
        metavar="Q",
        help="the fraction at each end of the ranking: the bottom Q copies the top Q (in (0, 0.5], default 0.25)",
    )
    p.add_argument(
        "--perturb",
        default="0.8,1.2",
        metavar="F1,F2",
        help="explore: each copied hyperparameter is multiplied by one of these factors (default 0.8,1.2)",
    )
    p.add_argument(
        "--resample-probability",
        type=float,
        default=0.25,
        metavar="P",
        help="explore: the chance a hyperparameter is drawn again from the space instead (default 0.25)",
    )
    length = p.add_mutually_exclusive_group()
    length.add_argument("--generations", type=int, default=None, metavar="G", help="train G steps of T env steps")
    length.add_argument(
        "--max-env-step",
        type=int,
        default=None,
        metavar="N",
        help="train each member to N env steps (default: the config's run.max_env_step: serial.max_env_step, parallel.commander.max_env_step)",
    )
    _add_lab_args(p, "pbt")

    from .after.commands import add_parsers as add_after_training

    add_after_training(sub, _add_config_args)  # eval, plot, compare, export
    from .service.commands import add_parsers as add_service

    add_service(sub, _add_config_args, _add_token_file, port_number, positive_int)  # serve, runs

    client = [_client_parent()]
    sub.add_parser("status", help="cluster summary", parents=client)

    p = sub.add_parser("tasks", help="list tasks", parents=client)
    p.add_argument("--kind", choices=["collector", "learner", "evaluator"])
    p.add_argument("--state", choices=["pending", "running", "finished", "failed", "cancelled"])

    p = sub.add_parser("collectors", help="list, add or remove collectors", parents=client)
    csub = p.add_subparsers(dest="action", metavar="ACTION")
    a = csub.add_parser(
        "add",
        help="add a running collector slave by URL; without one, `parallel-rl run` starts one more collector",
        parents=client,
    )
    a.add_argument("url", nargs="?", default=None)
    r = csub.add_parser("remove", help="remove a collector by worker id", parents=client)
    r.add_argument("worker_id")
    return parser


def cmd_serial(args: argparse.Namespace) -> int:
    """Ctrl-C and SIGTERM are heard from the first line and acted on between two steps of the training (after a
    collect or an evaluation: never inside one, where an exception could leave a lock or a file half done). The
    handler only notes the signal (the main thread runs it between two bytecodes: at once, whatever else runs); a
    second one leaves at once. The handlers before are put back when the command returns (the CLI's fuzzer runs
    commands in its own process)."""
    from .runtime import die_with_parent, signal_exit_code

    heard: List[str] = []
    trial: List[bool] = []  # started by a lab's sweep: it stops this with SIGINT once, then SIGTERM after its grace

    def on_signal(number: int, frame: object) -> None:
        if heard and trial and number == signal.SIGINT:
            return  # the sweep's SIGINT again (a sweep killed with SIGKILL sends it once per thread): one stop
        heard.append(signal.Signals(number).name)
        if len(heard) > 1:  # asked twice (or the lab's SIGTERM after its grace): leave now, without saving more
            try:
                os.write(2, f"parallel-rl serial: {heard[-1]} again: leaving at once\n".encode())
            except OSError:  # nobody reads stderr any more
                pass
            os._exit(signal_exit_code(heard[-1]))

    before = {number: signal.signal(number, on_signal) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        # a lab's trial: Ctrl-C (save, stop) when its sweep dies, SIGKILL too
        if die_with_parent(signum=signal.SIGINT):
            trial.append(True)
        return _serial(args, heard)
    finally:
        for number, handler in before.items():  # None: one not set from Python
            signal.signal(number, signal.SIG_DFL if handler is None else handler)


def _serial(args: argparse.Namespace, heard: List[str]) -> int:
    from .config import load_config
    from .entry.serial import serial_pipeline
    from .errors import ConfigError
    from .progress import ProgressReporter
    from .runtime import outcome_exit_code, setup_process, signal_exit_code, silence_output

    from .envs.fit import check_env_fits

    cfg = load_config(args.config, args.overrides, mode="serial")
    check_env_fits(cfg)
    setup_process(cfg)
    from .envs.multiagent import is_battle_env

    pipeline, extra = serial_pipeline, {"resume": args.resume} if args.resume else {}
    if is_battle_env(cfg.env):  # a two-player game: the self-play pipeline
        if args.resume:
            raise ConfigError(
                f"--resume {args.resume}: self-play runs (two-player games) cannot be resumed yet; "
                f"start over without --resume"
            )
        from .entry.selfplay import selfplay_pipeline as pipeline
    try:
        # off a terminal a line per evaluation (min_interval inf: the forced updates only), as before the bar
        with ProgressReporter(cfg.run.stop_value, name="serial", min_interval=math.inf) as reporter:

            def progress(info: dict) -> None:
                """After an evaluation (its info: a line), or after a collect (numbers for the bar); a stop
                signal heard meanwhile ends the training here (the serial pipeline saves its state)."""
                evaluated = "eval_episode_return_mean" in info
                try:
                    reporter.update(
                        info["envstep"],
                        info["train_iter"],
                        info.get("eval_episode_return_mean", math.nan),
                        best_return=info.get("best_return", math.nan),
                        force=evaluated,
                        train_return=info.get("train_return", math.nan),
                    )
                except BrokenPipeError:
                    # the reader of this output is gone (a lab's sweep killed with SIGKILL closes the pipe before
                    # its SIGINT arrives): stop and save as at Ctrl-C, with nowhere left to print to
                    silence_output()
                    raise KeyboardInterrupt from None
                if heard:
                    raise KeyboardInterrupt

            if heard:
                raise KeyboardInterrupt
            result = pipeline(cfg, progress=progress, **extra)
    except KeyboardInterrupt:
        name = heard[0] if heard else "SIGINT"
        if pipeline is serial_pipeline:
            print(
                f"parallel-rl serial: stopped by {name}; continue with: parallel-rl serial -c {args.config} "
                f"--resume {os.path.abspath(cfg.exp_name)} (and the same --set)",
                file=sys.stderr,
                flush=True,
            )
        if name == "SIGINT":
            raise  # main's one line: interrupted, exit 130
        return signal_exit_code(name)
    print(result.summary(), flush=True)
    code = outcome_exit_code("solved" if result.solved else "stopped", cfg.run.stop_value)
    if code:
        print(f"parallel-rl serial: {result.reason} before reaching the stop value", file=sys.stderr)
    return code


def cmd_slurm(args: argparse.Namespace) -> int:
    from .commands import _load_checked
    from .entry.slurm import job_for, submit_job

    cfg = _load_checked(args)
    job = job_for(
        cfg,
        args.config,
        args.overrides,
        args.collectors,
        args.shared_dir,
        partition=args.partition,
        gres=args.gres,
        port=args.port or None,
        resume=args.resume,
        join=args.join,
        sbatch_options=tuple(args.sbatch_options),
    )
    submit_job(job, render_only=args.render_only)
    return 0


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "serial":
        return cmd_serial(args)
    if args.command == "slurm":
        return cmd_slurm(args)
    from .after.commands import COMMANDS as AFTER_TRAINING

    if args.command in AFTER_TRAINING:
        return AFTER_TRAINING[args.command](args)
    from .service.commands import COMMANDS as SERVICE

    if args.command in SERVICE:
        return SERVICE[args.command](args)
    from . import commands  # the cluster commands live beside the servers they start

    return commands.dispatch(args)


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _dispatch(args)
    except ParallelRLError as exc:
        print(f"parallel-rl {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"parallel-rl {args.command}: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    """The console script: run a command, then leave without interpreter teardown.

    Every command closes its own files, servers and connections before it
    returns; what is left is Python's finalization, which takes 0.4-1.1 s
    once torch is imported (module teardown, C++ destructors) - a third of a
    cluster's shutdown. Flush what is buffered and exit at once.
    """
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
