"""``parallel-rl run``: the whole cluster as local processes.

The coordinator runs in this process (it needs no torch); the learner and
the collectors run ``parallel-rl learner`` / ``parallel-rl collector
--coordinator URL``, exactly as docker-compose starts them, but as forks of a
fork server that imported torch, gymnasium and the roles once
(:mod:`.forkserver`, started before the coordinator boots so that the two
overlap). Each child asks the coordinator for the worker id it is named by
here, so its output is forwarded with the ``[collector-1]`` prefix the REST
API shows for it (and follows it when the worker registers again under a new
id: after being lost, or when the id was taken). The launcher supervises its
children: one that dies is marked lost at once and restarted (under a new name,
the old entry stays for the record): at once the first time, then after an
exponential backoff; a restarted learner resumes from the newest full learner
state. A role that dies more than ``parallel.supervisor.max_restarts`` times
within ``restart_window`` seconds fails the run with its last words. A
collector an operator removed (``DELETE /api/v1/collectors/<id>``) is not
replaced: the cluster has one collector less, as ``collectors add`` gives it
one more; one that deregistered on its own (SIGTERM) is replaced.
The children die with this process (the fork server exits with it, and they
die with the fork server: ``PR_SET_PDEATHSIG``) and are terminated, then
killed, on the way out whatever happens. ``resume=DIR`` continues an
interrupted run from the coordinator state saved in DIR.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Deque, Dict, List, Optional, Union

from easydict import EasyDict

from ..coordinator import Coordinator, CoordinatorState, Worker
from ..coordinator.coordinator import mean_return
from ..transport import TOKEN_ENV, new_token, write_token_file
from ..progress import ProgressReporter
from ..runtime import (
    experiment_dir,
    freeze_startup_objects,
    on_signals,
    outcome_exit_code,
    pin_process,
    run_storage,
    shared_root,
    signal_exit_code,
)
from ..storage import lock_shared_dir
from . import forkserver
from .placement import WINDOW as placement_window, CpuPlacement

logger = logging.getLogger(__name__)
# the wait loop's tick: how soon a dead child is noticed (the loop itself costs ~0.1 ms)
LOOP_TICK = 0.1
# the longest a stopping run waits for its learner to finish an update before terminating it
MAX_LEARNER_GRACE = 60.0
# the file, in the shared directory (an object store's: the experiment directory), that holds a token `run` made
TOKEN_FILE = "run.token"


@dataclass
class Child:
    name: str
    role: str
    proc: forkserver.ForkedProcess
    tail: Deque[str] = field(default_factory=lambda: collections.deque(maxlen=20))
    reader: Optional[threading.Thread] = None
    reaped: bool = False  # its death was handled (marked lost, restart scheduled)
    started_at: float = field(default_factory=time.time)  # wall clock, as the coordinator's registered_at

    def last_words(self) -> str:
        lines = [line for line in self.tail if line.strip()]
        return lines[-1].strip() if lines else "no output"


# one worker's line at a time on the launcher's stderr: print() writes a line and its newline in two calls, and
# two readers printing at once ran two workers' lines together ("... seed 1491744975[collector-1] ...")
_OUTPUT_LOCK = threading.Lock()


def forward_lines(name: Union[str, Callable[[], str]], stream, out, tail: Optional[Deque[str]] = None) -> None:
    """Copy the lines of the binary ``stream`` to the text stream ``out`` as ``[name] line``, each line whole
    (one write under a lock that every forwarding thread shares), and keep them in ``tail``; until end of file.
    ``name`` may be a function, asked for each line (a worker's id may change while it runs)."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        if tail is not None:
            tail.append(line)
        label = name() if callable(name) else name
        with _OUTPUT_LOCK:
            out.write(f"[{label}] {line}\n")
            out.flush()
    stream.close()


def learner_stop_grace(grace: float, longest_update: float) -> float:
    """How long a stopping run waits for its learner: ``grace``, or what its longest update took with room to
    spare (it finishes the update it is in, then saves its state), at most :data:`MAX_LEARNER_GRACE`."""
    return min(max(grace, 1.5 * longest_update + 1.0), max(grace, MAX_LEARNER_GRACE))


def restart_delay(restarts: int, backoff: float, max_backoff: float) -> float:
    """Seconds before restarting a role that has been restarted ``restarts`` times already (within the restart
    window): none for its first restart (a one-off death, a collector killed by hand, costs no wait), then
    ``backoff`` doubled per restart after it, at most ``max_backoff`` (a role that keeps dying does not spin)."""
    return 0.0 if restarts <= 0 else min(max_backoff, backoff * 2 ** (restarts - 1))


class LocalCluster:
    def __init__(
        self,
        cfg: EasyDict,
        collectors: int,
        host: str,
        port: int,
        shared_dir: Optional[str],
        config_path: Optional[str] = None,
        overrides: Optional[List[str]] = None,
        resume: Optional[str] = None,
        add_worker: Optional[Callable[[str], dict]] = None,
    ):
        if collectors < 1:
            from ..errors import ConfigError

            raise ConfigError(f"--collectors must be >= 1, got {collectors}")
        self.cfg = cfg
        self.n_collectors = collectors
        self.config_path, self.overrides = config_path, list(overrides or [])
        made_token = not os.environ.get(TOKEN_ENV)
        self.token = os.environ.get(TOKEN_ENV) or new_token()
        os.environ[TOKEN_ENV] = self.token
        self.storage = run_storage(cfg, resume or shared_dir)
        # held until this process ends: another run on the directory fails instead of wiping it under us
        self.dir_lock = lock_shared_dir(self.storage, "parallel-rl run --resume" if resume else "parallel-rl run")
        self.token_file = self.storage.local_dir(TOKEN_FILE, fallback=experiment_dir(cfg))
        if made_token:  # for `collectors add/remove` (--token-file): the path is printed, never the token
            write_token_file(self.token_file, self.token)
            print(
                f"token: in {self.token_file} (client commands: --token-file {self.token_file}; or export "
                f"{TOKEN_ENV} before `run`)",
                flush=True,
            )
        elif os.path.exists(self.token_file):  # an earlier run's: it would only get the client commands a 403
            os.unlink(self.token_file)
        self.coordinator = Coordinator(cfg, self.storage, self.token)
        from coordinator_app import serve_coordinator

        # bound before the store is touched: a port in use must not cost the earlier run its files
        try:
            self.server = serve_coordinator(self.coordinator, host, port, start_worker=add_worker or self.start_worker)
        except BaseException:
            self.dir_lock.release()
            raise
        if resume:
            if not self.coordinator.snapshots.resume():
                from ..errors import ConfigError

                self.server.close()
                self.dir_lock.release()
                raise ConfigError(
                    f"--resume {resume}: no saved coordinator state in {self.storage.state_dir}; "
                    f"pass the shared directory of the run to continue (its REST line and summary "
                    f"name it)"
                )
            # the processes of the interrupted run are gone: replace their tasks now, not after a lease
            self.coordinator.membership.forget_workers("run resumed")
            print(
                f"resumed {self.storage.root}: env_steps={self.coordinator.env_steps} "
                f"train_iter={self.coordinator.train_iter} policy_version={self.coordinator.policy_version} "
                f"buffer={self.coordinator.replay.count()}",
                flush=True,
            )
        else:
            removed = self.storage.reset()
            if removed:
                logger.warning(
                    "launcher: removed %d file(s) of an earlier run from %s (to continue a run "
                    "instead: parallel-rl run --resume DIR)",
                    removed,
                    self.storage.root,
                )
        self.children: List[Child] = []
        self._console = sys.stderr  # where the children's lines go: the progress reporter's console while it runs
        self.interrupted: Optional[str] = None
        self._stop = threading.Event()
        self._names = {"learner": itertools.count(1), "collector": itertools.count(1)}
        self._names_lock = threading.Lock()  # start_worker names one from a request thread
        # per role: when each restart within parallel.supervisor.restart_window happened (monotonic)
        self.restarts: Dict[str, List[float]] = {"learner": [], "collector": []}
        self._pending: List[tuple] = []  # (start at monotonic time, role, name or None)
        self._pending_lock = threading.Lock()  # starts are queued from request threads (and the service's pool)
        self._pinned_cpus: Optional[dict] = None  # role -> CPU set, once placed (.placement)

    # a run hosted by the service (parallel_rl.service) shares this process and its fork server with other runs:
    # it pins no CPUs, leaves the fork server running, and its workers are started by the service's pool
    hosted = False
    progress_name = "cluster"  # the progress line's label

    @property
    def url(self) -> str:
        return self.server.url

    def _place(self, placement: CpuPlacement) -> None:
        """Pin this process and every child to the CPUs their role gets now, if the collectors' last window changed
        them (:mod:`.placement`)."""
        cpus = placement.decide(
            (w.worker_id, w.time_breakdown)
            for w in self.coordinator.workers.list("collector", active_only=True)
            if w.time_breakdown is not None
        )
        if cpus is None:
            return
        self._pinned_cpus = cpus
        pin_process(os.getpid(), cpus["collector"])
        for child in self.children:
            if child.proc.poll() is None:
                pin_process(child.proc.pid, cpus[child.role])
        logger.info("launcher: %s", placement.reason)

    def _new_name(self, role: str) -> str:
        with self._names_lock:
            name = f"{role}-{next(self._names[role])}"
            while self.coordinator.workers.get(name) is not None:  # a resumed run's coordinator knows old names
                name = f"{role}-{next(self._names[role])}"
            return name

    def start_worker(self, role: str) -> dict:
        """``POST /api/v1/collectors`` without an address (``parallel-rl collectors add``): one more ``role``
        process, started by the wait loop as a restart is (and supervised like the others)."""
        name = self._new_name(role)
        with self._pending_lock:
            self._pending.append((time.monotonic(), role, name))
        return {"worker_id": name, "kind": role, "state": "starting"}

    def _spawn(self, role: str, name: Optional[str] = None) -> Child:
        name = name or self._new_name(role)
        argv = [
            role,
            "--coordinator",
            self.url,
            "--worker-id",
            name,
            "--shared-dir",
            self.storage.root,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ]
        if self.config_path:
            argv += ["-c", self.config_path]
        for text in self.overrides:
            argv += ["--set", text]
        started_at = time.time()
        proc = forkserver.ForkedProcess(argv, dict(os.environ, **{TOKEN_ENV: self.token}))
        child = Child(name, role, proc, started_at=started_at)
        child.reader = threading.Thread(
            target=forward_lines,
            args=(lambda: self._name_of(child), proc.stdout, self._console, child.tail),
            daemon=True,
            name=f"{name}-output",
        )
        child.reader.start()
        if self._pinned_cpus:
            pin_process(proc.pid, self._pinned_cpus[role])
        self.children.append(child)
        return child

    def request_stop(self, signal_name: str) -> None:
        """SIGINT/SIGTERM (from the signal watcher thread, never inside a handler): leave the wait loop and
        shut down. Idempotent: the first signal names the interruption and its exit code."""
        if self.interrupted is None:
            self.interrupted = signal_name
        self._stop.set()
        self.coordinator.done_event.set()

    def _worker_of(self, child: Child) -> Optional[Worker]:
        """The coordinator's newest entry for ``child``'s process (by its pid, registered since it started): a
        worker that registered again (after being lost) has a new entry, under a new id."""
        worker = self.coordinator.workers.get(child.name)
        if worker is not None and worker.pid == child.proc.pid and worker.state.active:
            return worker  # the usual case: one look-up
        entries = [
            w
            for w in self.coordinator.workers.list(child.role)
            if w.pid == child.proc.pid and w.registered_at >= child.started_at
        ]
        return max(entries, key=lambda w: w.registered_at) if entries else None

    def _name_of(self, child: Child) -> str:
        """``child``'s worker id as the REST API shows it now (its output's prefix): the name it was started
        under until it registers under another one (lost and back, or its id was taken)."""
        worker = self._worker_of(child)
        if worker is not None and worker.state.active and worker.worker_id != child.name:
            logger.warning(
                "launcher: %s is now %s (it registered under a new worker id); its output follows",
                child.name,
                worker.worker_id,
            )
            child.name = worker.worker_id
        return child.name

    def _supervise(self) -> Optional[str]:
        """Restart children that died (after a backoff); the reason to fail the run once a role's budget is spent.

        A collector an operator removed (``collectors remove``, ``DELETE``) is no death: it is not replaced and
        costs no restart. One that deregistered on its own (SIGTERM: from a person, or from the kernel when its
        fork server died) is replaced like any other. Restarts count within
        ``restart_window`` (0: the whole run), and so does the backoff: a role with no restart in the window
        (a healthy stretch) is restarted at once again."""
        sup = self.cfg.parallel.supervisor
        window = float(sup.restart_window)
        within = f" within {window:g}s" if window > 0 else ""
        for child in [c for c in self.children if c.proc.poll() is not None and not c.reaped]:
            child.reaped = True
            code = child.proc.returncode
            worker = self._worker_of(child)
            self.coordinator.membership.process_exited(child.proc.pid, f"process exited with code {code}")
            if child.role == "collector" and worker is not None and worker.removed:
                left = sum(c.role == "collector" and c.proc.poll() is None for c in self.children)
                logger.info(
                    "launcher: %s was removed (exit code %s): not replaced; %d collector process(es) left",
                    child.name,
                    code,
                    left,
                )
                continue
            now = time.monotonic()
            recent = self.restarts[child.role] = [
                t for t in self.restarts[child.role] if window <= 0 or now - t <= window
            ]
            if len(recent) >= int(sup.max_restarts):
                return (
                    f"{child.role} kept dying: {child.name} exited with code {code} after "
                    f"{len(recent)} restart(s) (parallel.supervisor.max_restarts={sup.max_restarts}){within}: "
                    f"{child.last_words()}"
                )
            delay = restart_delay(len(recent), float(sup.backoff), float(sup.max_backoff))
            recent.append(now)
            logger.warning(
                "launcher: %s exited with code %s (%s); restarting a %s in %.1fs (restart %d of %d%s)",
                child.name,
                code,
                child.last_words(),
                child.role,
                delay,
                len(recent),
                sup.max_restarts,
                within,
            )
            with self._pending_lock:
                self._pending.append((now + delay, child.role, None))
        now = time.monotonic()
        with self._pending_lock:
            due = [p for p in self._pending if p[0] <= now]
            self._pending = [p for p in self._pending if p[0] > now]
        for item in due:
            child = self._spawn(item[1], item[2])
            logger.info("launcher: started %s (pid %d)", child.name, child.proc.pid)
        return None

    def next_restart_in(self) -> float:
        """Seconds until the next scheduled restart (the wait loop's tick at most)."""
        with self._pending_lock:
            starts = [item[0] for item in self._pending]
        return max(0.0, min(LOOP_TICK, min(starts) - time.monotonic())) if starts else LOOP_TICK

    def run(self) -> int:
        """Start everything, wait for the end, shut down; returns the exit code."""
        self.server.start()
        self.coordinator.start()
        freeze_startup_objects()  # `parallel-rl run`'s own process (run_local_cluster)
        print(f"REST API: {self.url}/api/v1", flush=True)
        # steps/s counts this process's steps: a resumed run's steps before the resume are not its own
        reporter = ProgressReporter(
            self.cfg.run.stop_value, name=self.progress_name, start_envstep=self.coordinator.env_steps
        )
        self._console = reporter.console(sys.stderr)  # children's lines never land on the bar's line
        failure: Optional[str] = None
        placement = CpuPlacement(self.cfg.parallel.learner.world_size)
        place = bool(self.cfg.parallel.learner.dedicated_cpu) and placement.possible and not self.hosted
        next_placement = 0.0
        start_iter = self.coordinator.train_iter  # a resumed run places once its own learner trains, not at once
        try:  # from the first child on: whatever fails, the server's threads stop and the process can exit
            for role in [] if self.hosted else ["learner"] + ["collector"] * self.n_collectors:
                if self._stop.is_set():  # interrupted while starting: no more children to start and stop again
                    break
                self._spawn(role)
            while not self._stop.is_set() and not self.coordinator.done_event.is_set():
                self.coordinator.done_event.wait(self.next_restart_in())
                if place and self.coordinator.train_iter > start_iter and time.monotonic() >= next_placement:
                    next_placement = time.monotonic() + placement_window
                    self._place(placement)
                failure = self._supervise()
                if failure:
                    self.coordinator.finish(CoordinatorState.FAILED, failure)
                    break
                c = self.coordinator
                counts = c.workers.counts()
                active = sum(counts[k]["idle"] + counts[k]["busy"] for k in counts)
                reporter.update(
                    c.env_steps,
                    c.train_iter,
                    c.last_eval_return,
                    c.best_eval_return,
                    workers=str(active),
                    train_return=mean_return(c.train_returns),
                )
        finally:
            c = self.coordinator
            reporter.update(c.env_steps, c.train_iter, c.last_eval_return, c.best_eval_return, force=True)
            reporter.close()
            self.shutdown()
        return self._exit_code()

    def _exit_code(self) -> int:
        c = self.coordinator
        summary = (
            f"env_steps={c.env_steps} train_iter={c.train_iter} policy_version={c.policy_version} "
            f"best_eval_return={c.summary()['best_eval_return']} time={c.uptime:.2f}s"
        )
        if self.interrupted:
            print(f"interrupted ({self.interrupted}); {summary}", flush=True)
            if not self.hosted:  # the service resumes its runs itself
                print(
                    f"continue with: parallel-rl run --resume {self.storage.root} (and the same -c/--set)", flush=True
                )
            return signal_exit_code(self.interrupted)
        code = outcome_exit_code(c.state, self.cfg.run.stop_value)
        if c.state in (CoordinatorState.SOLVED, CoordinatorState.STOPPED):
            print(f"{c.state}: {c.reason}; {summary}", flush=True)
            if code:
                print(f"parallel-rl run: {c.reason} before reaching the stop value", file=sys.stderr)
        else:
            print(f"parallel-rl run: failed: {c.reason}", file=sys.stderr)
        return code

    def shutdown(self, grace: float = 5.0) -> None:
        """Tell workers to stop, then terminate and kill whatever is left; close the server.

        A learner gets longer than ``grace`` when its updates do (an on-policy version's epochs on a big
        network): it finishes the update it is in and saves its state, up to :data:`MAX_LEARNER_GRACE`."""
        self.coordinator.close(notify_workers=True)
        start = time.monotonic()
        longest = float(self.coordinator.learn_info.get("longest_update_seconds") or 0.0)
        learner_grace = learner_stop_grace(grace, longest)
        if learner_grace > grace and any(c.role == "learner" and c.proc.poll() is None for c in self.children):
            logger.info(
                "launcher: giving the learner up to %.0f s to finish its update (its longest took %.1f s)",
                learner_grace,
                longest,
            )
        for child in self.children:
            deadline = start + (learner_grace if child.role == "learner" else grace)
            try:
                child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for child in self.children:
            if child.proc.poll() is None:
                logger.warning("launcher: %s did not exit; terminating", child.name)
                child.proc.terminate()
        for child in self.children:
            try:
                child.proc.wait(3.0)
            except subprocess.TimeoutExpired:
                logger.error("launcher: %s ignored SIGTERM; killing", child.name)
                child.proc.kill()
                child.proc.wait(3.0)
        for child in self.children:
            if child.reader is not None:
                child.reader.join(2.0)
        try:
            if not self.hosted:
                forkserver.stop()
        finally:  # the server's threads are not daemons: left running, they keep the process from exiting
            self.server.close(timeout=2.0)
            try:
                self.coordinator.snapshots.save_state()  # after the workers' last reports: a resume starts exactly here
            finally:
                self.dir_lock.release()


def run_local_cluster(
    cfg: EasyDict,
    collectors: int = 2,
    host: str = "127.0.0.1",
    port: int = 0,
    shared_dir: Optional[str] = None,
    config_path: Optional[str] = None,
    overrides: Optional[List[str]] = None,
    resume: Optional[str] = None,
) -> int:
    """Run the cluster; SIGINT/SIGTERM stop it (exit 130/143), heard from the start (also while it sets up; from
    before this call where the process called :func:`~parallel_rl.runtime.on_signals` earlier)."""
    signals: List[str] = []
    clusters: List[LocalCluster] = []

    def on_signal(name: str) -> None:  # on the signal watcher thread
        signals.append(name)
        for cluster in clusters:
            cluster.request_stop(signals[0])

    on_signals(on_signal)
    if signals:  # before the cluster: nothing started, the shared directory untouched
        print(
            f"interrupted ({signals[0]}) before the run started; nothing to continue "
            f"({shared_root(cfg, resume or shared_dir)} untouched)",
            flush=True,
        )
        return signal_exit_code(signals[0])
    cluster = LocalCluster(cfg, collectors, host, port, shared_dir, config_path, overrides, resume)
    clusters.append(cluster)
    if signals:  # it came while the cluster was being set up
        cluster.request_stop(signals[0])
    return cluster.run()
