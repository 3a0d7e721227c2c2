"""REST latency while the coordinator saves its state, with a full replay buffer.

    .venv/bin/python benchmarks/snapshot_latency.py [--seconds 10] [--rows 20000] [--league 0]

A coordinator with the CartPole cluster config, its buffer filled with ``--rows`` references (chunks of
1024 rows on a temporary shared disk), serves its REST API on 127.0.0.1. A client calls
``GET /api/v1/cluster`` back to back for ``--seconds`` twice: with snapshots off (the baseline, the
interval set beyond the measurement) and with a snapshot written continuously (interval 0.05 s, so
every request overlaps a write). Prints p50 / p99 / max of both and their ratio, and the time one
snapshot takes. ``--league N``: the tic-tac-toe self-play cluster config instead, its league holding N
snapshots (the last ``pool_size`` in the pool, the rest retired) that have each played ``main`` and the
bots (a payoff table of N + 3 players), saved with every snapshot; prints the league's share too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

import numpy as np
import requests


def measure(url: str, seconds: float) -> list:
    session = requests.Session()
    out = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        session.get(url, timeout=5).raise_for_status()
        out.append(time.perf_counter() - t)
    return out


def stats(values: list) -> str:
    values = sorted(values)
    p = lambda q: 1000 * values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return f"p50 {p(0.5):.2f} ms  p99 {p(0.99):.2f} ms  max {1000 * values[-1]:.2f} ms  ({len(values)} requests)"


def fill_league(league, snapshots: int) -> None:
    """``snapshots`` snapshots in the league, each with games against main and the bots."""
    from parallel_rl.league import MAIN, snapshot_name

    for version in range(snapshots):
        league.add_snapshot(version * league.cfg.snapshot_every)
        name = snapshot_name(version * league.cfg.snapshot_every)
        league.record(MAIN, name, ["win"] * 30 + ["draw"] * 10 + ["loss"] * 5)
        for bot in league.bots:
            league.record(name, bot, ["win"] * 20 + ["loss"] * 3)


def run(interval: float, rows: int, seconds: float, tmp: str, league: int = 0) -> tuple:
    from coordinator_app import serve_coordinator
    from parallel_rl.config import load_config
    from parallel_rl.coordinator import Coordinator
    from parallel_rl.storage import SharedStorage

    config = "configs/tictactoe_selfplay_parallel.py" if league else "configs/cartpole_dqn_parallel.py"
    cfg = load_config(config, [f"parallel.coordinator.snapshot_interval={interval}", f"exp_name={tmp}/exp"])
    storage = SharedStorage(f"{tmp}/shared-{interval}")
    coordinator = Coordinator(cfg, storage, token="bench")
    if league:
        fill_league(coordinator.commander.league, league)
    chunk = {"obs": np.zeros((1024, 4), np.float32), "action": np.zeros(1024, np.int64)}
    for i in range(rows // 1024 + 1):
        storage.chunks.write(f"c-{i:05d}", chunk)
        coordinator.replay.add_chunk(f"c-{i:05d}", 1024, 0, "collector-1")
    server = serve_coordinator(coordinator, "127.0.0.1", 0)
    server.start()
    coordinator.start()
    try:
        latencies = measure(server.url + "/api/v1/cluster", seconds)
        t = time.perf_counter()
        coordinator.snapshots.save_state()
        one = time.perf_counter() - t
        t = time.perf_counter()
        commander_state = json.dumps(coordinator.commander.state_dict())
        league_cost = (time.perf_counter() - t, len(commander_state))
        return latencies, one, coordinator.replay.count(), league_cost
    finally:
        coordinator.close(notify_workers=False)
        server.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--league", type=int, default=0, help="self-play: snapshots in the league (0: CartPole)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base, _, size, _ = run(3600.0, args.rows, args.seconds, tmp, args.league)
        busy, one, _, (league_s, league_bytes) = run(0.05, args.rows, args.seconds, tmp, args.league)
    print(
        f"GET /api/v1/cluster, buffer {size} rows (full)"
        + (f", league of {args.league} snapshots" if args.league else "")
    )
    print(f"  no snapshots:         {stats(base)}")
    print(f"  snapshot every 0.05s: {stats(busy)}")
    print(
        f"  p99 ratio {sorted(busy)[int(0.99 * len(busy))] / sorted(base)[int(0.99 * len(base))]:.2f}x; "
        f"median ratio {statistics.median(busy) / statistics.median(base):.2f}x; one snapshot takes {1000 * one:.1f} ms"
    )
    if args.league:
        print(
            f"  the commander's state (the league) in it: {league_bytes} bytes of JSON, {1000 * league_s:.2f} ms "
            f"to take and encode"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
