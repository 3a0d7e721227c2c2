"""``parallel-rl run``: the whole cluster as local processes.

The coordinator runs in this process (it needs no torch); the learner and
the collectors are child processes started with ``parallel-rl learner`` /
``parallel-rl collector --coordinator URL``, exactly as docker-compose starts
them. Their output is forwarded with a ``[role-N]`` prefix. A child that dies
fails the run with its last words (a collector only when none is left); the
children die with this process (``PR_SET_PDEATHSIG``) and are terminated,
then killed, on the way out whatever happens.
"""
from __future__ import annotations

import collections
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Deque, List, Optional

from easydict import EasyDict

from ..coordinator import Coordinator, CoordinatorState
from ..interaction.http import TOKEN_ENV, new_token
from ..progress import ProgressReporter
from ..runtime import outcome_exit_code, pin_process, shared_root
from ..storage import SharedStorage

logger = logging.getLogger(__name__)

PARENT_ENV = "PARALLEL_RL_PARENT_PID"


@dataclass
class Child:
    name: str
    role: str
    proc: subprocess.Popen
    tail: Deque[str] = field(default_factory=lambda: collections.deque(maxlen=20))
    reader: Optional[threading.Thread] = None

    def last_words(self) -> str:
        lines = [line for line in self.tail if line.strip()]
        return lines[-1].strip() if lines else "no output"


def _forward_output(child: Child, stream) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        child.tail.append(line)
        print(f"[{child.name}] {line}", file=sys.stderr, flush=True)
    stream.close()


