"""The cluster commands of the CLI: roles (coordinator, learner, collector),
the local launcher (run) and the REST client for people (status, tasks, collectors)."""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import logging
import signal
import sys
import threading
from typing import Any, Callable, Dict, List, Sequence

from .errors import AuthError, ConfigError, ParallelRLError

logger = logging.getLogger(__name__)


def _load(args: argparse.Namespace):
    """The cluster's config (every command here is the cluster's: DI-engine's keys read as the cluster reads
    them, parallel.commander.*)."""
    from .config import load_config

    return load_config(getattr(args, "config", None), getattr(args, "overrides", []), mode="cluster")


def _load_checked(args: argparse.Namespace):
    """The config, checked against the env (spaces fit the algorithm), the machine (device) and what the
    cluster trains before any process starts."""
    from .config import load_cluster_config

    return load_cluster_config(getattr(args, "config", None), getattr(args, "overrides", []))


def _coordinator_address(args: argparse.Namespace, cfg) -> tuple:
    """(host, port) of the coordinator's REST API: the command line over the config (whose port is checked
    here: the command line's is checked by the parser)."""
    port = cfg.parallel.coordinator.port if args.port is None else args.port
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"parallel.coordinator.port={port!r} is not a port: use 0-65535 (0 lets the OS pick)")
    return args.host or cfg.parallel.coordinator.host, port


def _check_port_free(host: str, port: int, role: str) -> None:
    """A port given on the command line that cannot be bound fails now, before the imports of a worker
    (torch: 12 s on a busy box before the port was tried); the server's own bind says the same later."""
    import socket

    from .errors import BindError

    if not port:
        return
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        socket.create_server((host, port), family=family).close()
    except OSError as exc:
        raise BindError(
            f"{role}: cannot listen on {host}:{port}: {exc.strerror or exc}; another process holds "
            f"the port or the host is not an address of this machine: choose another --port (0 lets "
            f"the OS pick) or --host"
        ) from None


# ---- roles ---------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    from .entry import forkserver
    from .runtime import die_with_parent, on_signals

    on_signals()  # SIGINT/SIGTERM are heard from here on (never a KeyboardInterrupt); the launcher acts on them
    die_with_parent(signum=signal.SIGINT)  # a lab's trial: Ctrl-C (save, stop) when its sweep dies, SIGKILL too
    forkserver.start()  # its imports (torch, gymnasium, the roles) overlap the coordinator's boot
    try:
        from .entry.launcher import run_local_cluster
        from .runtime import setup_process

        cfg = _load_checked(args)
        setup_process(cfg, need_torch=False)
        host, port = _coordinator_address(args, cfg)
        return run_local_cluster(
            cfg, args.collectors, host, port, args.shared_dir, args.config, args.overrides, resume=args.resume
        )
    finally:  # every way out (a bad config, a port in use, a signal before the cluster): no fork server left
        forkserver.stop()


