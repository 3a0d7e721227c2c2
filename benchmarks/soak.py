"""Soak: CartPole DQN on a local cluster under kills, hostile clients and a store that turns read-only.

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--seed 0]

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

No kill and no store flip in the soak's last 40 s, so the run winds down undisturbed. At the end it prints
kills per role, restarts seen (the launcher's and the soak's), how the run ended (solved / at its budget /
failed, with its line), processes left (zombies; processes of the soak still alive 15 s after the run
ended), leaked chunks (a chunk file on the store that the final coordinator snapshot does not index and that
is old enough for the coordinator's orphan sweep to have removed it; an indexed chunk no row references is
waiting out its deletion grace, an unindexed one younger than the sweep's age and interval waits for the
next sweep, and ``.tmp-`` files of killed writers are removed after 10 minutes: each counted apart), and the
probe's latencies. Exit code 0 when the run ended solved or at its budget with no process left and no chunk leaked.
"""
from __future__ import annotations

import argparse
import ctypes
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
from collections import Counter
from typing import Dict, List, Optional, Tuple

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "cartpole_dqn_parallel.py")
MARK = "PARALLEL_RL_SOAK_ID"  # every process the soak starts inherits it: found again in /proc/<pid>/environ
QUIET_END = 40.0  # no kill, no store flip in the soak's last seconds
IDLE_CLIENTS = 300
SLOW_CLIENTS = 20
PR_SET_CHILD_SUBREAPER = 36
# chunk files no index knows (a collector killed before announcing, a coordinator killed before its next
# snapshot) are swept once this old (default 600 s): shortened so that a short soak sees the sweep work
ORPHAN_AGE = 60.0
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
        self.sets = [f"seed={args.seed}", f"exp_name={tmp}/exp", "env.stop_value=100000",
                     "parallel.commander.max_env_step=0", f"parallel.commander.max_seconds={budget:g}",
                     "parallel.commander.max_task_attempts=1000", "parallel.supervisor.max_restarts=1000",
                     f"parallel.coordinator.orphan_chunk_max_age={ORPHAN_AGE:g}"]
        self.proc: Optional[subprocess.Popen] = None
        self.incarnation = 0
        self.logs: List[str] = []
        self.env = {**os.environ, MARK: mark, "PYTHONPATH": os.pathsep.join(
            p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)}

    def start(self, resume: bool) -> None:
        self.incarnation += 1
        path = os.path.join(self.tmp, f"run-{self.incarnation}.log")
        self.logs.append(path)
        cmd = [sys.executable, "-m", "parallel_rl", "run", "-c", CONFIG, "--port", str(self.port)]
        cmd += ["--resume", self.shared] if resume else ["--shared-dir", self.shared]
        for s in self.sets:
            cmd += ["--set", s]
        with open(path, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env, cwd=ROOT)

    def output(self, which: int = -1) -> str:
        with open(self.logs[which], errors="replace") as f:
            return f.read()


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
                r = subprocess.run(["mount", "-o", f"remount,{'ro' if ro else 'rw'},bind", d, d],
                                   capture_output=True, text=True)
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

