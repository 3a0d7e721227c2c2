"""Running one trial: the :class:`Runner` interface sweeps and searches use, and :class:`ProcessRunner`, which
runs each trial as its own ``python -m parallel_rl serial|run`` process on this machine.

The interface is the seam where the service's pool comes in (issue #44, items 1-2): a pool-backed runner submits
the trial as a run of the service (``POST /api/v1/runs``), follows its curve (``GET /api/v1/runs/<id>``) and
stops it (``DELETE``); sweep and tune do not change. A runner's ``run`` blocks until the trial's training ends,
calling ``on_eval`` with each new evaluation; ``on_eval`` returning True stops the training (pruning). ``stop_all``
(from another thread: Ctrl-C) stops every training in flight; each saves and exits, and its ``run`` returns.

:class:`ProcessRunner`: a trial's experiment directory is ``OUT/trial_NNN`` (a cluster trial's shared store is
``OUT/trial_NNN/shared``), its output goes to ``OUT/trial_NNN.log``. The evaluation curve of a serial trial is its
progress line at each evaluation; of a cluster trial, the eval history of the coordinator's saved state on the
shared store, read through ``parallel-rl plot``'s reader (the storage's validating loader) each time the run
prints a progress line that shows an evaluation.
"""

from __future__ import annotations

import logging
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Protocol, Sequence

from ..errors import ConfigError
from ..runtime import PARENT_ENV
from .trials import Trial

logger = logging.getLogger(__name__)

# the serial pipeline's line at each evaluation (off a terminal), and the cluster launcher's progress line
PROGRESS_LINE = re.compile(
    r"^\[(serial|cluster)\s+[\d.]+s\] eval_return=(n/a|-?[\d.]+(?:e[-+]?\d+)?|-?inf)\S*"
    r".*? env_steps=(\d+) updates=(\d+)"
)
ENV_STEPS = re.compile(r"\benv_steps=(\d+)")  # progress lines and the final summary: the last one is the count
ERROR_LINE = re.compile(r"^parallel-rl (serial|run)(: error)?: ")
# the last line of a traceback (an error the training did not turn into its one-line error): the reason too
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit): \S")
STOP_SECONDS = 60.0  # a training stopped by SIGINT saves and exits within this, else SIGTERM, then SIGKILL


@dataclass(frozen=True)
class EvalPoint:
    env_steps: int
    eval_return: float


@dataclass
class TrialResult:
    """How a trial ended: ``status`` is done (trained to its stop value or budget), failed, pruned or
    interrupted; ``note`` says why in one line."""

    trial: Trial
    status: str
    exit_code: Optional[int] = None
    eval_return: float = math.nan
    env_steps: Optional[int] = None
    wall: float = 0.0
    note: str = ""
    exp_dir: str = ""
    curve: List[EvalPoint] = field(default_factory=list)

    def row(self) -> Dict[str, object]:
        """The trial's row in a sweep's table and CSV."""
        return {
            "trial": self.trial.number,
            "settings": self.trial.label(),
            "seed": "config" if self.trial.seed is None else self.trial.seed,
            "status": self.status,
            "exit": self.exit_code,
            "eval_return": self.eval_return,
            "env_steps": self.env_steps,
            "wall_s": round(self.wall, 1),
            "note": self.note,
            "dir": self.exp_dir,
        }


OnEval = Callable[[EvalPoint], bool]


class Runner(Protocol):
    """What sweep and tune need of whatever trains their trials (this machine's processes; later the pool)."""

    def run(self, trial: Trial, on_eval: Optional[OnEval] = None) -> TrialResult: ...

    def stop_all(self) -> None: ...