def cmd_coordinator(args: argparse.Namespace) -> int:
    from coordinator_app import serve_coordinator

    from .coordinator import Coordinator
    from .transport import token_from_env
    from .runtime import (
        freeze_startup_objects,
        on_signals,
        outcome_exit_code,
        run_storage,
        setup_process,
        signal_exit_code,
    )
    from .storage import lock_shared_dir

    cfg = _load_checked(args)
    setup_process(cfg, need_torch=False)
    storage = run_storage(cfg, args.shared_dir)  # fails fast
    token = token_from_env()
    if not token:  # made up here, it would have to be printed for the workers, and printed tokens end up in logs
        raise ConfigError(
            "set PARALLEL_RL_TOKEN (the cluster token) before starting the coordinator, e.g. "
            "export PARALLEL_RL_TOKEN=$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))'); "
            "`parallel-rl run` makes one for its own processes"
        )
    dir_lock = lock_shared_dir(storage, "parallel-rl coordinator")  # another run must not wipe it under us
    coordinator = Coordinator(cfg, storage, token)
    # bound before --fresh deletes anything: a port in use must not cost the saved state
    server = serve_coordinator(coordinator, *_coordinator_address(args, cfg), advertise=args.advertise)
    if args.fresh:
        removed = storage.reset()
        print(f"coordinator: --fresh: removed {removed} file(s) of an earlier run from {storage.root}", flush=True)
    elif coordinator.snapshots.resume():
        print(
            f"coordinator: resumed the saved state of {storage.root}: env_steps={coordinator.env_steps} "
            f"train_iter={coordinator.train_iter} buffer={coordinator.replay.count()}",
            flush=True,
        )
        if coordinator.system_shutdown_flag:  # the run had ended: reported (and served with --linger), not trained
            print(
                f"coordinator: the run in {storage.root} already ended {coordinator.state} "
                f"({coordinator.reason}); not training it again (--fresh starts a new run)",
                flush=True,
            )
    elif args.resume:
        raise ConfigError(
            f"coordinator --resume: no saved coordinator state in {storage.state_dir}; "
            f"pass the --shared-dir of the run to continue, or drop --resume to start fresh"
        )
    server.start()
    coordinator.start()
    freeze_startup_objects()
    print(f"REST API: {server.url}/api/v1", flush=True)
    interrupted: List[str] = []
    stopped = threading.Event()

    def stop(name: str) -> None:
        interrupted.append(name)
        stopped.set()
        coordinator.done_event.set()

    on_signals(stop)
    lingered = False
    try:
        coordinator.done_event.wait()
        if args.linger and not stopped.is_set():
            lingered = True
            coordinator.membership.release_workers()
            print(f"coordinator: {coordinator.state}: {coordinator.reason}", flush=True)
            print(
                f"coordinator: --linger: workers let go; still serving {server.url} (REST API, /metrics, "
                f"dashboard) until stopped",
                flush=True,
            )
            stopped.wait()
    finally:  # the server closes after the workers' final reports (bounded), not before
        coordinator.wind_down(float(cfg.parallel.coordinator.final_report_timeout))
        coordinator.close(notify_workers=True)
        server.close()
        coordinator.snapshots.save_state()  # after the workers' last reports: a restart starts exactly here
        dir_lock.release()
    if lingered:  # the exit code is the run's outcome, as without --linger
        print(f"coordinator: stopped by {interrupted[0]} (the run ended {coordinator.state})", flush=True)
        return outcome_exit_code(coordinator.state, cfg.run.stop_value)
    if interrupted:  # SIGTERM is a service's stop (docker compose stop): exit 0; Ctrl-C is an interruption
        print(f"coordinator: stopped by {interrupted[0]}", flush=True)
        return signal_exit_code(interrupted[0]) if interrupted[0] == "SIGINT" else 0
    print(f"coordinator: {coordinator.state}: {coordinator.reason}", flush=True)
    return outcome_exit_code(coordinator.state, cfg.run.stop_value)


