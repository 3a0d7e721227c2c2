"""Soak: CartPole DQN on a local cluster under kills, hostile clients and a store that turns read-only.

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--seed 0] [--no-attacks] [--keep]

(run it as root for the read-only store, see below; from a checkout, PYTHONPATH=$PWD). What it does, all
on 127.0.0.1 and bounded by ``--minutes`` (plus at most ~3 minutes to wind down):

- the cluster: ``parallel-rl run -c configs/cartpole_dqn_parallel.py`` (1 learner, 2 collectors) on a fixed
  port outside the ephemeral range, a stop value CartPole never reaches (``env.stop_value=100000``) and a time
  budget (``parallel.commander.max_seconds``) of the soak's length minus 30 s, so it trains for the whole soak
  and ends at its budget. ``max_task_attempts`` and ``supervisor.max_restarts`` are raised (every kill of the
  learner fails its task once, and a 5 s read-only store fails it 3-4 times; the default, 3 in 10 minutes,
  would fail the run), and ``parallel.coordinator.orphan_chunk_max_age`` is shortened to 60 s so that a short
  soak sees the coordinator sweep the chunk files no index knows;
- kills: every 20-60 s a SIGKILL to a random role: the learner or a collector (forks of ``run``'s fork server;
  ``run`` restarts them), or the coordinator (the ``run`` process itself: its workers get SIGTERM, the fork
  server exiting with it and they with the fork server;
  the soak restarts it at once with ``run --resume`` on the same port, as compose's restart policy would);
- 300 idle TCP connections (no byte sent) and 20 slow clients (a request sent a byte every 2-4 s) held
  against the coordinator's port, each reopened when the server closes it or the coordinator is down;
- the store: every 2-4 minutes (the first after 40-90 s) ``data/`` and ``policy/`` of the shared directory
  turn read-only for 5 s. Chmod does not stop root: as root each directory is a bind mount of itself,
  remounted ``ro`` and back (``mount -o remount,ro,bind``); as another user ``chmod a-w`` does it;
- a probe: ``GET /api/v1/health`` every 0.5 s (REST latency), ``GET /api/v1/workers`` every 2 s (the largest
  ``seconds_since_heartbeat`` of an active worker: heartbeat latency as the coordinator sees it),
  ``GET /api/v1/buffers`` every 5 s (the last answer is printed).

- attacks (issue #41; on by default, ``--no-attacks`` leaves the chaos above alone):
  - 2,000 connections without the cluster token, a quarter each idle, trickling a request head a byte every
    0.5-1.5 s, announcing a 100 MB body and trickling it, announcing a body with ``Expect: 100-continue``
    (tests/test_strangers.py's shapes), each quarter from its own loopback address (127.0.0.2-5: under the
    coordinator's cap of 1,024 strangers' connections an address) and reopened when the server closes it;
  - a FIFO and a symlink to /etc/passwd planted at video names in the store's ``videos/``; the probe GETs
    ``/api/v1/videos`` (they must not be listed) and each name (404) every 2 s, a 5 s timeout being a hang;
  - damaged packed chunks: every 60-120 s (the first 10-30 s after training started) three chunks the latest
    coordinator snapshot references, the newest, are rewritten in place as packed chunks damaged in three ways
    (a frame index past the pool, no ``frame_pool``, a header declaring a 2.9 TiB pool), and the learner is
    killed: a live learner caches every chunk it read, the next one reads them cold and must quarantine them
    and train on. Rewriting indexed files reaches the learner's door for all three; announcing them as a
    collector would meet the coordinator's header check first (it refuses the last two).

The hostile clients and the attacks start once the learner trained (``train_iter`` > 0): the coordinator's RSS
and threads then are the baseline; its RSS must stay under the baseline + 160 MiB (tests/test_strangers.py's
bound under the same 2,000 connections), sampled every second in every incarnation.

No kill and no store flip in the soak's last 40 s, so the run winds down undisturbed. At the end it prints
kills per role, restarts seen (the launcher's and the soak's), how the run ended (solved / at its budget /
failed, with its line), processes left (zombies; processes of the soak still alive 15 s after the run
ended), leaked chunks (a chunk file on the store that the final coordinator snapshot does not index and that
is old enough for the coordinator's orphan sweep to have removed it; an indexed chunk no row references is
waiting out its deletion grace, an unindexed one younger than the sweep's age and interval waits for the
next sweep, and ``.tmp-`` files of killed writers are removed after 10 minutes: each counted apart), and the
probe's latencies, the coordinator's RSS (peak, at the end) and threads, and with the attacks: hostile connections
opened / turned away, the planted files' answers, what became of each damaged chunk; then one PASS/FAIL line per
criterion: the run ended solved or at its budget, the coordinator's RSS under its bound, no process left, no
zombie, no chunk leaked, and with the attacks: 2,000 hostile connections opened, planted files only ever 404 (never
listed, no GET timed out, no reader left blocked on the FIFO), damaged chunks quarantined with none left indexed.
Exit code 0 when every criterion passed.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import io
import json
import os
import random
import re
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections import Counter
from typing import Dict, List, Optional, Tuple

import numpy as np
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "cartpole_dqn_parallel.py")
MARK = "PARALLEL_RL_SOAK_ID"  # every process the soak starts inherits it: found again in /proc/<pid>/environ
QUIET_END = 40.0  # no kill, no store flip in the soak's last seconds
IDLE_CLIENTS = 300
SLOW_CLIENTS = 20
STRANGERS = 2000  # --attacks: connections without the cluster token
PR_SET_CHILD_SUBREAPER = 36
# chunk files no index knows (a collector killed before announcing, a coordinator killed before its next
# snapshot) are swept once this old (default 600 s): shortened so that a short soak sees the sweep work
ORPHAN_AGE = 60.0
# the coordinator's RSS may grow this much over its size before any client (tests/test_strangers.py's bound under
# 2,000 strangers: the read-ahead budget of 16 MiB and ~30 KiB a connection of the server's objects and buffers)
RSS_GROWTH_BOUND_MIB = 160
SWEEP_EVERY = 60.0  # the coordinator's sweep interval


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fixed_port(rng: random.Random) -> int:
    """A free port below the ephemeral range: a restarted coordinator must get it back (docs/deploy.md)."""
    for _ in range(200):
        port = rng.randrange(20000, 30000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise SystemExit("soak: no free port in 20000-30000")


# ---- processes -------------------------------------------------------------------------------------


def proc_stat(pid: int) -> Optional[Tuple[str, int]]:
    """(state, parent pid) from /proc, None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, IndexError, ValueError):
        return None


