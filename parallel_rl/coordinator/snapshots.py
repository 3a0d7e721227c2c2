"""Snapshots of the coordinator on the shared store: what a restarted coordinator needs to go on.

Every ``snapshot_interval`` s (and when the coordinator closes) :meth:`Snapshots.save_state` writes
:meth:`Snapshots.state_dict`: tasks, workers (lease digests, never tokens), counters, histories, the
commander's state and the replay index (arrays, copied under the coordinator's lock and written outside
it). :meth:`Snapshots.resume` loads the newest that loads (a damaged one falls back to the one before).
Saved workers that were active are re-adopted when they heartbeat again, lost when they do not; the tasks
the snapshot has running wait for their worker's first heartbeat to be confirmed (:mod:`.membership`).

A snapshot is of one coordinator, read and restored in place: this part is given the parts that save and
restore their own state (tasks, workers, replay index, commander, best policy, membership), the store's
coordinator snapshots, and the run itself (:class:`SavedRun`: the coordinator's counters, outcome, histories and
clock); it owns only the saving (sequence, lock, thread, times).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Protocol

from ..errors import StorageError
from ..storage.states import CoordinatorStates
from .best import BestPolicy
from .commander_api import Commander
from .membership import Membership
from .replay import ReplayIndex
from .tasks import TaskState, TaskTable
from .workers import WorkerRegistry

logger = logging.getLogger(__name__)

SOLVED = "solved"  # CoordinatorState.SOLVED (its module imports this one)


def json_number(x: Optional[float]) -> Optional[float]:
    """``x`` as JSON can hold it: NaN (no evaluation yet) as None."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


class SavedRun(Protocol):
    """What a snapshot saves and restores of the run itself: the coordinator's counters, outcome, histories and
    clock (read and written under its lock), and the two checks a resume runs again."""

    state: str
    reason: str
    env_steps: int
    episodes: int
    train_iter: int
    policy_version: int
    last_eval_return: float
    best_eval_return: float
    train_returns: Deque[float]
    learn_info: Dict[str, Any]
    eval_history: List[Dict[str, Any]]
    throughput_history: List[Dict[str, Any]]
    started_at: float  # wall clock
    uptime_origin: float  # the monotonic time uptime counts from

    @property
    def uptime(self) -> float: ...

    def finish(self, state: str, reason: str) -> None: ...

    def check_budgets(self) -> None: ...