class LocalCluster:
    def __init__(self, cfg: EasyDict, collectors: int, host: str, port: int, shared_dir: Optional[str],
                 config_path: Optional[str] = None, overrides: Optional[List[str]] = None):
        if collectors < 1:
            from ..errors import ConfigError

            raise ConfigError(f"--collectors must be >= 1, got {collectors}")
        self.cfg = cfg
        self.n_collectors = collectors
        self.config_path, self.overrides = config_path, list(overrides or [])
        self.token = os.environ.get(TOKEN_ENV) or new_token()
        os.environ[TOKEN_ENV] = self.token
        self.storage = SharedStorage(shared_root(cfg, shared_dir))
        removed = self.storage.reset()
        if removed:
            logger.info("launcher: removed %d file(s) of an earlier run from %s", removed, self.storage.root)
        self.coordinator = Coordinator(cfg, self.storage, self.token)
        from coordinator_app import serve_coordinator

        self.server = serve_coordinator(self.coordinator, host, port)
        self.children: List[Child] = []
        self.interrupted: Optional[str] = None
        self._reported_dead: set = set()
        self._stop = threading.Event()

    @property
    def url(self) -> str:
        return self.server.url

    def _pin_cpus(self) -> bool:
        """Once training runs: the learner gets the last CPU to itself, everyone else shares the others.

        Done after start-up, not at spawn: the processes import torch in parallel on every CPU first."""
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        if len(cpus) < 2:
            return True
        learner, others = {cpus[-1]}, set(cpus[:-1])
        pin_process(os.getpid(), others)
        for child in self.children:
            pin_process(child.proc.pid, learner if child.role == "learner" else others)
        logger.info("launcher: learner pinned to CPU %d, coordinator and collectors to %s", cpus[-1], sorted(others))
        return True

    def _spawn(self, role: str, name: str) -> Child:
        cmd = [sys.executable, "-m", "parallel_rl", role, "--coordinator", self.url,
               "--shared-dir", self.storage.root, "--host", "127.0.0.1", "--port", "0"]
        if self.config_path:
            cmd += ["-c", self.config_path]
        for text in self.overrides:
            cmd += ["--set", text]
        env = dict(os.environ, **{PARENT_ENV: str(os.getpid()), TOKEN_ENV: self.token})
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env)
        child = Child(name, role, proc)
        child.reader = threading.Thread(target=_forward_output, args=(child, proc.stdout), daemon=True,
                                        name=f"{name}-output")
        child.reader.start()
        return child

    def request_stop(self, reason: str) -> None:
        """From a signal handler: leave the wait loop and shut down."""
        self.interrupted = reason
        self._stop.set()
        self.coordinator.done_event.set()

    def _check_children(self) -> Optional[str]:
        dead = [c for c in self.children if c.proc.poll() is not None]
        for child in dead:
            if child.role == "learner":
                return f"{child.name} exited with code {child.proc.returncode}: {child.last_words()}"
            if child.name not in self._reported_dead:
                self._reported_dead.add(child.name)
                logger.warning("launcher: %s exited with code %s (%s); training goes on with the others",
                               child.name, child.proc.returncode, child.last_words())
                self.coordinator.process_exited(child.proc.pid, f"process exited with code {child.proc.returncode}")
        collectors = [c for c in self.children if c.role == "collector"]
        if collectors and all(c.proc.poll() is not None for c in collectors):
            c = collectors[-1]
            return f"every collector exited (last: {c.name} code {c.proc.returncode}: {c.last_words()})"
        return None

    def run(self) -> int:
        """Start everything, wait for the end, shut down; returns the exit code."""
        self.server.start()
        self.coordinator.start()
        print(f"REST API: {self.url}/api/v1", flush=True)
        self.children.append(self._spawn("learner", "learner-1"))
        for i in range(self.n_collectors):
            self.children.append(self._spawn("collector", f"collector-{i + 1}"))
        reporter = ProgressReporter(self.cfg.env.stop_value, name="cluster")
        failure: Optional[str] = None
        pinned = not self.cfg.parallel.learner.dedicated_cpu
        try:
            while not self._stop.is_set() and not self.coordinator.done_event.is_set():
                self.coordinator.done_event.wait(0.5)
                if not pinned and self.coordinator.train_iter > 0:
                    pinned = self._pin_cpus()
                failure = self._check_children()
                if failure:
                    self.coordinator.finish(CoordinatorState.FAILED, failure)
                    break
                c = self.coordinator
                counts = c.workers.counts()
                active = sum(counts[k]["idle"] + counts[k]["busy"] for k in counts)
                reporter.update(c.env_steps, c.train_iter, c.last_eval_return, c.best_eval_return,
                                workers=str(active))
        finally:
            c = self.coordinator
            reporter.update(c.env_steps, c.train_iter, c.last_eval_return, c.best_eval_return, force=True)
            reporter.close()
            self.shutdown()
        return self._exit_code()

    def _exit_code(self) -> int:
        c = self.coordinator
        summary = (f"env_steps={c.env_steps} train_iter={c.train_iter} policy_version={c.policy_version} "
                   f"best_eval_return={c.summary()['best_eval_return']} time={c.uptime:.2f}s")
        if self.interrupted:
            print(f"interrupted ({self.interrupted}); {summary}", flush=True)
            return 130
        code = outcome_exit_code(c.state, self.cfg.env.stop_value)
        if c.state in (CoordinatorState.SOLVED, CoordinatorState.STOPPED):
            print(f"{c.state}: {c.reason}; {summary}", flush=True)
            if code:
                print(f"parallel-rl run: {c.reason} before reaching the stop value", file=sys.stderr)
        else:
            print(f"parallel-rl run: failed: {c.reason}", file=sys.stderr)
        return code

    def shutdown(self, grace: float = 5.0) -> None:
        """Tell workers to stop, then terminate and kill whatever is left; close the server."""
        self.coordinator.close(notify_workers=True)
        deadline = time.monotonic() + grace
        for child in self.children:
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
        self.server.close(timeout=2.0)


def run_local_cluster(cfg: EasyDict, collectors: int = 2, host: str = "127.0.0.1", port: int = 0,
                      shared_dir: Optional[str] = None, config_path: Optional[str] = None,
                      overrides: Optional[List[str]] = None) -> int:
    cluster = LocalCluster(cfg, collectors, host, port, shared_dir, config_path, overrides)

    def on_signal(signum, frame):
        cluster.request_stop(signal.Signals(signum).name)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return cluster.run()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
