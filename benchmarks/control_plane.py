"""Heartbeat latency of a coordinator under many long-polling collectors, next to an idle baseline.

    .venv/bin/python benchmarks/control_plane.py [--collectors 256] [--seconds 20]

A real coordinator process (`parallel-rl coordinator`, 127.0.0.1, shipped config with the
learner never coming, so every collector is throttled) and, in this process, N simulated
collectors registered through the REST API (one small stub server answers the coordinator's
calls for all of them, at http://127.0.0.1:PORT/w<i>). Each simulated collector has two
threads, as a real one does: a heartbeat every second (timed), and a throttled collector's
long-poll (`wait_for_allowance` 1 s) again and again. Each collector's heartbeats and first
long-poll start at a random phase within the second (seeded), as collectors started and
throttled at different moments do; 256 threads started together would beat in one burst.

1. Baseline: the heartbeats alone for a few seconds (no long-polls).
2. Loaded: heartbeats while all N collectors long-poll.
Reports heartbeat p50/p99/max for both, their ratio, and how many workers the coordinator
marked lost (target: p99 <= 100 ms loaded, none lost).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
from flask import Flask, jsonify, request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from parallel_rl.errors import ParallelRLError  # noqa: E402
from parallel_rl.transport import HttpClient, ServerThread, slave_proof  # noqa: E402


def stub_slaves(token: str) -> tuple[ServerThread, dict]:
    """One server answering as every simulated collector: /w<i>/slave/v1/... ; leases land in ``leases``.
    Each answers the coordinator's challenge as a slave holding ``token`` does."""
    app = Flask("stub-collectors")
    leases: dict = {}

    @app.get("/<w>/slave/v1/health")
    def health(w):
        address = f"{request.host_url.rstrip('/')}/{w}"
        challenge = request.args.get("challenge", "")
        return jsonify(
            {
                "status": "ok",
                "kind": "collector",
                "worker_id": None,
                "pid": None,
                "running": [],
                "address": address,
                "proof": slave_proof(token, challenge, address),
            }
        )

    @app.post("/<w>/slave/v1/connect")
    def connect(w):
        body = request.get_json()
        leases[w] = (body["worker_id"], body["lease"])
        return jsonify({"status": "connected", "worker_id": body["worker_id"]})

    @app.post("/<w>/slave/v1/tasks")
    def tasks(w):
        return jsonify({"status": "accepted", "task_id": request.get_json()["task_id"]}), 202

    @app.route("/<w>/slave/v1/<path:rest>", methods=["POST", "DELETE"])
    def other(w, rest):
        return jsonify({"status": "ok"})

    # the coordinator keeps a connection open to every worker: one per simulated collector
    return ServerThread(app, threads=32, name="stub", connection_limit=4096).start(), leases