class Clients(threading.Thread):
    """IDLE_CLIENTS silent connections and SLOW_CLIENTS that send a request a byte every 2-4 s; each
    reopened when it closes or cannot connect. One thread, one selector; stops by ``stop`` or ``deadline``."""

    REQUEST = b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: soak-slow-client\r\n\r\n"

    def __init__(self, port: int, rng: random.Random, deadline: float):
        super().__init__(name="soak-clients", daemon=True)
        self.port, self.rng, self.deadline = port, rng, deadline
        self.stop = threading.Event()
        self.stats = Counter()
        self.held_idle: List[int] = []  # samples of open idle connections
        self.held_slow: List[int] = []

    def _open(self) -> Optional[socket.socket]:
        s = socket.socket()
        s.settimeout(1.0)
        try:
            s.connect(("127.0.0.1", self.port))
        except OSError:
            s.close()
            self.stats["connect_failed"] += 1
            return None
        s.setblocking(False)
        return s

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        idle: Dict[socket.socket, None] = {}
        slow: Dict[socket.socket, List] = {}  # sock -> [bytes sent, next send at]
        retry_at = 0.0
        try:
            while not self.stop.is_set() and time.monotonic() < self.deadline:
                now = time.monotonic()
                if now >= retry_at:
                    opened_all = True
                    for kind, pool, want in (("idle", idle, IDLE_CLIENTS), ("slow", slow, SLOW_CLIENTS)):
                        for _ in range(min(50, want - len(pool))):  # at most 50 a tick: no connect storm
                            s = self._open()
                            if s is None:
                                opened_all = False
                                break
                            self.stats[f"{kind}_opened"] += 1
                            pool[s] = [0, now + self.rng.uniform(0, 3)] if kind == "slow" else None
                            sel.register(s, selectors.EVENT_READ, kind)
                    retry_at = now + (0.5 if not opened_all else 0.05)
                for s, state in slow.items():
                    if state[0] < len(self.REQUEST) and now >= state[1]:
                        try:
                            s.send(self.REQUEST[state[0]:state[0] + 1])
                            state[0] += 1
                            state[1] = now + self.rng.uniform(2.0, 4.0)
                        except OSError:
                            state[1] = now + 3600  # closed: the selector reports it
                for key, _ in sel.select(timeout=0.1):
                    s, kind = key.fileobj, key.data
                    try:
                        data = s.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if data:
                        status = data.split(b" ", 2)[1:2]
                        self.stats[f"{kind}_answered_{status[0].decode(errors='replace') if status else '?'}"] += 1
                        if kind == "slow" and slow[s][0] >= len(self.REQUEST):
                            self.stats["slow_request_completed"] += 1
                        continue  # the server closes after an error answer: seen as b"" next
                    self.stats[f"{kind}_closed_by_server"] += 1
                    sel.unregister(s)
                    s.close()
                    (idle if kind == "idle" else slow).pop(s, None)
                if int(now) % 5 == 0:
                    self.held_idle.append(len(idle))
                    self.held_slow.append(len(slow))
        finally:
            for s in list(idle) + list(slow):
                try:
                    sel.unregister(s)
                except (KeyError, ValueError):
                    pass
                s.close()
            sel.close()