class Snapshots:
    def __init__(
        self,
        run: SavedRun,
        *,
        lock: threading.RLock,
        tasks: TaskTable,
        workers: WorkerRegistry,
        replay: ReplayIndex,
        commander: Commander,
        best: BestPolicy,
        membership: Membership,
        states: CoordinatorStates,
        exp_name: str,
        stop_value: Optional[float],
        interval: float,
    ):
        """``states``: the store's coordinator snapshots; ``stop_value``: ``run.stop_value`` (None: none);
        ``interval``: ``parallel.coordinator.snapshot_interval``."""
        self._run, self._lock = run, lock
        self._tasks, self._workers, self._replay = tasks, workers, replay
        self._commander, self._best, self._membership = commander, best, membership
        self._states, self._exp_name, self._stop_value, self._interval = states, exp_name, stop_value, interval
        self._save_lock = threading.Lock()
        self._seq = 0
        self._thread: Optional[threading.Thread] = None
        self._closing = threading.Event()
        self.saved_at: Optional[float] = None
        self.resumed_from: Optional[int] = None

    def state_dict(self) -> Dict[str, Any]:
        """Everything a restarted coordinator needs, as JSON values; the replay index (numpy arrays) under
        ``replay``."""
        c = self._run
        with self._lock:
            return {
                "exp_name": self._exp_name,
                "saved_at": time.time(),
                # how the run ended (running while it trains): a coordinator started on this store again does not
                # train a finished run again (Snapshots.end_if_finished)
                "outcome": {"state": c.state, "reason": c.reason},
                "tasks": self._tasks.state_dict(),
                "tasks_forgotten": self._tasks.forgotten,
                "workers": self._workers.state_dict(),
                "counters": {
                    "env_steps": c.env_steps,
                    "episodes": c.episodes,
                    "train_iter": c.train_iter,
                    "policy_version": c.policy_version,
                    "last_eval_return": json_number(c.last_eval_return),
                    "best_eval_return": json_number(c.best_eval_return),
                    "last_eval_version": self._commander.last_eval_version,
                    "best_policy": self._best.state_dict(),
                    "uptime": c.uptime,
                    "started_at": c.started_at,
                    "train_returns": list(c.train_returns),
                },
                "learn_info": dict(c.learn_info),
                "eval_history": list(c.eval_history),
                "throughput_history": list(c.throughput_history),
                "commander": self._commander.state_dict(),
                "replay": self._replay.state_dict(),
            }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; saved workers that were active get a fresh lease (re-adopted when they
        heartbeat again, lost when they do not)."""
        c = self._run
        with self._lock:
            self._tasks.load_state_dict(state["tasks"])
            self._tasks.forgotten = int(state.get("tasks_forgotten", 0))
            if "workers" in state:
                self._workers.load_state_dict(state["workers"], self._membership.client)
            counters = state["counters"]
            c.env_steps, c.episodes = int(counters["env_steps"]), int(counters["episodes"])
            c.train_iter, c.policy_version = int(counters["train_iter"]), int(counters["policy_version"])
            c.best_eval_return = _float(counters["best_eval_return"])
            c.last_eval_return = _float(counters.get("last_eval_return"))
            c.train_returns.clear()
            c.train_returns.extend(float(r) for r in counters.get("train_returns", []))
            self._commander.last_eval_version = counters.get("last_eval_version")
            self._best.load_state_dict(counters.get("best_policy"))  # a snapshot before bests were kept: none
            if "uptime" in counters:  # the clock goes on from where the saved run stopped
                c.uptime_origin = time.monotonic() - float(counters["uptime"])
                c.started_at = float(counters["started_at"])
            c.learn_info = dict(state.get("learn_info") or {})
            c.eval_history = list(state.get("eval_history", []))
            c.throughput_history = list(state.get("throughput_history", []))
            self._replay.load_state_dict(state["replay"])
            self._commander.load_state_dict(state.get("commander") or {})
            unconfirmed: Dict[str, list] = {}
            for task in self._tasks.list():
                if task.state == TaskState.RUNNING and task.worker_id:
                    unconfirmed.setdefault(task.worker_id, []).append(task.task_id)
            self._membership.unconfirmed = unconfirmed

    def save_state(self) -> Optional[str]:
        """Write a snapshot to the shared directory (the arrays are copied under the lock, written outside it);
        returns its path, None when the write failed (logged; the previous snapshot stays)."""
        with self._save_lock:
            state = self.state_dict()
            arrays = state.pop("replay")
            self._seq += 1
            try:
                path = self._states.save(self._seq, state, arrays)
            except (OSError, StorageError, ValueError) as exc:
                logger.error("coordinator: saving state %d failed (the previous snapshot stays): %s", self._seq, exc)
                return None
            self.saved_at = time.time()
            return path

    def resume(self) -> bool:
        """Load the newest saved state from the shared directory; False when there is none.

        A damaged newest snapshot falls back to the one before; StorageError when none loads."""
        c = self._run
        saved = self._states.latest()
        if saved is None:
            return False
        meta, arrays = saved
        try:
            self.load_state_dict({**meta, "replay": arrays})
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
            # what the store's loader (storage.states.check_meta) leaves to the restoring parts: a section's insides
            why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            raise StorageError(
                f"{self._states.paths(meta['seq'])[0]}: cannot be restored with this config "
                f"({why}); resume with the config that wrote it, or start over with --fresh"
            ) from exc
        self._seq = int(meta["seq"])
        self.resumed_from = int(meta["seq"])
        self.end_if_finished(meta.get("outcome") or {})
        logger.info(
            "coordinator: resumed state %d from %s: env_steps=%d train_iter=%d policy_version=%d "
            "buffer=%d tasks=%d workers=%d",
            self._seq,
            self._states.directory,
            c.env_steps,
            c.train_iter,
            c.policy_version,
            self._replay.count(),
            len(self._tasks.list()),
            len(self._workers.list()),
        )
        return True

    def end_if_finished(self, saved: Dict[str, Any]) -> None:
        """On a resume: a run that had ended (``saved``, its snapshot's outcome) ends again at once, as it did,
        instead of training on: a coordinator recreated on the store of a solved run (compose's ``up`` after it)
        reports it. Where the config it resumes with moves the goal (a stop value above the best evaluation, a
        budget raised) it trains on; a failed run is tried again (a restart is what a failure asks for)."""
        c, stop_value = self._run, self._stop_value
        if (
            saved.get("state") == SOLVED and stop_value is not None and c.best_eval_return >= stop_value
        ):  # NaN (no evaluation) compares False
            c.finish(SOLVED, str(saved.get("reason") or "solved"))
        c.check_budgets()  # the budgets are counters the snapshot restored

    # ---- the snapshot thread -------------------------------------------------------------------
    def start(self) -> None:
        """Save every ``parallel.coordinator.snapshot_interval`` s until :meth:`stop`."""
        self._thread = threading.Thread(target=self._loop, name="coordinator-snapshot", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, then save the final state (a resume starts exactly here); nothing when never started."""
        self._closing.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self.save_state()

    def _loop(self) -> None:
        while not self._closing.wait(self._interval):
            self.save_state()


def _float(x: Any) -> float:
    return math.nan if x is None else float(x)