def argv_of(pid: int) -> List[str]:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().split("\0")
    except OSError:
        return []


def marked_pids(mark: str) -> List[int]:
    """Processes carrying our mark in their environment (zombies have none: see zombies())."""
    out = []
    needle = f"{MARK}={mark}".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        out.append(int(entry))
            except OSError:
                continue
    return out


def children_of(pid: int) -> Dict[int, str]:
    """pid -> role (learner / collector / '') of ``pid``'s live children."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st and st[1] == pid and st[0] != "Z":
                argv = argv_of(int(entry))
                out[int(entry)] = next((a for a in argv if a in ("learner", "collector")), "")
    return out


def workers_of(run_pid: int) -> Dict[int, str]:
    """pid -> role of the learner and collectors of `run` ``run_pid``: forks of its fork server (a child of it)."""
    return {pid: role for child in children_of(run_pid) for pid, role in children_of(child).items() if role}


class Cluster:
    """`parallel-rl run` and its restarts with --resume after a coordinator kill."""

    def __init__(self, tmp: str, shared: str, port: int, args, mark: str):
        self.tmp, self.shared, self.port, self.mark = tmp, shared, port, mark
        self.url = f"http://127.0.0.1:{port}"
        budget = max(60.0, args.minutes * 60 - 30)
        self.sets = [
            f"seed={args.seed}",
            f"exp_name={tmp}/exp",
            "env.stop_value=100000",
            "parallel.commander.max_env_step=0",
            f"parallel.commander.max_seconds={budget:g}",
            "parallel.commander.max_task_attempts=1000",
            "parallel.supervisor.max_restarts=1000",
            f"parallel.coordinator.orphan_chunk_max_age={ORPHAN_AGE:g}",
        ]
        self.proc: Optional[subprocess.Popen] = None
        self.incarnation = 0
        self.logs: List[str] = []
        self.env = {
            **os.environ,
            MARK: mark,
            "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p),
        }

    def start(self, resume: bool) -> None:
        self.incarnation += 1
        path = os.path.join(self.tmp, f"run-{self.incarnation}.log")
        self.logs.append(path)
        cmd = [sys.executable, "-m", "parallel_rl", "run", "-c", CONFIG, "--port", str(self.port)]
        cmd += ["--resume", self.shared] if resume else ["--shared-dir", self.shared]
        for s in self.sets:
            cmd += ["--set", s]
        with open(path, "ab") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env, cwd=ROOT
            )

    def output(self, which: int = -1) -> str:
        with open(self.logs[which], errors="replace") as f:
            return f.read()


def wait_for_training(cluster: Cluster, deadline: float) -> bool:
    """Whether the run's learner trained (``train_iter`` > 0 in GET /api/v1/cluster) before ``deadline``."""
    http = requests.Session()
    try:
        while time.monotonic() < deadline and cluster.proc.poll() is None:
            try:
                if http.get(cluster.url + "/api/v1/cluster", timeout=2).json().get("train_iter", 0) > 0:
                    return True
            except (requests.RequestException, ValueError):
                pass  # not listening yet
            time.sleep(0.5)  # the pace of the polls
        return False
    finally:
        http.close()


# ---- the store turning read-only -------------------------------------------------------------------


class Store:
    """data/ and policy/ of the shared directory, turned read-only and back."""

    def __init__(self, shared: str):
        self.dirs = [os.path.join(shared, d) for d in ("data", "policy")]
        for d in self.dirs:
            os.makedirs(d, exist_ok=True)
        self.mounted: List[str] = []
        self.read_only = False
        self.how = "chmod a-w (not root)"
        if os.geteuid() == 0:
            for d in self.dirs:
                if subprocess.run(["mount", "--bind", d, d], capture_output=True).returncode == 0:
                    self.mounted.append(d)
            if len(self.mounted) == len(self.dirs):
                self.how = "bind mounts remounted read-only (mount -o remount,ro,bind)"
            else:
                self.how = "none: root and `mount --bind` refused (no flips)"

    @property
    def usable(self) -> bool:
        return os.geteuid() != 0 or len(self.mounted) == len(self.dirs)

    def set_read_only(self, ro: bool) -> bool:
        if not self.usable:
            return False
        ok = True
        for d in self.dirs:
            if self.mounted:
                r = subprocess.run(
                    ["mount", "-o", f"remount,{'ro' if ro else 'rw'},bind", d, d], capture_output=True, text=True
                )
                ok = ok and r.returncode == 0
                if r.returncode:
                    log(f"remount {d} failed: {r.stderr.strip()}")
            else:
                os.chmod(d, 0o555 if ro else 0o755)
        self.read_only = ro and ok
        return ok

    def close(self) -> None:
        if self.read_only or not self.mounted:
            self.set_read_only(False)
        for d in self.mounted:
            r = subprocess.run(["umount", d], capture_output=True, text=True)
            if r.returncode:  # busy for a moment: lazily then
                subprocess.run(["umount", "-l", d], capture_output=True)
        self.mounted = []


# ---- hostile clients --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Pool:
    """``count`` connections of one kind, from ``source``: each sends ``opening`` at once, then ``feed`` a byte
    every ``every`` seconds (a range), and is opened again when the server closes it or cannot be reached."""

    name: str
    count: int
    opening: bytes = b""
    feed: bytes = b""
    every: Tuple[float, float] = (2.0, 4.0)
    source: str = "127.0.0.1"


