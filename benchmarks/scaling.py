"""How the cluster scales with workers: collectors, learner ranks, and the coordinator alone.

    .venv/bin/python benchmarks/scaling.py [--seconds 6] [--max-collectors C] [--max-ranks R] [--out scaling.png]
        [--skip collectors ranks coordinator] [--rounds 3] [--simulated 64 256] [--rate 5000] [--client-processes 4]

1. Collectors: `parallel-rl run --collectors N` for N = 1, 2, 4, ... up to the CPUs present (CartPole,
   collectors flat out: max_env_steps_per_update=0, evaluation off): env steps/s into the buffer and
   learner updates/s (cluster_throughput.measure_cluster). Ideal: N x one collector's env steps/s.
2. Learner ranks: world sizes 1, 2, 4, ... (up to the CPUs): samples trained per second by DQN on a
   3x512 MLP, global batch 512 (``--batch``), one torch thread per rank. World size 1 is what a single learner does
   per batch (gather the rows from cached chunk files, train); N > 1 is the LearnerAggregator's step
   (references broadcast, each rank reads its share from the chunk files, trains, gradients averaged,
   priorities gathered). Rows come from real chunk files on a shared store; the coordinator's sampling is
   not part of it (measured in 1). Ideal: N x world size 1. The world sizes are measured in turn,
   ``--rounds`` times (the load of a shared machine drifts: each round's ratio compares points taken
   seconds apart), and reported as the median over the rounds, with each round's ratio and the load
   average after each point. Every rank also counts its CPU seconds (all its threads) in the window:
   samples per CPU-second of the busiest rank is what the group would train with a free core per rank
   and no waiting, a figure a busy shared machine moves far less than the wall rate (the cost of the
   parallel step itself; the waits come on top). Part 2 alone: ``--skip collectors coordinator``.
3. The coordinator alone (a `parallel-rl coordinator` process) with 64 and 256 simulated collectors
   (control_plane.py's stub servers; one client thread each, spread over ``--client-processes``
   processes so that the clients' own GIL is not the limit): chunk announcements per second, sent as
   metadata calls of ``--per-call`` announcements each (a collector's outbox batches what one flush
   interval produced; 1 = one HTTP call per chunk), each announcing a 1-row chunk file (the coordinator
   reads every file's header), and the p99 of `GET /api/v1/cluster` probed every 20 ms meanwhile. Two
   windows per count: flat out (the capacity), and paced at ``--rate`` announcements/s in all (each
   collector one call every per_call * N / rate s from a random phase: the REST p99 at that load). The
   coordinator process's CPU (user + system from /proc, 1.0 = one core) is printed beside each rate.

Part 1 also prints the coordinator's CPU in the real run (the `parallel-rl run` process: coordinator and
supervisor) per chunk announced and per HTTP message of the workers (heartbeat, metadata, sample).
`--skip` leaves parts out: `--skip collectors ranks` measures part 3 alone.
Prints a table per part and writes a PNG plot (throughput vs workers, with the ideal line).
Targets (#13): N <= C-2 collectors >= 0.85 N x one; 2 ranks >= 1.6x one; coordinator >= 5k
announcements/s and p99 <= 50 ms with 256 simulated collectors.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import resource
import secrets
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_throughput  # noqa: E402  (the cluster measurement lives there)
import control_plane  # noqa: E402  (the coordinator process and its simulated collectors)

from parallel_rl.errors import ParallelRLError  # noqa: E402
from parallel_rl.transport import HttpClient  # noqa: E402
from parallel_rl.storage import SharedStorage  # noqa: E402

HIDDEN = [512, 512, 512]
BATCH = 512
CHUNKS, CHUNK_ROWS = 64, 1024


def powers_up_to(n: int) -> list:
    out, k = [], 1
    while k <= n:
        out.append(k)
        k *= 2
    if out[-1] != n:
        out.append(n)
    return out


# ---- 1. collectors -----------------------------------------------------------------------------------
def collectors(counts: list, seconds: float) -> list:
    rows = []
    for n in counts:
        r = cluster_throughput.measure_cluster(
            seconds, ["--collectors", str(n), "--set", "parallel.commander.max_env_steps_per_update=0"]
        )
        rows.append({"n": n, **r})
        print(
            f"  {n} collector(s): {r['env_steps']:.0f} env steps/s, {r['updates']:.0f} learner updates/s; "
            f"coordinator {r['coordinator_cpu']:.2f} cores for {r['chunks']:.0f} chunks/s and {r['messages']:.0f} "
            f"HTTP messages/s: {r['cpu_per_chunk_us']:.0f} us per chunk, {r['cpu_per_message_us']:.0f} us per "
            f"message; load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    return rows


# ---- 2. learner ranks --------------------------------------------------------------------------------
def _learner_cfg(batch: int):
    from parallel_rl.config import compile_config

    return compile_config(
        {
            "policy": {
                "model": {"hidden_size_list": HIDDEN},
                "learn": {
                    "batch_size": batch,
                    "learner": {"hook": {"log_show_after_iter": 0, "save_ckpt_after_run": False}},
                },
            }
        }
    )


def write_chunks(root: str) -> list:
    storage, rng = SharedStorage(root), np.random.default_rng(0)
    names = []
    for i in range(CHUNKS):
        name = f"bench-{i:04d}"
        storage.chunks.write(
            name,
            {
                "obs": rng.normal(size=(CHUNK_ROWS, 4)).astype(np.float32),
                "next_obs": rng.normal(size=(CHUNK_ROWS, 4)).astype(np.float32),
                "action": rng.integers(0, 2, CHUNK_ROWS),
                "reward": rng.normal(size=CHUNK_ROWS).astype(np.float32),
                "done": (rng.random(CHUNK_ROWS) < 0.05).astype(np.float32),
                "discount": np.full(CHUNK_ROWS, 0.99, np.float32),
            },
        )
        names.append(name)
    return names


def _cpu_seconds() -> float:
    """CPU time of this process so far, all its threads (gloo's included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rank(rank: int, size: int, root: str, names: list, seconds: float, ports, results, batch: int) -> None:
    """One learner rank: rank 0 draws the batches and times the updates; every rank reports its CPU seconds
    in the timed window (rank 0 marks its start with a NOOP step)."""
    import torch

    from parallel_rl.learner.aggregator import GroupStep, Op
    from parallel_rl.learner.pipeline import RowStore
    from parallel_rl.policy import create_policy
    from parallel_rl.policy.distributed import destroy_group, join_group, open_store
    from parallel_rl.learner.learner import create_learner

    torch.set_num_threads(1)
    cfg = _learner_cfg(batch)
    policy = create_policy(cfg.policy, 4, 2, seed=0)
    learner = create_learner(cfg.policy.learn.learner, policy.learn_mode, instance_name=f"bench rank {rank}")
    rng = np.random.default_rng(rank)

    def refs():
        return {
            "chunk": np.asarray(names)[rng.integers(0, len(names), batch)],
            "row": rng.integers(0, CHUNK_ROWS, batch),
            "weight": np.ones(batch, np.float32),
            "index": np.arange(batch),
            "uid": np.arange(batch),
        }

    storage = SharedStorage(root)
    if size == 1:  # what a single learner does per batch: gather the rows (cached chunks), train
        rows = RowStore(storage, len(names), CHUNK_ROWS)

        def update():
            r = refs()
            used, local = np.unique(r["chunk"], return_inverse=True)
            batch, _ = rows.gather(list(used), local, r["row"])
            batch.update(weight=r["weight"], index=r["index"], uid=r["uid"])
            learner.train(batch)
    else:
        store = open_store(rank, "127.0.0.1", 0 if rank == 0 else ports.get(timeout=60), 60.0)
        if rank == 0:
            for _ in range(size - 1):
                ports.put(store.port)
        join_group(store, rank, size, 60.0)
        step = GroupStep(learner, storage, rank, size, len(names), CHUNK_ROWS)
        if rank > 0:
            cpu = _cpu_seconds()
            while (op := step.receive()) != Op.STOP:
                if op == Op.NOOP:  # rank 0's timed window starts
                    cpu = _cpu_seconds()
            results.put((rank, None, _cpu_seconds() - cpu))
            destroy_group()
            return

        def update():
            step.send(Op.TRAIN, refs())

    for _ in range(3):  # warm-up: every chunk file read once, allocations made
        update()
    if size > 1:
        step.send(Op.NOOP)
    n, start, cpu = 0, time.perf_counter(), _cpu_seconds()
    while time.perf_counter() - start < seconds:
        update()
        n += 1
    elapsed, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    results.put((0, n, cpu, elapsed))
    if size > 1:
        step.send(Op.STOP)
        destroy_group()


def learner_ranks(sizes: list, seconds: float, rounds: int = 1, batch: int = BATCH) -> list:
    """Samples trained/s per world size: ``rounds`` rounds of every size in turn (the box's load drifts;
    each round's ratios compare points measured a few seconds apart), the median over rounds."""
    per_size = {size: [] for size in sizes}
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as root:
        names = write_chunks(root)
        for k in range(rounds):
            for size in sizes:
                ports, results = ctx.Queue(), ctx.Queue()
                procs = [
                    ctx.Process(target=_rank, args=(r, size, root, names, seconds, ports, results, batch))
                    for r in range(size)
                ]
                for p in procs:
                    p.start()
                try:
                    got = {
                        r: (updates, cpu, rest)
                        for r, updates, cpu, *rest in (results.get(timeout=seconds + 120) for _ in procs)
                    }
                except queue.Empty:
                    raise SystemExit(f"world size {size}: no result (exit codes {[p.exitcode for p in procs]})")
                finally:
                    for p in procs:
                        p.join(30)
                        if p.is_alive():
                            p.kill()
                updates, _, (elapsed,) = got[0]
                rate = updates * batch / elapsed
                # what the group would train with a free core per rank and no waiting: the busiest rank's CPU
                ceiling = updates * batch / max(cpu for _, cpu, _ in got.values())
                load = os.getloadavg()[0]
                per_size[size].append((rate, ceiling, load))
                print(
                    f"  round {k + 1}: world size {size}: {rate:.0f} samples trained/s "
                    f"({rate / per_size[sizes[0]][k][0]:.2f}x world size {sizes[0]}); {ceiling:.0f} per CPU-second "
                    f"of the busiest rank ({ceiling / per_size[sizes[0]][k][1]:.2f}x); load average {load:.1f}",
                    flush=True,
                )
    base = per_size[sizes[0]]
    return [
        {
            "n": size,
            "samples": float(np.median([r for r, _, _ in points])),
            "ratio": float(np.median([r / b[0] for (r, _, _), b in zip(points, base)])),
            "rounds": [r / b[0] for (r, _, _), b in zip(points, base)],
            "loads": [load for _, _, load in points],
            "cpu_ratio": float(np.median([c / b[1] for (_, c, _), b in zip(points, base)])),
        }
        for size, points in per_size.items()
    ]


# ---- 3. the coordinator alone ------------------------------------------------------------------------
def coordinator_alone(counts: list, seconds: float, files: int, per_call: int, processes: int, rate: float) -> list:
    """For each count: a flat-out window (the coordinator's capacity) and, with ``rate`` > 0, a window paced
    at ``rate`` announcements/s in all (the REST p99 while the coordinator takes that load)."""
    rows = []
    for n in counts:
        token = secrets.token_urlsafe(24)
        with tempfile.TemporaryDirectory() as tmp:
            proc, log = control_plane.start_coordinator(
                tmp,
                token,
                [
                    "--set",
                    "parallel.commander.warmup_env_steps=0",
                    "--set",
                    "parallel.commander.max_seconds=0",
                    "--set",
                    "parallel.commander.max_env_steps_per_update=0",
                    "--set",
                    "parallel.commander.collector_task_env_steps=1000000000",
                    "--set",
                    "parallel.coordinator.heartbeat_ttl=600",  # the simulated collectors send no heartbeats
                    "--set",
                    "parallel.coordinator.chunk_grace_seconds=600",
                ],
            )
            stub = None
            try:
                url = control_plane.coordinator_url(proc, log)
                stub, leases = control_plane.stub_slaves(token)
                control_plane.register_stubs(url, token, stub, n)
                workers = list(leases.values())
                shared = os.path.join(tmp, "shared")
                windows = [("flat out", 0.0, max(1, files // n))]
                if rate > 0:  # enough files for the paced window, and some to spare
                    windows.append((f"{rate:g}/s", rate, max(per_call, int(1.3 * rate * seconds / n))))
                for w, (mode, offered, per_worker) in enumerate(windows):
                    rows.append(
                        _announce(
                            url,
                            token,
                            proc.pid,
                            shared,
                            workers,
                            f"w{w}",
                            per_worker,
                            seconds,
                            per_call,
                            processes,
                            offered,
                            mode,
                        )
                    )
            finally:
                if stub is not None:
                    stub.close()
                proc.terminate()
                proc.wait(30)
                log.close()
    return rows


def _announcers(
    url, token, shared, workers, prefix, per_worker, per_call, interval, phases, ready, start, stop, results
) -> None:
    """Simulated collectors in a process of their own (one thread each, real HTTP calls): each writes its
    1-row chunk files, then announces them ``per_call`` per metadata call, flat out (``interval`` 0) or
    one call every ``interval`` s from its ``phase``; puts (announced, failed calls, first failures, CPU s)."""
    storage = SharedStorage(shared)
    one_row = {"obs": np.zeros((1, 4), np.float32), "action": np.zeros(1, np.int64)}
    names = {}
    for worker_id, _ in workers:
        names[worker_id] = [f"{prefix}-{worker_id}-{i:06d}" for i in range(per_worker)]
        for name in names[worker_id]:
            storage.chunks.write(name, one_row)
    sent, failures = [0] * len(workers), []

    def collector(k: int, worker_id: str, lease: str, phase: float) -> None:
        client = HttpClient(url, token, timeout=30)
        client.set_lease(lease)
        mine = names[worker_id]
        start.wait(300)
        next_call = time.monotonic() + phase
        for j in range(0, len(mine), per_call):
            if interval > 0:
                if stop.wait(max(0.0, next_call - time.monotonic())):
                    return
                next_call += interval
            elif stop.is_set():
                return
            batch = mine[j : j + per_call]
            try:
                answer = client.post(
                    f"/api/v1/workers/{worker_id}/metadata",
                    {
                        "messages": [
                            {
                                "type": "chunk",
                                "chunk": name,
                                "size": 1,
                                "policy_version": -1,
                                "env_steps": 1,
                                "episode_returns": [],
                            }
                            for name in batch
                        ]
                    },
                    retries=0,
                )
            except ParallelRLError as exc:
                failures.append(f"{worker_id}: {exc}")
                continue
            sent[k] += len(batch) - len(answer.get("refused") or [])

    threads = [
        threading.Thread(target=collector, args=(k, w, lease, phase), daemon=True)
        for k, ((w, lease), phase) in enumerate(zip(workers, phases))
    ]
    for t in threads:
        t.start()
    ready.put(len(workers))
    start.wait(300)
    cpu = time.process_time()
    for t in threads:
        t.join(600)
    results.put((sum(sent), len(failures), failures[:3], time.process_time() - cpu))


def _announce(
    url: str,
    token: str,
    pid: int,
    shared: str,
    workers: list,
    prefix: str,
    per_worker: int,
    seconds: float,
    per_call: int,
    processes: int,
    rate: float,
    mode: str,
) -> dict:
    n = len(workers)
    ctx = multiprocessing.get_context("spawn")
    ready, results, start, stop = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Event()
    interval = per_call * n / rate if rate > 0 else 0.0
    phases = list(np.random.default_rng(0).uniform(0, interval, n)) if interval else [0.0] * n
    shares = [list(range(p, n, processes)) for p in range(min(processes, n))]
    procs = [
        ctx.Process(
            target=_announcers,
            args=(
                url,
                token,
                shared,
                [workers[k] for k in share],
                prefix,
                per_worker,
                per_call,
                interval,
                [phases[k] for k in share],
                ready,
                start,
                stop,
                results,
            ),
            daemon=True,
        )
        for share in shares
    ]
    for p in procs:
        p.start()
    for _ in procs:  # every file written, every thread waiting
        ready.get(timeout=600)
    latencies = []
    probing = threading.Event()

    def probe() -> None:
        client = HttpClient(url, token, timeout=10)
        while not probing.wait(0.02):
            begin = time.perf_counter()
            client.get("/api/v1/cluster")
            latencies.append(time.perf_counter() - begin)

    prober = threading.Thread(target=probe, daemon=True)
    cpu0, begin = cluster_throughput.cpu_seconds(pid), time.perf_counter()
    start.set()
    prober.start()
    stop.wait(seconds)  # the measurement window
    stop.set()
    cpu1, elapsed = cluster_throughput.cpu_seconds(pid), time.perf_counter() - begin
    probing.set()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    prober.join(30)
    announced = sum(o[0] for o in outcomes)
    failures = [f for o in outcomes for f in o[2]]
    rate_out = announced / elapsed
    coord_cores = (cpu1 - cpu0) / elapsed
    lat = control_plane.percentiles(latencies) if latencies else {"p50": float("nan"), "p99": float("nan")}
    out = {
        "n": n,
        "mode": mode,
        "announcements": rate_out,
        "coordinator_cpu": coord_cores,
        "cpu_us": 1e6 * (cpu1 - cpu0) / max(1, announced),
        "client_cpu": sum(o[3] for o in outcomes) / elapsed,
        "p50": lat["p50"],
        "p99": lat["p99"],
        "failures": sum(o[1] for o in outcomes),
        "ran_out": announced >= n * per_worker,
        "load": os.getloadavg()[0],
    }
    print(
        f"  {n} simulated collectors, {mode}: {rate_out:.0f} announcements/s; coordinator CPU {coord_cores:.2f} "
        f"cores ({out['cpu_us']:.0f} us per announcement), clients {out['client_cpu']:.2f} cores; GET /cluster "
        f"p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms; {out['failures']} failed calls {failures[:1]}"
        f"{' (ran out of chunk files)' if out['ran_out'] else ''}; load {out['load']:.1f}",
        flush=True,
    )
    return out


# ---- report --------------------------------------------------------------------------------------------
def plot(path: str, coll: list, ranks: list, coord: list) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, rows, key, label in (
        (axes[0], coll, "env_steps", "env steps/s into the buffer"),
        (axes[1], ranks, "samples", "samples trained/s (3x512 MLP)"),
    ):
        n = [r["n"] for r in rows]
        ax.plot(n, [r[key] for r in rows], "o-", label="measured")
        ax.plot(n, [rows[0][key] * k for k in n], "--", color="gray", label="ideal (N x one)")
        ax.set_ylabel(label)
        ax.legend()
    axes[0].set_xlabel("collectors")
    if coll:
        twin = axes[0].twinx()
        twin.plot([r["n"] for r in coll], [r["updates"] for r in coll], "s:", color="tab:red")
        twin.set_ylabel("learner updates/s", color="tab:red")
    axes[1].set_xlabel("learner ranks (world_size)")
    axes[2].plot([r["n"] for r in coord], [r["announcements"] for r in coord], "o-", label="measured")
    axes[2].axhline(5000, linestyle="--", color="gray", label="target 5k/s")
    axes[2].set_xlabel("simulated collectors")
    axes[2].set_ylabel("announcements/s (coordinator alone)")
    axes[2].legend()
    fig.suptitle(f"parallel_rl scaling on {os.cpu_count()} CPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def main() -> None:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="measurement window of each point")
    parser.add_argument("--max-collectors", type=int, default=cpus)
    parser.add_argument("--max-ranks", type=int, default=cpus)
    parser.add_argument("--simulated", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--files", type=int, default=40000, help="chunk files announced at most per point")
    parser.add_argument("--per-call", type=int, default=8, help="chunk announcements per metadata call")
    parser.add_argument(
        "--client-processes", type=int, default=4, help="processes the simulated collectors are spread over (part 3)"
    )
    parser.add_argument(
        "--rate", type=float, default=5000.0, help="announcements/s in all for part 3's paced window (0: flat out only)"
    )
    parser.add_argument("--out", default="scaling.png")
    parser.add_argument("--batch", type=int, default=BATCH, help="global batch of part 2 (split between the ranks)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of learner world sizes (part 2)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["collectors", "ranks", "coordinator"])
    args = parser.parse_args()
    print(f"{cpus} CPUs; {args.seconds:g} s windows", flush=True)
    coll = ranks = coord = []
    if "collectors" not in args.skip:
        print("1. collectors (parallel-rl run, CartPole, collectors flat out, evaluation off)", flush=True)
        coll = collectors(powers_up_to(args.max_collectors), args.seconds)
    if "ranks" not in args.skip:
        print(
            f"2. learner ranks (DQN, {'x'.join(map(str, HIDDEN))} MLP, batch {args.batch}, 1 torch thread each)",
            flush=True,
        )
        ranks = learner_ranks(powers_up_to(args.max_ranks), args.seconds, args.rounds, args.batch)
    if "coordinator" not in args.skip:
        print(
            f"3. the coordinator alone, simulated collectors announcing 1-row chunks, {args.per_call} per call",
            flush=True,
        )
        coord = coordinator_alone(
            args.simulated, args.seconds, args.files, args.per_call, args.client_processes, args.rate
        )
    print(
        "\n| collectors | env steps/s | x one | learner updates/s | coordinator CPU (cores) | chunks/s | HTTP messages/s "
        "| CPU us per chunk | CPU us per message |\n|---|---|---|---|---|---|---|---|---|"
    )
    for r in coll:
        print(
            f"| {r['n']} | {r['env_steps']:.0f} | {r['env_steps'] / coll[0]['env_steps']:.2f} | {r['updates']:.0f} "
            f"| {r['coordinator_cpu']:.2f} | {r['chunks']:.0f} | {r['messages']:.0f} | {r['cpu_per_chunk_us']:.0f} "
            f"| {r['cpu_per_message_us']:.0f} |"
        )
    print(
        "\n| learner ranks | samples trained/s (median) | x one (median of rounds) | x one per round | load average "
        "per round | samples per CPU-second of the busiest rank: x one |\n|---|---|---|---|---|---|"
    )
    for r in ranks:
        print(
            f"| {r['n']} | {r['samples']:.0f} | {r['ratio']:.2f} | {' / '.join(f'{x:.2f}' for x in r['rounds'])} | "
            f"{' / '.join(f'{x:.1f}' for x in r['loads'])} | {r['cpu_ratio']:.2f} |"
        )
    print(
        "\n| simulated collectors | offered | announcements/s | coordinator CPU (cores) | CPU us per announcement "
        "| GET /cluster p50 ms | p99 ms | load |\n|---|---|---|---|---|---|---|---|"
    )
    for r in coord:
        print(
            f"| {r['n']} | {r['mode']} | {r['announcements']:.0f} | {r['coordinator_cpu']:.2f} | {r['cpu_us']:.0f} "
            f"| {r['p50']:.1f} | {r['p99']:.1f} | {r['load']:.1f} |"
        )
    plot(args.out, coll, ranks, [r for r in coord if r["mode"] == "flat out"])


if __name__ == "__main__":
    main()
