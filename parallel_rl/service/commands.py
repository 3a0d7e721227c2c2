"""The service's commands: ``parallel-rl serve --dir DIR`` (runs and the pool) and the client ``parallel-rl runs
submit | list | stop`` against ``--service URL``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
from typing import Callable, List

from ..commands import client_command
from ..errors import ConfigError

logger = logging.getLogger(__name__)
TOKEN_FILE = "service.token"
RUN_COLUMNS = ["id", "name", "state", "weight", "env_steps", "last_eval_return", "workers", "reason"]


def add_parsers(sub, add_config_args: Callable, add_token_file: Callable, port_number, positive_int) -> None:
    p = sub.add_parser("serve", help="the service: several trainings (runs) on one pool of workers (REST: runs)")
    p.add_argument("--dir", required=True, metavar="DIR", help="the runs' directories and the service's state")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=port_number, default=0, help="port to bind; 0 lets the OS pick (printed)")
    p.add_argument("--collectors", type=positive_int, default=2, metavar="N", help="collector slots (default 2)")
    p.add_argument("--learners", type=positive_int, default=1, metavar="M", help="learner slots: runs at once (1)")

    client = argparse.ArgumentParser(add_help=False)  # accepted before or after the action, as other clients
    client.add_argument(
        "--service",
        default=argparse.SUPPRESS,
        metavar="URL",
        help="the service's URL, e.g. http://127.0.0.1:8000 (env PARALLEL_RL_SERVICE)",
    )
    client.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON, not a table")
    add_token_file(client, default=argparse.SUPPRESS)
    parents = [client]
    p = sub.add_parser("runs", help="submit, list and stop the runs of a service (parallel-rl serve)", parents=parents)
    rsub = p.add_subparsers(dest="action", metavar="ACTION")
    s = rsub.add_parser("submit", help="submit a training: queued until the pool can start it", parents=parents)
    add_config_args(s)
    s.add_argument("--weight", type=float, default=1.0, help="its share of the collectors beyond the minimum (1)")
    s.add_argument("--name", default=None, help="a label (default: the config file's name)")
    rsub.add_parser("list", help="every run of the service", parents=parents)
    g = rsub.add_parser("show", help="one run: summary, curve, tasks (JSON)", parents=parents)
    g.add_argument("run_id")
    t = rsub.add_parser("stop", help="stop a run; its data stays", parents=parents)
    t.add_argument("run_id")


def _client(args: argparse.Namespace):
    from ..transport import HttpClient, token_from_env, token_from_file

    url = getattr(args, "service", None) or os.environ.get("PARALLEL_RL_SERVICE")
    if not url or not url.lower().startswith(("http://", "https://")):
        raise ConfigError(f"runs: pass --service http://HOST:PORT (or set PARALLEL_RL_SERVICE), got {url!r}")
    token = token_from_file(args.token_file) if getattr(args, "token_file", None) else token_from_env()
    return HttpClient(url, token, timeout=30.0, max_retries=1)


@client_command
def cmd_runs(args: argparse.Namespace) -> int:
    return _runs(args, _client(args))


def _runs(args: argparse.Namespace, client) -> int:
    from ..commands import render_table

    if args.action == "submit":
        body = {"config": os.path.abspath(args.config), "overrides": args.overrides, "weight": args.weight}
        data = client.post("/api/v1/runs", {**body, **({"name": args.name} if args.name else {})})
        rows = [data]
    elif args.action == "stop":
        rows = [data := client.delete(f"/api/v1/runs/{args.run_id}")]
    elif args.action == "show":
        print(json.dumps(client.get(f"/api/v1/runs/{args.run_id}"), indent=2))
        return 0
    else:
        data = client.get("/api/v1/runs")
        rows = data["runs"]
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2))
    else:
        print(render_table(rows, RUN_COLUMNS))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from coordinator_app.service import serve_service

    from ..after.compare import service_comparison
    from ..entry import forkserver
    from ..runtime import on_signals, setup_logging, signal_exit_code
    from ..transport import TOKEN_ENV, new_token, write_token_file
    from .service import Service

    heard: List[str] = []
    done = threading.Event()

    def on_signal(name: str) -> None:
        heard.append(name)
        done.set()

    on_signals(on_signal)
    setup_logging()
    forkserver.start()  # its imports (torch, gymnasium, the roles) once: every worker of every run is a fork
    service = server = None
    try:
        service = Service(args.dir, args.learners, args.collectors)
        token = os.environ.get(TOKEN_ENV) or ""
        if not token:
            token = os.environ[TOKEN_ENV] = new_token()
            path = os.path.join(service.dir, TOKEN_FILE)
            write_token_file(path, token)
            print(f"token: in {path} (client commands: --token-file {path})", flush=True)
        server = serve_service(service, args.host, args.port, token, service_comparison).start()
        service.start()
        print(f"REST API: {server.url}/api/v1", flush=True)
        print(f"pool: {service.learners} learner slot(s), {service.collectors} collector slot(s)", flush=True)
        done.wait()  # until SIGINT/SIGTERM: the service runs until it is stopped
    finally:
        if service is not None:
            service.close()
        if server is not None:
            server.close()
        forkserver.stop()
    unended = [r.run_id for r in service.records if not r.state.ended]
    print(
        f"service stopped ({heard[0] if heard else 'error'}); "
        + (
            f"`parallel-rl serve --dir {service.dir}` resumes {', '.join(unended)}"
            if unended
            else "no run left to resume"
        ),
        flush=True,
    )
    # as the coordinator and the workers: Ctrl-C is 130 (at start-up too), SIGTERM a service's stop (0)
    return signal_exit_code(heard[0]) if heard and heard[0] == "SIGINT" else 0


COMMANDS = {"serve": cmd_serve, "runs": cmd_runs}