class Probe(threading.Thread):
    """REST latency (GET /health), heartbeat ages (GET /workers), the last GET /buffers and /cluster."""

    def __init__(self, url: str, deadline: float):
        super().__init__(name="soak-probe", daemon=True)
        self.url, self.deadline = url, deadline
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
        meta, arrays = storage.latest_coordinator_state()
    except Exception as exc:  # noqa: BLE001 - a report: say what failed and go on
        return len(chunks), [f"cannot read the final coordinator snapshot: {type(exc).__name__}: {exc}"]
    names = arrays["chunks/name"].tolist()
    refs = dict(zip(names, arrays["chunks/ints"][:, 3].tolist()))
    referenced = {n for n, r in refs.items() if r > 0}
    grace = {n for n, r in refs.items() if r <= 0}
    unindexed = sorted(chunks - set(refs))
    # not yet ORPHAN_AGE old at the last sweep the run made: the next run's (a resume's) sweep removes them
    young = [n for n in unindexed if os.path.getmtime(os.path.join(data, n + ".npz")) > ended - ORPHAN_AGE - SWEEP_EVERY]
    leaked = [n for n in unindexed if n not in young]
    missing = sorted(referenced - chunks)
    lines.append(f"chunk files on the store: {len(chunks)}; referenced by the final snapshot (state {meta.get('seq', '?')}): "
                 f"{len(referenced & chunks)}; indexed, waiting out their deletion grace: {len(grace & chunks)}; "
                 f"temp files of killed writers (removed after 10 min): {len(temp)}")
    lines.append(f"unindexed chunk files younger than the orphan sweep ({ORPHAN_AGE:g} s + its {SWEEP_EVERY:g} s "
                 f"interval) at the run's end: {len(young)}")
    lines.append(f"LEAKED chunks (on the store, not indexed, old enough to have been swept): {len(leaked)}")
    for name in leaked[:20]:
        mtime = os.path.getmtime(os.path.join(data, name + ".npz"))
        before = [e for e in events if e[0] <= mtime + 0.5]
        last = f"last event before it: {before[-1][1]} at +{before[-1][0] - t0:.1f}s" if before else "no event before it"
        lines.append(f"  {name}.npz written at +{mtime - t0:.1f}s ({last})")
    if missing:
        lines.append(f"indexed with rows but missing from the store: {len(missing)} (e.g. {missing[:3]})")
    return len(leaked), lines


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
    args = parser.parse_args()
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
    clients = Clients(port, random.Random(args.seed + 1), hard_end)
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
    log(f"dir {tmp}; port {port}; store flips: {store.how}; subreaper: {subreaper}; "
        f"{args.minutes:g} min, seed {args.seed}")
    try:
        cluster.start(resume=False)
        popen_pids.add(cluster.proc.pid)
        clients.start()
        probe.start()
        next_kill = time.monotonic() + rng.uniform(20, 60)
        next_flip = time.monotonic() + rng.uniform(40, 90)
        flip_back = None
        last_scan = 0.0
        while time.monotonic() < hard_end:
            now = time.monotonic()
            code = cluster.proc.poll()
            if code is not None:
                ended_by_itself = True
                log(f"run (incarnation {cluster.incarnation}) exited with code {code} by itself")
                break
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
        last = (failed.group(0) if failed else (out.strip().splitlines() or ["(no output)"])[-1])
        outcome = f"FAILED (exit {code}{'' if ended_by_itself else ', stopped by the soak'}): {last}"
    restarts = Counter()
    for i in range(len(cluster.logs)):
        for m in re.finditer(r"launcher: \S+ exited with code \S+ .*?; restarting a (\w+)", cluster.output(i)):
            restarts[m.group(1)] += 1
    resumed = sum(len(re.findall(r"^resumed \S+: env_steps=", cluster.output(i), re.M))
                  for i in range(len(cluster.logs)))
    for i in range(len(cluster.logs) - 1):  # every run but the last was killed by the soak: no ending line
        resume_failures += re.findall(r"^parallel-rl run: .*$", cluster.output(i), re.M)
    ended_wall = time.time() - (time.monotonic() - run_ended)
    leaked, chunk_lines = chunk_report(shared, events, wall0, ended_wall)
    swept = sum(int(m) for i in range(len(cluster.logs)) for m in re.findall(
        r"coordinator: removed (\d+) chunk file\(s\) no replay index knew", cluster.output(i)))
    chunk_lines.insert(1, f"orphan chunk files the coordinator swept during the soak: {swept}")

    print()
    print(f"=== soak: {args.minutes:g} min, seed {args.seed}, CartPole DQN (1 learner, 2 collectors), port {port}")
    print(f"kills: learner {kills['learner']}, collector {kills['collector']}, coordinator {kills['coordinator']}"
          + (f" (skipped, no such process at that moment: {dict(skipped)})" if skipped else ""))
    print(f"restarts seen: launcher restarted learner {restarts['learner']}, collector {restarts['collector']}; "
          f"coordinator restarted by the soak {coordinator_restarts} (`run --resume` lines 'resumed': {resumed})")
    if resume_failures:
        print(f"lines ending killed runs (none expected): {resume_failures}")
    print(f"store read-only flips (5 s each): {flips}" + (f", {flip_failures} failed" if flip_failures else "")
          + f" [{store.how}]; probe saw the store unhealthy in {probe.storage_unhealthy_seen} /cluster reads")
    print(f"run ended: {outcome}")
    print(f"processes left: {len(left_alive)} alive, {len(zombie_lines)} zombie(s); orphans of killed runs "
          f"reaped by the soak: {adopted_reaped}; processes of the soak seen: {len(seen | popen_pids)}")
    for line in left_lines + zombie_lines:
        print(f"  {line}")
    for line in chunk_lines:
        print(line)
    if probe.buffers:
        b = probe.buffers["buffers"][0]
        print(f"last GET /api/v1/buffers: size {b['size']}, chunks {b['chunks']}, pending delete "
              f"{b['chunks_pending_delete']}, deleted {b['chunks_deleted']}, quarantined {b['chunks_quarantined']}")
    print(f"REST latency (GET /health every 0.5 s): {quantiles(probe.rest)}; failed requests: "
          f"{dict(probe.failures) or 0}")
    ages = probe.heartbeat_age
    print(f"heartbeat age of active workers (GET /workers every 2 s; heartbeats every 1 s): "
          + (f"p50 {statistics.median(ages):.2f} s, p99 {sorted(ages)[int(0.99 * (len(ages) - 1))]:.2f} s, "
             f"max {max(ages):.2f} s ({len(ages)} samples)" if ages else "no samples"))
    print(f"hostile clients: idle held median {statistics.median(clients.held_idle or [0]):.0f}/{IDLE_CLIENTS}, "
          f"slow held median {statistics.median(clients.held_slow or [0]):.0f}/{SLOW_CLIENTS}; "
          f"{json.dumps(dict(sorted(clients.stats.items())))}")
    ok = (solved or (stopped and ended_by_itself and not failed)) and not left_alive and not zombie_lines \
        and leaked == 0
    if args.keep or not ok:
        print(f"logs and shared directory kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