def cmd_slave(args: argparse.Namespace) -> int:
    from .transport import token_from_env
    from .entry.roles import slave_class
    from .runtime import die_with_parent, on_signals, run_storage, setup_process, signal_exit_code

    die_with_parent()
    cfg = _load(args)
    _check_port_free(args.host or "127.0.0.1", args.port, args.command)  # before torch's import
    # a store we cannot use fails here, not when the coordinator connects us; before torch's import too
    storage = run_storage(cfg, args.shared_dir) if args.shared_dir else None
    setup_process(cfg, need_torch=True)
    wcfg = cfg.parallel.worker
    slave = slave_class(args.command)(
        args.coordinator,
        host=args.host or "127.0.0.1",
        port=args.port or 0,
        advertise=args.advertise,
        token=token_from_env(),
        shared_dir=args.shared_dir,
        max_tasks=args.max_tasks,
        request_timeout=wcfg.request_timeout,
        max_retries=wcfg.max_retries,
        worker_id=args.worker_id,
        insecure_no_token=args.insecure_no_token,
        storage=storage,
    )
    heard: List[str] = []

    def stop(name: str) -> None:
        heard.append(name)
        slave.request_stop()

    on_signals(stop)
    print(f"{args.command}: serving on {slave.address}", flush=True)
    if not args.coordinator:
        print(
            f"{args.command}: no --coordinator: waiting to be added with "
            f"`parallel-rl {args.command}s add {slave.address}`",
            flush=True,
        )
    try:
        slave.start()
    except ParallelRLError:
        slave.close()
        raise
    code = slave.run()
    if slave.fatal_error:
        print(f"parallel-rl {args.command}: {slave.fatal_error}", file=sys.stderr)
    if code == 0 and heard and heard[0] == "SIGINT":  # SIGTERM is a service's stop (exit 0), Ctrl-C an interruption
        return signal_exit_code(heard[0])
    return code


def cmd_learner_rank(args: argparse.Namespace) -> int:
    from .learner.aggregator import cmd_learner_rank as run

    return run(args)