def long_poll_process(url, token, workers, phases, start, stop, results) -> None:
    """Every simulated collector's long-poll loop (a throttled collector's `wait_for_allowance` 1 s, again and
    again), in a process of its own; puts ([answered, refused with retry_after], failures) on ``results``."""
    polls, failures = [0, 0], []

    def loop(worker_id, lease, phase):
        client = HttpClient(url, token, timeout=15)
        client.set_lease(lease)
        if stop.wait(phase):  # spread over the first second, as collectors throttled at different moments
            return
        while not stop.is_set():
            try:
                answer = client.post(
                    f"/api/v1/workers/{worker_id}/metadata", {"messages": [], "wait_for_allowance": 1.0}, retries=0
                )
            except ParallelRLError as exc:
                failures.append(f"{worker_id} long-poll: {exc}")
                stop.wait(1.0)
                continue
            polls[0] += 1
            if answer.get("retry_after"):
                polls[1] += 1
                stop.wait(float(answer["retry_after"]))

    start.wait(120)
    threads = [
        threading.Thread(target=loop, args=(w, lease, phase), daemon=True) for (w, lease), phase in zip(workers, phases)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    results.put((polls, failures))


def heartbeat_buckets(url: str) -> dict:
    """From the coordinator's /metrics: the share of heartbeats it answered within 10 ms and 100 ms."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    counts = {
        float(le): float(v)
        for le, v in re.findall(
            r'^parallel_rl_control_message_seconds_bucket\{endpoint="heartbeat",le="([^"]+)"\} (\S+)$', text, re.M
        )
    }
    total = counts.get(float("inf")) or max(counts.values(), default=0.0)
    return {le: counts.get(le, 0.0) / total for le in (0.01, 0.1)} if total else {}


def percentiles(samples: list) -> dict:
    ms = np.array(samples) * 1000
    return {
        "n": len(ms),
        "p50": float(np.percentile(ms, 50)),
        "p99": float(np.percentile(ms, 99)),
        "max": float(ms.max()),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--collectors", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--baseline-seconds", type=float, default=5.0)
    args = parser.parse_args()
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as tmp:
        proc, log = start_coordinator(
            tmp, token, ["--set", "parallel.commander.warmup_env_steps=0", "--set", "parallel.commander.max_seconds=0"]
        )
        try:
            return run(args, proc, log, token)
        finally:
            proc.terminate()
            proc.wait(30)
            log.close()


def start_coordinator(tmp: str, token: str, extra: list) -> tuple:
    """`parallel-rl coordinator` (shipped CartPole config, shared dir ``tmp``/shared) and its log file."""
    env = {**os.environ, "PARALLEL_RL_TOKEN": token, "PYTHONPATH": ROOT}
    log = open(os.path.join(tmp, "coordinator.log"), "w+")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "parallel_rl",
            "coordinator",
            "-c",
            os.path.join(ROOT, "configs/cartpole_dqn_parallel.py"),
            "--port",
            "0",
            "--shared-dir",
            os.path.join(tmp, "shared"),
            "--set",
            f"exp_name={tmp}/exp",
            *extra,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    return proc, log


def coordinator_url(proc, log) -> str:
    """The coordinator's base URL, from its first lines (within 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        log.seek(0)
        found = re.search(r"^REST API: (http://127\.0\.0\.1:\d+)/api/v1$", log.read(), re.M)
        if found:
            return found.group(1)
        if proc.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            raise SystemExit(f"coordinator did not start:\n{log.read()[-2000:]}")
        time.sleep(0.1)  # waiting for a subprocess's first line (bounded by the deadline)


def register_stubs(url: str, token: str, stub: ServerThread, n: int) -> HttpClient:
    """Add ``n`` simulated collectors (``stub``'s /w<i>) through the REST API; returns the admin client."""
    admin = HttpClient(url, token, timeout=30)
    for i in range(n):
        for attempt in range(3):  # on a loaded machine the stub may answer the health check late
            try:
                admin.post("/api/v1/collectors", {"address": f"{stub.url}/w{i}"})
                break
            except ParallelRLError as exc:
                if attempt == 2:
                    raise
                print(f"registering w{i} again: {exc}", flush=True)
    return admin


def run(args, proc, log, token) -> int:
    url = coordinator_url(proc, log)
    stub, leases = stub_slaves(token)
    admin = register_stubs(url, token, stub, args.collectors)
    print(f"{args.collectors} simulated collectors registered at {url}", flush=True)

    stop, polling = threading.Event(), threading.Event()
    beats: dict = {"baseline": [], "loaded": []}
    failures: list = []

    def heartbeats(worker_id, lease, phase):
        client = HttpClient(url, token, timeout=10)
        client.set_lease(lease)
        phase_at_start = None
        # every second, at this worker's own phase: real workers start at different times, so their
        # heartbeats spread over the interval (256 threads started together would beat in one burst)
        next_beat = time.monotonic() + phase
        while not stop.wait(max(0.0, next_beat - time.monotonic())):
            next_beat += 1.0
            phase_at_start = "loaded" if polling.is_set() else "baseline"
            start = time.perf_counter()
            try:
                client.post(f"/api/v1/workers/{worker_id}/heartbeat", {"problems": []}, retries=0)
            except ParallelRLError as exc:
                failures.append(f"{worker_id}: {exc}")
                continue
            beats[phase_at_start].append(time.perf_counter() - start)

    # the long-polls run in a process of their own: the timed heartbeats must not wait for this process's
    # GIL behind 256 more threads (a real collector's two threads share a process with nobody else's)
    ctx = multiprocessing.get_context("spawn")
    poll_start, poll_stop, poll_results = ctx.Event(), ctx.Event(), ctx.Queue()
    rng = np.random.default_rng(0)
    pollers = ctx.Process(
        target=long_poll_process,
        args=(
            url,
            token,
            list(leases.values()),
            list(rng.uniform(0, 1, len(leases))),
            poll_start,
            poll_stop,
            poll_results,
        ),
        daemon=True,
    )
    pollers.start()
    threads = [
        threading.Thread(target=heartbeats, args=(worker_id, lease, rng.uniform(0, 1)), daemon=True)
        for worker_id, lease in leases.values()
    ]
    for t in threads:
        t.start()
    time.sleep(args.baseline_seconds)  # the measurement window
    polling.set()
    poll_start.set()
    time.sleep(args.seconds)  # the measurement window
    stop.set()
    poll_stop.set()
    for t in threads:
        t.join(20)
    polls, poll_failures = poll_results.get(timeout=60)
    failures += poll_failures
    pollers.join(30)
    workers = admin.get("/api/v1/collectors")["collectors"]
    server_side = heartbeat_buckets(url)
    lost = [w["worker_id"] for w in workers if w["state"] == "lost"]
    stub.close()
    base, loaded = percentiles(beats["baseline"]), percentiles(beats["loaded"])
    print(
        f"baseline (no long-polls): {base['n']} heartbeats, p50 {base['p50']:.1f} ms, p99 {base['p99']:.1f} ms, "
        f"max {base['max']:.1f} ms"
    )
    print(
        f"{args.collectors} collectors long-polling: {loaded['n']} heartbeats, p50 {loaded['p50']:.1f} ms, "
        f"p99 {loaded['p99']:.1f} ms, max {loaded['max']:.1f} ms; {polls[0]} long-polls answered, "
        f"{polls[1]} of them 'retry_after' (no slot)"
    )
    print(
        f"heartbeat p99 loaded / baseline: {loaded['p99'] / base['p99']:.2f}; target p99 <= 100 ms: "
        f"{'met' if loaded['p99'] <= 100 else 'NOT met'}"
    )
    if server_side:
        print(
            f"inside the coordinator (Flask, from the request's start to its answer; queueing in the HTTP server and "
            f"the client not included): {server_side[0.1]:.2%} of heartbeats within 100 ms, "
            f"{server_side[0.01]:.2%} within 10 ms"
        )
    print(f"workers marked lost: {len(lost)} {lost[:5]}; failed calls: {len(failures)} {failures[:3]}")
    return 0 if not lost and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
