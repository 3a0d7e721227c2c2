""":class:`PoolRunner`: the :class:`~.runner.Runner` whose trials are runs of a service (``parallel-rl serve``) on
its pool of workers. A trial is submitted (``POST /api/v1/runs`` with the config, the sweep's overrides and the
trial's settings), followed (``GET /api/v1/runs/<id>``: its state and evaluation curve, looked at every
:data:`FOLLOW_EVERY` seconds) and stopped (``DELETE``) when it is pruned or the sweep is interrupted. The pool
decides when a trial starts and how many collectors it gets; a trial queued there waits in ``run``.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from typing import Dict, List, Optional, Sequence

from ..errors import ParallelRLError, RemoteError
from .runner import EvalPoint, OnEval, TrialResult
from .trials import Trial

logger = logging.getLogger(__name__)
FOLLOW_EVERY = 0.5  # seconds between two looks at a trial's run (its curve, whether it ended)
ENDED = ("solved", "stopped", "failed")


class PoolRunner:
    def __init__(self, service_url: str, token: Optional[str], config_path: str, overrides: Sequence[str]):
        from ..transport import HttpClient

        self.client = HttpClient(service_url, token, timeout=30.0, max_retries=2)
        self.config_path = os.path.abspath(config_path)
        self.overrides = list(overrides)
        self._lock = threading.Lock()
        self._running: Dict[int, str] = {}  # trial number -> run id
        self._stopping = threading.Event()

    def run(self, trial: Trial, on_eval: Optional[OnEval] = None) -> TrialResult:
        result = TrialResult(trial, "interrupted", note="not started: the sweep was stopped")
        start = time.perf_counter()
        body = {
            "config": self.config_path,
            "overrides": [*self.overrides, *trial.overrides()],
            "name": trial.dir_name(),
        }
        with self._lock:
            if self._stopping.is_set():
                return result
            try:
                run_id = self.client.post("/api/v1/runs", body)["id"]
            except ParallelRLError as exc:  # the config does not compile: this trial fails, the others go on
                result.status, result.exit_code = "failed", 2
                result.note = exc.message if isinstance(exc, RemoteError) else str(exc)
                return result
            self._running[trial.number] = run_id
        logger.info("lab: trial %d is %s on the pool: %s", trial.number, run_id, trial.label())
        pruned_at: Optional[int] = None
        try:
            while True:
                try:
                    run = self.client.get(f"/api/v1/runs/{run_id}")
                except ParallelRLError as exc:  # the service is gone: this trial cannot be followed any more
                    result.status, result.note = "failed", f"{run_id}: lost the service: {exc}"
                    result.wall = time.perf_counter() - start
                    return result
                new = _points(run["curve"], result.curve)
                result.curve.extend(new)
                if new and pruned_at is None and on_eval and not self._stopping.is_set():
                    if any([on_eval(p) for p in new]):
                        pruned_at = new[-1].env_steps
                        self.client.delete(f"/api/v1/runs/{run_id}")
                if run["state"] in ENDED:
                    break
                self._stopping.wait(FOLLOW_EVERY)  # a look every FOLLOW_EVERY s; an interruption wakes it at once
                if self._stopping.is_set() and run["state"] in ("queued", "running"):
                    self.client.delete(f"/api/v1/runs/{run_id}")
        finally:
            with self._lock:
                self._running.pop(trial.number, None)
        result.wall = time.perf_counter() - start
        result.exp_dir = run["dir"]
        result.env_steps = run["env_steps"]
        if result.curve:
            result.eval_return = result.curve[-1].eval_return
        # as `parallel-rl run` exits: a budget is the goal (0) of a run without a stop value, else 3
        budget = 0 if run["summary"].get("stop_value") is None else 3
        result.exit_code = {"solved": 0, "stopped": budget, "failed": 1}[run["state"]]
        if pruned_at is not None:
            result.status, result.note = "pruned", f"pruned at env step {pruned_at}"
        elif self._stopping.is_set() and run["reason"].startswith("stopped by DELETE"):
            result.status, result.note = "interrupted", f"stopped by an interruption (Ctrl-C, SIGTERM); {run_id}"
        elif run["state"] == "failed":
            result.status, result.note = "failed", f"{run_id}: {run['reason']}"
        else:
            result.status, result.note = "done", ""
        return result

    def stop_all(self) -> None:
        """Stop every trial's run (each saves; its data stays on the service) and submit no more; idempotent."""
        self._stopping.set()


def _points(curve: List[dict], seen: List[EvalPoint]) -> List[EvalPoint]:
    """The evaluations of a run's curve (``GET /api/v1/runs/<id>``) after those in ``seen``."""
    from ..after.plot import eval_env_steps

    last = seen[-1].env_steps if seen else -1
    points = []
    for entry in curve:
        if not isinstance(entry, dict) or "env_steps" not in entry:
            continue
        steps, value = eval_env_steps(entry), entry.get("eval_return")
        if isinstance(steps, int) and isinstance(value, (int, float)) and math.isfinite(value) and steps > last:
            points.append(EvalPoint(steps, float(value)))
            last = steps
    return points