# ---- REST client for people ---------------------------------------------------------------------
def client_command(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A REST client command (`status`, `tasks`, `collectors`, `runs`): a request its server refuses (an unknown
    id, a bad value: a 4xx other than the token's) or a server that cannot be reached is bad input, one line and
    exit 2 (:class:`ServiceRequestError`)."""
    from .errors import PeerUnavailableError, RemoteError, ServiceRequestError

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (RemoteError, PeerUnavailableError) as exc:
            raise ServiceRequestError(f"{exc}") from None

    return run


def _client(args: argparse.Namespace):
    """The client of the REST client commands; the token from ``--token-file`` when given, else the environment."""
    from .transport import HttpClient, token_from_env, token_from_file

    if not args.coordinator:
        raise ConfigError(f"{args.command}: pass --coordinator URL (or set PARALLEL_RL_COORDINATOR)")
    token = token_from_file(args.token_file) if args.token_file else token_from_env()
    return HttpClient(args.coordinator, token, timeout=5.0, max_retries=1)


def render_table(rows: Sequence[Dict[str, Any]], columns: Sequence[str]) -> str:
    """Plain aligned columns (what `kubectl get` prints)."""

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.3g}"
        if isinstance(value, dict):
            return " ".join(f"{k}={cell(v)}" for k, v in value.items())
        return str(value)

    table = [[c.upper() for c in columns]] + [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in table)


def readable_duration(seconds: float) -> str:
    """``3725.2`` -> ``1h 2m 5s``."""
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n]
    return " ".join(parts + [f"{secs}s"])


def readable_number(value: float) -> str:
    """A float as people read it: 4 significant digits, no exponent from 100 up (``0.02548707`` -> ``0.02549``,
    ``176.31`` -> ``176``, ``1000.0`` -> ``1000``)."""
    if value != value or value in (float("inf"), float("-inf")):  # NaN, infinities: as Python writes them
        return str(value)
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.4g}"


def readable_time(epoch: float) -> str:
    """Seconds since the epoch as a local date and time (``2026-11-28 04:00:39 UTC``)."""
    return datetime.datetime.fromtimestamp(epoch).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def readable(key: str, value: Any) -> str:
    """One value of ``GET /cluster`` for people: times (``*_at``, ``since``) as dates, ``uptime`` as a duration,
    floats rounded, nothing (None, "", []) as ``-``; a mapping as ``k=v`` pairs (counts of a kind by state as
    ``kind: state=n``, the zeros left out)."""
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)) and (key.endswith("_at") or key == "since"):
        return readable_time(value)
    if key == "uptime" and isinstance(value, (int, float)):
        return readable_duration(value)
    if isinstance(value, float):
        return readable_number(value)
    if isinstance(value, dict):
        return "  ".join(
            f"{k}: " + " ".join(f"{s}={n}" for s, n in v.items() if n)
            if isinstance(v, dict)
            else f"{k}={readable(k, v)}"
            for k, v in value.items()
        )
    if isinstance(value, list):
        return ",".join(readable(key, v) for v in value)
    return str(value)


@client_command
def cmd_status(args: argparse.Namespace) -> int:
    data = _client(args).get("/api/v1/cluster")
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    width = max(map(len, data), default=0)
    for key, value in data.items():
        print(f"{key:>{width}}: {readable(key, value)}")
    return 0


@client_command
def cmd_tasks(args: argparse.Namespace) -> int:
    params = {k: v for k, v in (("kind", args.kind), ("state", args.state)) if v}
    params["limit"] = 1000
    data = _client(args).get("/api/v1/tasks", params=params)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(render_table(data["tasks"], ["task_id", "kind", "state", "worker_id", "attempts", "progress", "error"]))
    return 0


WORKER_COLUMNS = [
    "worker_id",
    "address",
    "state",
    "current_task",
    "seconds_since_heartbeat",
    "env_steps",
    "policy_version",
]


@client_command
def cmd_collectors(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.action == "add":
        data = client.post("/api/v1/collectors", {"address": args.url} if args.url else {})
        rows = [data]
    elif args.action == "remove":
        data = client.delete(f"/api/v1/collectors/{args.worker_id}")
        rows = [data]
    else:
        data = client.get("/api/v1/collectors")
        rows = data["collectors"]
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(render_table(rows, WORKER_COLUMNS))
    return 0


# ---- a lab's experiments: sweep, tune, pbt (parallel_rl.lab) -----------------------------------------------------
def _lab_start(args: argparse.Namespace, command: str):
    """(configs, out dir, runner) of a sweep or search; a config that does not compile is exit 2 here."""
    import os

    from .lab import TrialConfigs

    configs = TrialConfigs(args.config, args.overrides)
    out = os.path.abspath(args.out or f"{configs.base.exp_name}-{command}")
    return configs, out


def _lab_runner(args: argparse.Namespace, configs, out: str):
    """The trials' runner: the service's pool (``--service URL``), else this machine's processes."""
    from .lab import ProcessRunner

    if not args.service:
        return ProcessRunner(args.config, args.overrides, out, configs.cluster)
    return _pool_runner(args, configs)


def _pool_runner(args: argparse.Namespace, configs):
    """The service's pool as a lab command's runner; a serial config is exit 2 (the pool trains cluster ones)."""
    from .lab.pool import PoolRunner
    from .transport import token_from_env, token_from_file

    if not configs.cluster:
        raise ConfigError(
            f"{args.command} --service: {args.config} is a serial config; the service trains cluster configs "
            f"(with a parallel section), e.g. configs/cartpole_ppo_parallel.py"
        )
    token = token_from_file(args.token_file) if args.token_file else token_from_env()
    return PoolRunner(args.service, token, args.config, args.overrides)


def _print_trial(command: str, result) -> None:
    print(
        f"{command}: trial {result.trial.number} {result.status}: {result.trial.label()} seed="
        f"{'config' if result.trial.seed is None else result.trial.seed} eval_return={result.eval_return:.4g} "
        f"env_steps={result.env_steps} wall={result.wall:.0f}s" + (f" ({result.note})" if result.note else ""),
        flush=True,
    )


def _stop_on_signals(stop: Callable[[], None]) -> List[str]:
    """A lab command's Ctrl-C and SIGTERM: ``stop`` (its trainings save and exit, no more start); the list the
    signals' names are put in, empty while none came."""
    from .runtime import on_signals

    heard: List[str] = []

    def heard_one(name: str) -> None:
        heard.append(name)
        stop()

    on_signals(heard_one)
    return heard


def _failures_exit(command: str, statuses: Sequence[str], what: str) -> int:
    """A lab command's exit: 0 when every one is done, else 1 with a line saying how many of them failed."""
    failed = sum(status != "done" for status in statuses)
    if failed:
        print(
            f"parallel-rl {command}: {failed} of {len(statuses)} {what}(s) failed; their reasons are in the table",
            file=sys.stderr,
        )
    return 1 if failed else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    import os

    from .lab.sweep import COLUMNS, RESULTS_NAME, check_out_dir, check_trials, plan, random_settings, run_sweep
    from .lab.trials import parse_grid, parse_seeds
    from .runtime import signal_exit_code

    seeds, grid = parse_seeds(args.seeds), parse_grid(args.grid)  # before anything is read or runs
    if (args.random is None) != (args.space is None):
        raise ConfigError("sweep: --random N and --space FILE go together (N draws of the space's settings)")
    configs, out = _lab_start(args, "sweep")
    check_out_dir(out, "sweep")
    random = random_settings(args.space, args.random, args.sampler_seed) if args.random else []
    trials = plan(configs, grid, seeds, random)
    reasons = check_trials(configs, trials)  # an unknown key: exit 2 before anything runs
    runner = _lab_runner(args, configs, out)
    parallel = args.parallel or (len(trials) if args.service else 1)
    heard = _stop_on_signals(runner.stop_all)
    where = f"on the pool of {args.service}" if args.service else "at a time"
    print(f"sweep: {len(trials)} trial(s), {parallel} {where}, in {out}", flush=True)
    results = run_sweep(trials, reasons, runner, parallel, out, on_result=lambda r: _print_trial("sweep", r))
    print(render_table([r.row() for r in results], COLUMNS), flush=True)
    table = os.path.join(out, RESULTS_NAME)
    if heard:
        print(
            f"sweep: interrupted ({heard[0]}); the table of what ran is in {table}, each trial's directory and "
            f"log in {out}",
            flush=True,
        )
        return signal_exit_code(heard[0])
    print(f"sweep: table in {table}", flush=True)
    return _failures_exit("sweep", [r.status for r in results], "trial")


def cmd_tune(args: argparse.Namespace) -> int:
    import os

    from .lab.trials import parse_seeds
    from .lab.tune import TABLE_NAME, Tuner, storage_url
    from .runtime import signal_exit_code

    seeds = parse_seeds(args.seeds)  # before anything is read or runs
    configs, out = _lab_start(args, "tune")
    study_name = args.study or os.path.splitext(os.path.basename(args.config))[0]
    storage = storage_url(args.storage, out)
    study_dir = os.path.join(out, study_name)
    tuner = Tuner(
        configs,
        args.space,
        _lab_runner(args, configs, study_dir),
        storage,
        study_name,
        seed=args.sampler_seed,
        startup_trials=args.startup_trials,
        warmup_steps=args.warmup_steps,
        report_every=args.report_every,
        objective=args.objective,
        seeds=seeds,
    )
    heard = _stop_on_signals(tuner.interrupt)
    if configs.cluster and not args.report_every:
        print(
            "tune: cluster trials evaluate at different env steps: pass --report-every ENV_STEPS for the pruner to "
            "compare them at the same ones",
            flush=True,
        )
    kept = tuner.finished()
    print(
        f"tune: study {study_name!r} in {storage}: {kept} finished trial(s) kept, up to {args.trials} in all; "
        f"trials in {study_dir}",
        flush=True,
    )
    try:
        tuner.optimize(args.trials, args.parallel or 1, on_result=lambda r: _print_trial("tune", r))
    finally:  # the table of what ran, an unknown key's stop included
        best = tuner.write_results(study_dir)
    print(render_table(tuner.rows(), tuner.columns), flush=True)
    print(f"tune: table in {os.path.join(study_dir, TABLE_NAME)}", flush=True)
    if best:
        print(
            f"tune: best trial {tuner.best().number} ({tuner.value_name} {tuner.best().value:g}); its config: {best}",
            flush=True,
        )
    if heard:
        print(
            f"tune: interrupted ({heard[0]}); the study is kept in {storage}: run the same command again to resume it",
            flush=True,
        )
        return signal_exit_code(heard[0])
    return 0


def cmd_pbt(args: argparse.Namespace) -> int:
    import os

    from .lab.members import PoolSteps, SerialSteps
    from .lab.pbt import LINEAGE_NAME, TABLE_NAME, PopulationTraining, SearchSpace, parse_options
    from .lab.sweep import check_out_dir
    from .runtime import signal_exit_code

    configs, out = _lab_start(args, "pbt")
    options = parse_options(
        args.population,
        args.interval,
        args.quantile,
        args.perturb,
        args.resample_probability,
        args.generations,
        args.max_env_step,
        config_max_env_step=int(configs.base.run.max_env_step),
        seed=args.sampler_seed,
    )  # before anything is written or runs
    head_start = int(configs.base.parallel.commander.warmup_env_steps) if configs.cluster else 0
    if options.interval <= head_start:  # each step a run: its learner may start after its collectors are done
        print(
            f"pbt: warning: a step of {options.interval} env steps is within the collectors' head start of "
            f"parallel.commander.warmup_env_steps={head_start}: a member's step can end before its first update "
            f"(nothing trained); raise --interval or lower warmup_env_steps",
            flush=True,
        )
    steps = PoolSteps(_pool_runner(args, configs)) if args.service else SerialSteps(args.config, args.overrides, out)
    check_out_dir(out, "pbt")
    if os.path.exists(os.path.join(out, LINEAGE_NAME)):  # a pool PBT's members leave no trial_ directories there
        raise ConfigError(f"--out {out} holds an earlier pbt's lineage; pass another --out (or remove that directory)")
    parallel = args.parallel or (options.population if args.service else 1)
    pbt = PopulationTraining(
        configs,
        SearchSpace(args.space, args.sampler_seed),
        steps,
        options,
        out,
        parallel=parallel,
        on_event=lambda line: print(line, flush=True),
    )
    heard = _stop_on_signals(pbt.interrupt)
    where = f"on the pool of {args.service}" if args.service else "at a time"
    print(
        f"pbt: {options.population} members, {options.generations} generation(s) of {options.interval} env steps "
        f"(to {options.max_env_step}), {parallel} {where}, in {out}",
        flush=True,
    )
    members = pbt.run()
    print(render_table(pbt.rows(), pbt.columns), flush=True)
    table = os.path.join(out, TABLE_NAME)
    if heard:
        print(
            f"pbt: interrupted ({heard[0]}); the table of what ran is in {table}, the lineage in "
            f"{os.path.join(out, LINEAGE_NAME)}",
            flush=True,
        )
        return signal_exit_code(heard[0])
    print(f"pbt: table in {table}, lineage in {os.path.join(out, LINEAGE_NAME)}", flush=True)
    return _failures_exit("pbt", [m.status for m in members], "member")


COMMANDS = {
    "run": cmd_run,
    "coordinator": cmd_coordinator,
    "learner": cmd_slave,
    "collector": cmd_slave,
    "learner-rank": cmd_learner_rank,
    "status": cmd_status,
    "tasks": cmd_tasks,
    "collectors": cmd_collectors,
    "sweep": cmd_sweep,
    "tune": cmd_tune,
    "pbt": cmd_pbt,
}


CLIENT_COMMANDS = ("status", "tasks", "collectors")


def dispatch(args: argparse.Namespace) -> int:
    try:
        return COMMANDS[args.command](args)
    except AuthError as exc:
        if args.command not in CLIENT_COMMANDS:
            raise
        raise AuthError(
            f"{exc}; pass --token-file PATH (`parallel-rl run` prints it: `token: in PATH`) or export "
            f"PARALLEL_RL_TOKEN, the cluster's token"
        ) from None