class ProcessRunner:
    """Each trial a ``python -m parallel_rl serial`` (serial configs) or ``run`` (cluster configs) process."""

    def __init__(self, config_path: str, overrides: Sequence[str], out_dir: str, cluster: bool):
        self.config_path = os.path.abspath(config_path)
        self.overrides = list(overrides)
        self.out_dir = os.path.abspath(out_dir)
        self.cluster = cluster
        self._lock = threading.Lock()
        self._running: Dict[int, subprocess.Popen] = {}
        self._stopping = False

    def command(self, trial: Trial, exp_dir: str) -> List[str]:
        cmd = [sys.executable, "-m", "parallel_rl", "run" if self.cluster else "serial", "-c", self.config_path]
        for setting in [*self.overrides, *trial.overrides(), f"exp_name={exp_dir}"]:
            cmd += ["--set", setting]
        if self.cluster:  # every trial its own store, whatever parallel.shared_dir says
            cmd += ["--shared-dir", os.path.join(exp_dir, "shared")]
        return cmd

    def run(self, trial: Trial, on_eval: Optional[OnEval] = None) -> TrialResult:
        exp_dir = os.path.join(self.out_dir, trial.dir_name())
        result = TrialResult(trial, "interrupted", exp_dir=exp_dir, note="not started: the sweep was stopped")
        start = time.perf_counter()
        with self._lock:
            if self._stopping:
                return result
            os.makedirs(self.out_dir, exist_ok=True)
            log_path = f"{exp_dir}.log"
            log = open(log_path, "w", buffering=1)  # line by line: the log is followed as it grows
            # a session of its own: Ctrl-C at a terminal reaches the sweep, which stops each training itself; and
            # the training gets SIGINT if the sweep dies (SIGKILL too: die_with_parent; the kernel sends it when
            # this thread ends, and this thread waits for the training)
            proc = subprocess.Popen(
                self.command(trial, exp_dir),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
                start_new_session=True,
                env={**os.environ, PARENT_ENV: str(os.getpid())},
            )
            self._running[trial.number] = proc
        logger.info("lab: trial %d started (pid %d): %s; log %s", trial.number, proc.pid, trial.label(), log_path)
        pruned_at: Optional[int] = None
        last_error = ""
        try:
            with log:
                for line in proc.stdout:
                    log.write(line)
                    match = PROGRESS_LINE.match(line)
                    if ERROR_LINE.match(line) or EXCEPTION_LINE.match(line):
                        last_error = line.strip()
                    steps = ENV_STEPS.findall(line)
                    if steps:
                        result.env_steps = int(steps[-1])
                    if match:
                        if match.group(2) == "n/a":
                            continue
                        new = self._new_points(result, match, exp_dir)
                        result.curve.extend(new)
                        if pruned_at is None and on_eval and not self._stopping and any([on_eval(p) for p in new]):
                            pruned_at = result.curve[-1].env_steps
                            log.write(f"lab: pruned at env step {pruned_at}: stopping this training\n")
                            self._interrupt(proc)
                proc.wait()
                proc.stdout.close()
        finally:
            if proc.poll() is None:  # the reader failed: the training must not outlive its trial
                proc.kill()
                proc.wait()
            with self._lock:
                self._running.pop(trial.number, None)
        # the run's own record once it ended (the coordinator's last state; serial: its TensorBoard scalars, in
        # full precision where the progress line rounds to 0.1)
        result.curve = self._history(exp_dir) or result.curve
        result.wall = time.perf_counter() - start
        result.exit_code = proc.returncode
        if result.curve:
            result.eval_return = result.curve[-1].eval_return
        if pruned_at is not None:
            result.status, result.note = "pruned", f"pruned at env step {pruned_at}"
        elif self._stopping:
            result.status, result.note = "interrupted", f"stopped by an interruption (Ctrl-C, SIGTERM); log {log_path}"
        elif proc.returncode in (0, 3):  # 3: the budget ran out before the stop value, a finished training
            result.status, result.note = "done", ""
        else:
            result.status = "failed"
            result.note = last_error or f"exit {proc.returncode}; see {log_path}"
        return result

    def _new_points(self, result: TrialResult, match, exp_dir: str) -> List[EvalPoint]:
        """The evaluations not in ``result.curve`` yet: from a serial progress line, or from the cluster's
        coordinator state."""
        if not self.cluster:
            point = EvalPoint(int(match.group(3)), float(match.group(2)))
            seen = result.curve[-1].env_steps if result.curve else -1
            return [point] if point.env_steps > seen else []
        seen = result.curve[-1].env_steps if result.curve else -1
        return [point for point in self._history(exp_dir) if point.env_steps > seen]

    @staticmethod
    def _history(exp_dir: str) -> List[EvalPoint]:
        """The run's evaluations as ``parallel-rl plot`` reads them (a cluster run's coordinator state through the
        storage's validating loader, a serial run's TensorBoard scalars); none yet: []."""
        from ..after.plot import run_history

        try:
            points = run_history(exp_dir)
        except ConfigError as exc:  # no state saved yet, or a damaged one: no new points now
            logger.debug("lab: no curve in %s yet: %s", exp_dir, exc)
            return []
        return [EvalPoint(int(p["env_steps"]), float(p["return"])) for p in points]

    def _interrupt(self, proc: subprocess.Popen) -> None:
        """Ctrl-C for one training: it saves and exits (its reader drains its output meanwhile); one still running
        STOP_SECONDS later is terminated, then killed."""

        def escalate() -> None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if proc.poll() is not None:
                    return
                logger.warning(
                    "lab: training pid %d still running %.0fs after SIGINT: %s", proc.pid, STOP_SECONDS, sig.name
                )
                proc.send_signal(sig)
                try:
                    proc.wait(10.0)
                except subprocess.TimeoutExpired:
                    continue

        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            timer = threading.Timer(STOP_SECONDS, escalate)
            timer.daemon = True
            timer.start()

    def stop_all(self) -> None:
        """Stop every training in flight (each saves and exits) and start no more; idempotent."""
        with self._lock:
            first = not self._stopping
            self._stopping = True
            running = list(self._running.values())
        if first:
            for proc in running:
                self._interrupt(proc)