SLOW_REQUEST = b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: soak-slow-client\r\n\r\n"
CHAOS_POOLS = [Pool("idle", IDLE_CLIENTS), Pool("slow", SLOW_CLIENTS, feed=SLOW_REQUEST)]
# --attacks: STRANGERS connections without the cluster token, a quarter of each shape (tests/test_strangers.py's),
# each shape from its own loopback address so that no address reaches the coordinator's cap of 1,024 strangers'
# connections a peer (parallel.coordinator.max_connections_per_peer) and all 2,000 are held, not cut at once
ENDLESS = b"x" * 1_000_000  # a trickle that outlasts any deadline (the server cuts it first)
ATTACK_POOLS = [
    Pool("stranger_idle", STRANGERS // 4, source="127.0.0.2"),
    Pool(
        "stranger_head",
        STRANGERS // 4,
        b"GET /api/v1/cluster HTTP/1.1\r\nHost: x\r\nX-Pad: ",
        ENDLESS,
        (0.5, 1.5),
        "127.0.0.3",
    ),
    Pool(
        "stranger_body",
        STRANGERS // 4,
        b"POST /api/v1/collectors HTTP/1.1\r\nHost: x\r\nContent-Type: "
        b"application/json\r\nContent-Length: 100000000\r\n\r\n{",
        ENDLESS,
        (0.5, 1.5),
        "127.0.0.4",
    ),
    Pool(
        "stranger_expect",
        STRANGERS // 4,
        b"POST /api/v1/collectors HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n",
        b"x" * 100,
        (0.5, 1.5),
        "127.0.0.5",
    ),
]
OPENS_PER_TICK = 25  # a pool opens at most this many connections a tick (0.1 s): no connect storm


class Clients(threading.Thread):
    """Hostile clients: the connections of every :class:`Pool`, held against the coordinator's port and reopened
    when closed. One thread, one selector; stops by ``stop`` or ``deadline``."""

    def __init__(self, port: int, rng: random.Random, deadline: float, pools: List[Pool]):
        super().__init__(name="soak-clients", daemon=True)
        self.port, self.rng, self.deadline, self.pools = port, rng, deadline, pools
        self.stop = threading.Event()
        self.stats = Counter()
        self.held: Dict[str, List[int]] = {pool.name: [] for pool in pools}  # samples of open connections
        self.sources_refused: set = set()  # loopback addresses bind() refused: 127.0.0.1 used instead

    def _open(self, pool: Pool) -> Optional[socket.socket]:
        s = socket.socket()
        s.settimeout(1.0)
        try:
            if pool.source != "127.0.0.1" and pool.source not in self.sources_refused:
                try:
                    s.bind((pool.source, 0))
                except OSError:
                    self.sources_refused.add(pool.source)
            s.connect(("127.0.0.1", self.port))
            if pool.opening:
                s.sendall(pool.opening)
        except OSError:
            s.close()
            self.stats[f"{pool.name}_connect_failed"] += 1
            return None
        s.setblocking(False)
        return s

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        conns: Dict[socket.socket, List] = {}  # sock -> [pool, bytes of its feed sent, next send at]
        held = Counter()
        retry_at = Counter()
        last_sample = 0.0
        try:
            while not self.stop.is_set() and time.monotonic() < self.deadline:
                now = time.monotonic()
                for pool in self.pools:
                    if now < retry_at[pool.name]:
                        continue
                    failed = False
                    for _ in range(min(OPENS_PER_TICK, pool.count - held[pool.name])):
                        s = self._open(pool)
                        if s is None:
                            failed = True
                            break
                        self.stats[f"{pool.name}_opened"] += 1
                        held[pool.name] += 1
                        conns[s] = [pool, 0, now + self.rng.uniform(*pool.every)]
                        sel.register(s, selectors.EVENT_READ, pool)
                    retry_at[pool.name] = now + (0.5 if failed else 0.05)
                for s, state in conns.items():
                    pool, sent, due = state
                    if sent < len(pool.feed) and now >= due:
                        try:
                            s.send(pool.feed[sent : sent + 1])
                            state[1] += 1
                            state[2] = now + self.rng.uniform(*pool.every)
                        except BlockingIOError:
                            state[2] = now + 1.0
                        except OSError:
                            state[2] = now + 3600  # closed: the selector reports it
                for key, _ in sel.select(timeout=0.1):
                    s, pool = key.fileobj, key.data
                    try:
                        data = s.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if data:
                        if data.startswith(b"HTTP/"):
                            status = data.split(b" ", 2)[1:2]
                            self.stats[
                                f"{pool.name}_answered_{status[0].decode(errors='replace') if status else '?'}"
                            ] += 1
                            if pool.feed and conns[s][1] >= len(pool.feed):
                                self.stats[f"{pool.name}_request_completed"] += 1
                        continue  # the server closes after an error answer: seen as b"" next
                    self.stats[f"{pool.name}_closed_by_server"] += 1
                    sel.unregister(s)
                    s.close()
                    conns.pop(s, None)
                    held[pool.name] -= 1
                if now - last_sample >= 5.0:
                    last_sample = now
                    for pool in self.pools:
                        self.held[pool.name].append(held[pool.name])
        finally:
            for s in list(conns):
                try:
                    sel.unregister(s)
                except (KeyError, ValueError):
                    pass
                s.close()
            sel.close()

    def total(self, prefix: str, what: str) -> int:
        """The ``what`` count (opened, closed_by_server, ...) summed over the pools named ``prefix``*."""
        return sum(n for key, n in self.stats.items() if key.startswith(prefix) and key.endswith("_" + what))

    def report(self, pools: List[Pool]) -> str:
        held = ", ".join(f"{p.name} {statistics.median(self.held[p.name] or [0]):.0f}/{p.count}" for p in pools)
        names = tuple(p.name + "_" for p in pools)
        stats = {k: v for k, v in sorted(self.stats.items()) if k.startswith(names)}
        return f"held (median of 5 s samples): {held}; {json.dumps(stats)}"


class Probe(threading.Thread):
    """REST latency (GET /health), heartbeat ages (GET /workers), the last GET /buffers and /cluster."""

    def __init__(self, url: str, deadline: float):
        super().__init__(name="soak-probe", daemon=True)
        self.url, self.deadline = url, deadline
        self.planted: Dict[str, str] = {}  # --attacks: video name -> what was planted there (set by plant_videos)
        self.planted_answers = Counter()  # "GET /videos/<what>: <status>" -> how many
        self.stop = threading.Event()
        self.rest: List[float] = []
        self.heartbeat_age: List[float] = []
        self.failures = Counter()
        self.buffers: Optional[dict] = None
        self.cluster: Optional[dict] = None
        self.storage_unhealthy_seen = 0

    def _get(self, path: str, http: requests.Session) -> Optional[dict]:
        t = time.perf_counter()
        try:
            r = http.get(self.url + path, timeout=5)
            r.raise_for_status()
            answer = r.json()
        except requests.ConnectionError:
            self.failures["refused/reset (coordinator down?)"] += 1
            return None
        except requests.Timeout:
            self.failures["timeout (5 s)"] += 1
            return None
        except (requests.RequestException, ValueError) as exc:
            self.failures[f"{type(exc).__name__}"] += 1
            return None
        if path == "/api/v1/health":
            self.rest.append(time.perf_counter() - t)
        return answer

    def _get_planted(self, http: requests.Session) -> None:
        """GET /api/v1/videos (the planted names must not be listed) and each planted name (404): a request that
        times out is a request thread blocked by a planted file; one refused is the coordinator down (a kill)."""
        for path, what in [("", "listing")] + [("/" + name, what) for name, what in self.planted.items()]:
            try:
                r = http.get(f"{self.url}/api/v1/videos{path}", timeout=5)
            except requests.ConnectionError:
                self.planted_answers[f"{what}: refused (coordinator down)"] += 1
                continue
            except requests.Timeout:
                self.planted_answers[f"{what}: TIMEOUT (5 s)"] += 1
                continue
            if path:
                self.planted_answers[f"{what}: {r.status_code}"] += 1
                continue
            try:
                listed = {v.get("name") for v in r.json().get("videos", [])}
            except (ValueError, AttributeError):
                listed = set()
            leaked = sorted(listed & set(self.planted))
            self.planted_answers[f"listing: {r.status_code}" + (f" LISTING {leaked}" if leaked else "")] += 1

    def run(self) -> None:
        http = requests.Session()
        tick = 0
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            self._get("/api/v1/health", http)
            if tick % 4 == 0:
                workers = self._get("/api/v1/workers", http)
                for w in (workers or {}).get("workers", []):
                    if w.get("state") in ("idle", "busy"):
                        self.heartbeat_age.append(float(w.get("seconds_since_heartbeat", 0.0)))
            if tick % 4 == 2 and self.planted:
                self._get_planted(http)
            if tick % 10 == 0:
                self.buffers = self._get("/api/v1/buffers", http) or self.buffers
                cluster = self._get("/api/v1/cluster", http)
                if cluster:
                    self.cluster = cluster
                    if not (cluster.get("storage") or {}).get("healthy", True):
                        self.storage_unhealthy_seen += 1
            tick += 1
            self.stop.wait(0.5)
        http.close()


def quantiles(xs: List[float]) -> str:
    if not xs:
        return "no samples"
    xs = sorted(xs)
    q = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
    return f"p50 {q(0.5) * 1000:.1f} ms, p99 {q(0.99) * 1000:.1f} ms, max {xs[-1] * 1000:.1f} ms ({len(xs)} samples)"


# ---- attacks on the store (--attacks) ----------------------------------------------------------------

PLANTED = {999_999_991: "FIFO", 999_999_992: "link to /etc/passwd"}  # policy versions no run reaches


def plant_videos(shared: str) -> Dict[str, str]:
    """A FIFO and a symlink to /etc/passwd at video names in the store's videos/ (the open GET /api/v1/videos
    must answer 404 for both, at once): video name -> what it is."""
    from parallel_rl.storage import SharedStorage

    storage = SharedStorage(shared)
    videos = storage.videos.directory
    os.makedirs(videos, exist_ok=True)
    planted = {}
    for version, what in PLANTED.items():
        name = storage.videos.name(version)
        path = os.path.join(videos, name)
        if what == "FIFO":
            os.mkfifo(path)
        else:
            os.symlink("/etc/passwd", path)
        planted[name] = what
    return planted


def release_fifos(shared: str, planted: Dict[str, str]) -> int:
    """Open each planted FIFO for writing without blocking: it succeeds only while a reader is blocked opening it
    (a request thread of the coordinator, the bug of issue 41.4), and lets that reader go. Readers found."""
    from parallel_rl.storage import SharedStorage

    videos = SharedStorage(shared, create=False).videos.directory
    found = 0
    for name, what in planted.items():
        if what == "FIFO":
            try:
                os.close(os.open(os.path.join(videos, name), os.O_WRONLY | os.O_NONBLOCK))
                found += 1
            except OSError:  # ENXIO: nobody is reading it
                pass
    return found


DAMAGE_KINDS = ("frame index past its pool", "no frame pool", "a header declaring 2.9 TiB")


def damaged_packed_chunk(columns: Dict[str, np.ndarray], kind: str) -> bytes:
    """The bytes of a packed chunk (frame stacks stored as single frames: ``parallel_rl.data.frames``) with the
    rows of ``columns`` (a chunk as a collector wrote it), damaged as ``kind`` says: found only when the chunk is
    loaded (``storage.chunks.load_chunk``), as tests/test_reliability_data.py's ``damage_packed`` makes them."""
    from parallel_rl.storage.formats import FRAMES_SUFFIX, POOL_COLUMN, STACKED_COLUMNS

    rows = len(next(iter(columns.values())))
    packed = {k: v for k, v in columns.items() if k not in STACKED_COLUMNS}
    for name in STACKED_COLUMNS:
        packed[name + FRAMES_SUFFIX] = np.zeros((rows, 1), np.int32)
    pool = np.zeros(1, np.float32)
    out = io.BytesIO()
    if kind == "frame index past its pool":
        packed[STACKED_COLUMNS[0] + FRAMES_SUFFIX][-1, 0] = len(pool) + 7
        np.savez(out, **packed, **{POOL_COLUMN: pool})
    elif kind == "no frame pool":
        np.savez(out, **packed)
    else:  # the pool's .npy header declares float32[800000000000] (2.9 TiB) over its 4 bytes
        with zipfile.ZipFile(out, "w") as archive:
            for key, value in packed.items():
                npy = io.BytesIO()
                np.lib.format.write_array(npy, value)
                archive.writestr(key + ".npy", npy.getvalue())
            npy = io.BytesIO()
            np.lib.format.write_array_header_1_0(
                npy,
                {
                    "descr": np.lib.format.dtype_to_descr(pool.dtype),
                    "fortran_order": False,
                    "shape": (800_000_000_000,),
                },
            )
            npy.write(pool.tobytes())
            archive.writestr(POOL_COLUMN + ".npy", npy.getvalue())
    return out.getvalue()


def damage_chunks(shared: str, damaged: Dict[str, str]) -> List[str]:
    """Damage one indexed chunk file per kind of DAMAGE_KINDS, in place; the soak then kills the learner, so the
    one that comes next, its cache empty, reads them and must quarantine them (a live learner caches every
    chunk it read once: one damaged under it is never read again). The chunks are
    the newest the latest coordinator snapshot references (the last a resume or eviction drops); each file is
    rewritten where it is, never created (a chunk deleted meanwhile stays deleted). ``damaged``: name -> kind,
    updated. Returns lines saying what was skipped."""
    from parallel_rl.errors import StorageError
    from parallel_rl.storage import SharedStorage

    storage = SharedStorage(shared, create=False)
    try:
        state = storage.states.latest()
        if state is None:
            return ["no coordinator snapshot yet: nothing to damage"]
        names = state[1]["chunks/name"].tolist()
        refs = state[1]["chunks/ints"][:, 3].tolist()
    except (StorageError, OSError, KeyError, ValueError) as exc:
        return [f"reading the latest coordinator snapshot failed: {type(exc).__name__}: {exc}"]
    aged = []
    for name, ref in zip(names, refs):
        if ref > 0 and name not in damaged:
            try:
                aged.append((os.path.getmtime(storage.chunks.path(name)), name))
            except OSError:
                continue
    skipped = []
    candidates = [name for _, name in sorted(aged, reverse=True)]
    for kind in DAMAGE_KINDS:
        while candidates:
            name = candidates.pop(0)
            try:
                data = damaged_packed_chunk(storage.chunks.read(name), kind)
                fd = os.open(storage.chunks.path(name), os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)  # no O_CREAT
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
            except (StorageError, OSError) as exc:  # deleted since, the store read-only for a moment
                skipped.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            damaged[name] = kind
            break
    return skipped


def proc_status(pid: int) -> Optional[Tuple[float, int]]:
    """(VmRSS in MiB, threads) of ``pid``, None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"])
    except (OSError, KeyError, ValueError):
        return None


# ---- the end: chunks and processes ------------------------------------------------------------------


def chunk_report(shared: str, events: List[Tuple[float, str]], t0: float, ended: float) -> Tuple[int, List[str]]:
    """(leaked count, lines): every chunk file must be in the final snapshot's index, or be younger than the
    coordinator's orphan sweep can have removed (``ended``: wall time the run ended)."""
    sys.path.insert(0, ROOT)
    from parallel_rl.storage import SharedStorage

    storage = SharedStorage(shared)
    data = storage.data_dir
    files = sorted(os.listdir(data))
    temp = [f for f in files if f.startswith(".tmp-")]
    chunks = {f[:-4] for f in files if f.endswith(".npz") and not f.startswith(".tmp-")}
    lines = []
    try:
        meta, arrays = storage.states.latest()
    except Exception as exc:  # noqa: BLE001 - a report: say what failed and go on
        return len(chunks), [f"cannot read the final coordinator snapshot: {type(exc).__name__}: {exc}"]
    names = arrays["chunks/name"].tolist()
    refs = dict(zip(names, arrays["chunks/ints"][:, 3].tolist()))
    referenced = {n for n, r in refs.items() if r > 0}
    grace = {n for n, r in refs.items() if r <= 0}
    unindexed = sorted(chunks - set(refs))
    # not yet ORPHAN_AGE old at the last sweep the run made: the next run's (a resume's) sweep removes them
    young = [
        n for n in unindexed if os.path.getmtime(os.path.join(data, n + ".npz")) > ended - ORPHAN_AGE - SWEEP_EVERY
    ]
    leaked = [n for n in unindexed if n not in young]
    missing = sorted(referenced - chunks)
    lines.append(
        f"chunk files on the store: {len(chunks)}; referenced by the final snapshot (state {meta.get('seq', '?')}): "
        f"{len(referenced & chunks)}; indexed, waiting out their deletion grace: {len(grace & chunks)}; "
        f"temp files of killed writers (removed after 10 min): {len(temp)}"
    )
    lines.append(
        f"unindexed chunk files younger than the orphan sweep ({ORPHAN_AGE:g} s + its {SWEEP_EVERY:g} s "
        f"interval) at the run's end: {len(young)}"
    )
    lines.append(f"LEAKED chunks (on the store, not indexed, old enough to have been swept): {len(leaked)}")
    for name in leaked[:20]:
        mtime = os.path.getmtime(os.path.join(data, name + ".npz"))
        before = [e for e in events if e[0] <= mtime + 0.5]
        last = (
            f"last event before it: {before[-1][1]} at +{before[-1][0] - t0:.1f}s" if before else "no event before it"
        )
        lines.append(f"  {name}.npz written at +{mtime - t0:.1f}s ({last})")
    if missing:
        lines.append(f"indexed with rows but missing from the store: {len(missing)} (e.g. {missing[:3]})")
    return len(leaked), lines


def damage_report(shared: str, damaged: Dict[str, str], outputs: List[str]) -> Tuple[Dict[str, int], List[str]]:
    """What became of each damaged chunk: quarantined by a coordinator (its log names it), found damaged by a
    learner only, still referenced by the final snapshot (no learner met it: a failure), or neither (it left the
    index unread: evicted while the learner had it cached, or before one sampled it)."""
    from parallel_rl.storage import SharedStorage

    quarantined = {m for out in outputs for m in re.findall(r"cannot read chunk '([^']+)' \(.*\): quarantined", out)}
    found = {m for out in outputs for m in re.findall(r"chunk '([^']+)' is damaged, its rows are dropped", out)}
    try:
        _, arrays = SharedStorage(shared, create=False).states.latest()
        referenced = {n for n, r in zip(arrays["chunks/name"].tolist(), arrays["chunks/ints"][:, 3].tolist()) if r > 0}
    except Exception as exc:  # noqa: BLE001 - a report: say what failed and go on
        return {"unreadable": len(damaged)}, [f"cannot read the final coordinator snapshot: {exc}"]
    counts, lines = Counter(), []
    for name, kind in sorted(damaged.items()):
        fate = (
            "quarantined"
            if name in quarantined
            else "found damaged by a learner, not quarantined"
            if name in found
            else "STILL REFERENCED by the final snapshot"
            if name in referenced
            else "left the index unread"
        )
        counts[fate] += 1
        counts[f"{kind}: {fate}"] += 1
    lines.append(
        f"damaged packed chunks: {len(damaged)} ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()) if ':' not in k) or 'none'})"
    )
    for kind in DAMAGE_KINDS:
        per = {k.split(": ", 1)[1]: v for k, v in counts.items() if k.startswith(kind + ": ")}
        if per:
            lines.append(f"  {kind}: {per}")
    return counts, lines


def zombies(our_pids: set) -> List[str]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st and st[0] == "Z" and (st[1] == os.getpid() or st[1] in our_pids):
                out.append(f"{entry} (defunct, parent {st[1]})")
    return out


def reap_adopted(popen_pids: set) -> int:
    """Reap orphans the kernel handed to us (we are a subreaper): grandchildren whose `run` was killed."""
    reaped = 0
    for pid, _ in list(children_of_any(os.getpid()).items()):
        if pid not in popen_pids:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
                reaped += done == pid
            except ChildProcessError:
                pass
    return reaped


def children_of_any(pid: int) -> Dict[int, str]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st and st[1] == pid:
                out[int(entry)] = st[0]
    return out


# ---- main -------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, shared dir)")
    parser.add_argument(
        "--attacks",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="beside the chaos, 2,000 connections without the token, a FIFO and a symlink planted "
        "in videos/, damaged packed chunks (default: on; --no-attacks for the chaos alone)",
    )
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    # SIGTERM (`timeout`, a CI runner) unwinds like Ctrl-C: the finally below kills the cluster, closes the
    # clients and unmounts the store's bind mounts
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    rng = random.Random(args.seed)
    libc = ctypes.CDLL(None, use_errno=True)
    subreaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    tmp = tempfile.mkdtemp(prefix="soak-")
    shared = os.path.join(tmp, "shared")
    mark = uuid.uuid4().hex
    port = fixed_port(rng)
    t0 = time.monotonic()
    wall0 = time.time()
    end = t0 + args.minutes * 60
    hard_end = end + 180  # winding down: at most 3 more minutes
    store = Store(shared)
    cluster = Cluster(tmp, shared, port, args, mark)
    pools = CHAOS_POOLS + (ATTACK_POOLS if args.attacks else [])
    clients = Clients(port, random.Random(args.seed + 1), hard_end, pools)
    probe = Probe(cluster.url, hard_end)
    kills: Counter = Counter()
    events: List[Tuple[float, str]] = []  # (wall time, what) for explaining leaked chunks
    flips = 0
    flip_failures = 0
    skipped = Counter()
    popen_pids: set = set()
    seen: set = set()
    adopted_reaped = 0
    coordinator_restarts = 0
    resume_failures: List[str] = []
    run_ended = time.monotonic()
    ended_by_itself = False
    baseline: Optional[Tuple[float, int]] = None  # (RSS MiB, threads) of the coordinator before any client
    rss_peak, threads_peak, last_status = 0.0, 0, None
    planted: Dict[str, str] = {}
    damaged: Dict[str, str] = {}  # chunk name -> how it was damaged
    damage_skipped: List[str] = []
    damage_kills = 0  # learners killed after chunks were damaged (not counted in `kills`)
    log(
        f"dir {tmp}; port {port}; store flips: {store.how}; subreaper: {subreaper}; "
        f"{args.minutes:g} min, seed {args.seed}"
    )
    try:
        cluster.start(resume=False)
        popen_pids.add(cluster.proc.pid)
        # the clients start once training does: the coordinator's RSS and threads then are the baseline
        training = wait_for_training(cluster, min(end, t0 + 180))
        baseline = proc_status(cluster.proc.pid)
        log(
            f"{'training' if training else 'NOT training yet (going on)'}; coordinator (pid {cluster.proc.pid}) "
            f"before any client: " + (f"RSS {baseline[0]:.0f} MiB, {baseline[1]} threads" if baseline else "gone")
        )
        if args.attacks:
            probe.planted = planted = plant_videos(shared)
            log(f"planted in videos/: {planted}; {STRANGERS} strangers' connections from 127.0.0.2-5")
        clients.start()
        probe.start()
        next_kill = time.monotonic() + rng.uniform(20, 60)
        next_flip = time.monotonic() + rng.uniform(40, 90)
        next_damage = time.monotonic() + rng.uniform(10, 30) if args.attacks else float("inf")
        flip_back = None
        last_scan = last_gauge = 0.0
        while time.monotonic() < hard_end:
            now = time.monotonic()
            code = cluster.proc.poll()
            if code is not None:
                ended_by_itself = True
                log(f"run (incarnation {cluster.incarnation}) exited with code {code} by itself")
                break
            if now - last_gauge >= 1.0:
                last_gauge = now
                status = proc_status(cluster.proc.pid)
                if status is not None:
                    last_status = status
                    rss_peak, threads_peak = max(rss_peak, status[0]), max(threads_peak, status[1])
            if now - last_scan >= 2.0:
                last_scan = now
                seen.update(marked_pids(mark))
                adopted_reaped += reap_adopted(popen_pids)
            quiet = now >= end - QUIET_END
            if flip_back is not None and now >= flip_back:
                store.set_read_only(False)
                events.append((time.time(), "store writable again"))
                flip_back = None
            elif flip_back is None and not quiet and now >= next_flip and store.usable:
                if store.set_read_only(True):
                    flips += 1
                    events.append((time.time(), "store read-only"))
                    log(f"store read-only for 5 s (flip {flips})")
                else:
                    flip_failures += 1
                flip_back = now + 5.0
                next_flip = now + rng.uniform(120, 240)
            if not quiet and now >= next_damage:
                # damaged chunks, then the learner killed: a live learner keeps every chunk it read in its
                # cache (one damaged under it is never read again); the one `run` starts next reads them cold
                next_damage = now + rng.uniform(60, 120)
                before = set(damaged)
                damage_skipped += damage_chunks(shared, damaged)
                learners = [pid for pid, r in workers_of(cluster.proc.pid).items() if r == "learner"]
                for victim in learners:
                    try:
                        os.kill(victim, signal.SIGKILL)
                        damage_kills += 1
                    except ProcessLookupError:
                        pass
                events.append((time.time(), f"chunks damaged, learner {learners} killed"))
                log(
                    f"damaged on the store: {[(n, damaged[n]) for n in damaged if n not in before]}; "
                    f"SIGKILL learner {learners or '(none running: the next starts cold)'}"
                )
            if not quiet and now >= next_kill:
                next_kill = now + rng.uniform(20, 60)
                role = rng.choice(["learner", "collector", "coordinator"])
                if role == "coordinator":
                    victim = cluster.proc.pid
                else:
                    victims = [pid for pid, r in workers_of(cluster.proc.pid).items() if r == role]
                    if not victims:  # being restarted by the launcher just now
                        skipped[role] += 1
                        continue
                    victim = rng.choice(victims)
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:
                    skipped[role] += 1
                    continue
                kills[role] += 1
                events.append((time.time(), f"{role} pid {victim} killed"))
                log(f"SIGKILL {role} (pid {victim}); kills so far {dict(kills)}")
                if role == "coordinator":
                    cluster.proc.wait(10)
                    cluster.start(resume=True)  # compose's restart policy, at once
                    popen_pids.add(cluster.proc.pid)
                    coordinator_restarts += 1
            time.sleep(0.2)
        if not ended_by_itself:
            log("the run did not end by itself within 3 minutes of the soak's end: SIGTERM")
            cluster.proc.send_signal(signal.SIGTERM)
            try:
                cluster.proc.wait(30)
            except subprocess.TimeoutExpired:
                cluster.proc.kill()
                cluster.proc.wait(10)
        run_ended = time.monotonic()
    finally:
        clients.stop.set()
        probe.stop.set()
        if cluster.proc is not None and cluster.proc.poll() is None:  # interrupted: run stops its children
            cluster.proc.send_signal(signal.SIGTERM)
            try:
                cluster.proc.wait(20)
            except subprocess.TimeoutExpired:
                cluster.proc.kill()
                cluster.proc.wait(10)
        store.close()
        clients.join(10)
        probe.join(10)
    fifo_readers_blocked = release_fifos(shared, planted) if planted else 0
    # processes: what the soak started must be gone (give orphans of a killed run the time they are allowed)
    leftover_deadline = run_ended + 15
    while time.monotonic() < leftover_deadline and [p for p in marked_pids(mark) if (proc_stat(p) or ("Z",))[0] != "Z"]:
        adopted_reaped += reap_adopted(popen_pids)
        time.sleep(0.5)
    seen.update(marked_pids(mark))
    left_alive = [p for p in marked_pids(mark) if (proc_stat(p) or ("Z",))[0] != "Z"]
    left_lines = [f"{p} {' '.join(argv_of(p))[:160]}" for p in left_alive]
    adopted_reaped += reap_adopted(popen_pids)  # ours to reap; a zombie left below is someone else's doing
    zombie_lines = zombies(seen | popen_pids)

    # the run's end
    out = cluster.output()
    code = cluster.proc.returncode
    solved = re.search(r"^solved: .*$", out, re.M)
    stopped = re.search(r"^stopped: .*$", out, re.M)
    failed = re.search(r"^parallel-rl run: failed: .*$", out, re.M)
    if solved:
        outcome = f"SOLVED (exit {code}): {solved.group(0)}"
    elif stopped and not failed and ended_by_itself:
        outcome = f"AT ITS BUDGET (exit {code}): {stopped.group(0)}"
    else:
        last = failed.group(0) if failed else (out.strip().splitlines() or ["(no output)"])[-1]
        outcome = f"FAILED (exit {code}{'' if ended_by_itself else ', stopped by the soak'}): {last}"
    restarts = Counter()
    for i in range(len(cluster.logs)):
        for m in re.finditer(r"launcher: \S+ exited with code \S+ .*?; restarting a (\w+)", cluster.output(i)):
            restarts[m.group(1)] += 1
    resumed = sum(
        len(re.findall(r"^resumed \S+: env_steps=", cluster.output(i), re.M)) for i in range(len(cluster.logs))
    )
    for i in range(len(cluster.logs) - 1):  # every run but the last was killed by the soak: no ending line
        resume_failures += re.findall(r"^parallel-rl run: .*$", cluster.output(i), re.M)
    ended_wall = time.time() - (time.monotonic() - run_ended)
    leaked, chunk_lines = chunk_report(shared, events, wall0, ended_wall)
    swept = sum(
        int(m)
        for i in range(len(cluster.logs))
        for m in re.findall(r"coordinator: removed (\d+) chunk file\(s\) no replay index knew", cluster.output(i))
    )
    chunk_lines.insert(1, f"orphan chunk files the coordinator swept during the soak: {swept}")

    print()
    print(f"=== soak: {args.minutes:g} min, seed {args.seed}, CartPole DQN (1 learner, 2 collectors), port {port}")
    print(
        f"kills: learner {kills['learner']}, collector {kills['collector']}, coordinator {kills['coordinator']}"
        + (f"; learner {damage_kills} more after damaging chunks" if args.attacks else "")
        + (f" (skipped, no such process at that moment: {dict(skipped)})" if skipped else "")
    )
    print(
        f"restarts seen: launcher restarted learner {restarts['learner']}, collector {restarts['collector']}; "
        f"coordinator restarted by the soak {coordinator_restarts} (`run --resume` lines 'resumed': {resumed})"
    )
    if resume_failures:
        print(f"lines ending killed runs (none expected): {resume_failures}")
    print(
        f"store read-only flips (5 s each): {flips}"
        + (f", {flip_failures} failed" if flip_failures else "")
        + f" [{store.how}]; probe saw the store unhealthy in {probe.storage_unhealthy_seen} /cluster reads"
    )
    print(f"run ended: {outcome}")
    print(
        f"processes left: {len(left_alive)} alive, {len(zombie_lines)} zombie(s); orphans of killed runs "
        f"reaped by the soak: {adopted_reaped}; processes of the soak seen: {len(seen | popen_pids)}"
    )
    for line in left_lines + zombie_lines:
        print(f"  {line}")
    for line in chunk_lines:
        print(line)
    if probe.buffers:
        b = probe.buffers["buffers"][0]
        print(
            f"last GET /api/v1/buffers: size {b['size']}, chunks {b['chunks']}, pending delete "
            f"{b['chunks_pending_delete']}, deleted {b['chunks_deleted']}, quarantined {b['chunks_quarantined']}"
        )
    print(
        f"REST latency (GET /health every 0.5 s): {quantiles(probe.rest)}; failed requests: {dict(probe.failures) or 0}"
    )
    ages = probe.heartbeat_age
    print(
        "heartbeat age of active workers (GET /workers every 2 s; heartbeats every 1 s): "
        + (
            f"p50 {statistics.median(ages):.2f} s, p99 {sorted(ages)[int(0.99 * (len(ages) - 1))]:.2f} s, "
            f"max {max(ages):.2f} s ({len(ages)} samples)"
            if ages
            else "no samples"
        )
    )
    print(f"hostile clients (300 idle, 20 slow): {clients.report(CHAOS_POOLS)}")
    base = f"RSS {baseline[0]:.0f} MiB, {baseline[1]} threads" if baseline else "unknown"
    rss_bound = (baseline[0] if baseline else 0.0) + RSS_GROWTH_BOUND_MIB
    end_status = f"RSS {last_status[0]:.0f} MiB, {last_status[1]} threads" if last_status else "no sample"
    print(
        f"coordinator (the `run` process, every incarnation): before any client {base}; peak RSS {rss_peak:.0f} "
        f"MiB, peak threads {threads_peak}; at the end (last sample before the run ended) {end_status}"
    )
    criteria = [
        ("run ended solved or at its budget", bool(solved or (stopped and ended_by_itself and not failed)), outcome),
        (
            "coordinator RSS under its bound",
            bool(baseline) and rss_peak <= rss_bound,
            f"peak {rss_peak:.0f} MiB <= {rss_bound:.0f} MiB (before any client + {RSS_GROWTH_BOUND_MIB} MiB)",
        ),
        ("no process left", not left_alive, f"{len(left_alive)} alive 15 s after the run"),
        ("no zombie", not zombie_lines, f"{len(zombie_lines)} in state Z under the soak"),
        ("no chunk leaked", leaked == 0, f"{leaked} leaked"),
    ]
    if args.attacks:
        opened, closed = clients.total("stranger_", "opened"), clients.total("stranger_", "closed_by_server")
        answered = {k: v for k, v in clients.stats.items() if k.startswith("stranger_") and "_answered_" in k}
        print(
            f"hostile connections without the token: {opened} opened, {closed} turned away (closed by the "
            f"server; answered: {sum(answered.values())})"
            + (
                f"; bind() refused {sorted(clients.sources_refused)} (127.0.0.1 used)"
                if clients.sources_refused
                else ""
            )
        )
        print(f"  {clients.report(ATTACK_POOLS)}")
        print(
            f"planted files GETs (every 2 s): {json.dumps(dict(sorted(probe.planted_answers.items())))}; "
            f"readers found blocked on the FIFO at the end: {fifo_readers_blocked}"
        )
        fates, damage_lines = damage_report(shared, damaged, [cluster.output(i) for i in range(len(cluster.logs))])
        for line in damage_lines:
            print(line)
        if damage_skipped:
            print(
                f"  chunks that could not be damaged (deleted since, store read-only): {len(damage_skipped)}, "
                f"e.g. {damage_skipped[:2]}"
            )
        bad_planted = {
            k: v
            for k, v in probe.planted_answers.items()
            if not (k.endswith((": 404", "listing: 200")) or "refused" in k)
        }
        answered_planted = sum(v for k, v in probe.planted_answers.items() if "refused" not in k)
        criteria += [
            (f"{STRANGERS} hostile connections opened", opened >= STRANGERS, f"{opened} opened, {closed} turned away"),
            (
                "planted files answered 404 and never listed, no GET hung",
                answered_planted > 0 and not bad_planted and not fifo_readers_blocked,
                f"{answered_planted} answered; other answers {bad_planted or 'none'}; "
                f"FIFO readers blocked {fifo_readers_blocked}",
            ),
            (
                "damaged chunks quarantined, none left indexed",
                fates.get("quarantined", 0) > 0
                and not fates.get("STILL REFERENCED by the final snapshot")
                and not fates.get("unreadable"),
                f"{fates.get('quarantined', 0)} of {len(damaged)} quarantined, "
                f"{fates.get('STILL REFERENCED by the final snapshot', 0)} still referenced",
            ),
        ]
    print("criteria:")
    for what, passed, detail in criteria:
        print(f"  {'PASS' if passed else 'FAIL'} {what}: {detail}")
    ok = all(passed for _, passed, _ in criteria)
    if args.keep or not ok:
        print(f"logs and shared directory kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
