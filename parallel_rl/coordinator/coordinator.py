"""The coordinator (master): the run's lifecycle, task assignment, sampling for learners, the summary.

Its parts own their state: :mod:`.membership` (workers joining, heartbeating, leaving), :mod:`.flow_control`
(allowance, on-policy segments, long-polls, admission), :mod:`.messages` (the metadata messages' check/apply
pairs), :mod:`.snapshots` (save and resume); the commander
(:mod:`.commander_api`) decides the tasks through a handle. Slaves talk to it through ``coordinator_app``
(HTTP); every method here is plain Python so tests can drive it directly. Locking: ``self._lock`` guards
registry/task/counter updates (the parts share it); HTTP calls to slaves are made outside it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional

from easydict import EasyDict

from ..errors import ConflictError, ParallelRLError, ProtocolViolation, RemoteError
from ..protocol import MAX_COUNTER
from ..runtime import budget_used_up
from ..storage import SharedStorage, StorageHealth
from .best import BestPolicy
from .bottleneck import bottleneck
from .commander import create_parallel_commander
from .commander_api import Commander, CommanderHandle
from .flow_control import FlowControl
from .membership import Membership
from .messages import MessageTable
from .replay import ReplayIndex
from .snapshots import Snapshots, json_number
from .tasks import Task, TaskKind, TaskState, TaskTable
from .workers import Worker, WorkerRegistry, WorkerState

logger = logging.getLogger(__name__)

# training episodes the train_return mean is taken over (SB3's ep_rew_mean window)
TRAIN_RETURN_WINDOW = 100

# a temp file on the shared disk untouched this long was left by a writer killed mid-write
TEMP_FILE_MAX_AGE = 600.0
TEMP_SWEEP_INTERVAL = 60.0

# a worker that refuses this many tasks in a row is marked lost
MAX_REFUSALS = 3


def mean_return(returns) -> float:
    """The mean of ``returns`` (NaN when there is none)."""
    returns = list(returns)
    return math.fsum(returns) / len(returns) if returns else math.nan


class CoordinatorState:
    RUNNING = "running"
    SOLVED = "solved"
    STOPPED = "stopped"  # a budget ran out
    FAILED = "failed"
    CLOSED = "closed"


class Coordinator:
    def __init__(
        self,
        cfg: EasyDict,
        storage: Optional[SharedStorage] = None,
        token: Optional[str] = None,
        commander: Optional[Commander] = None,
    ):
        """``storage``: the shared store it indexes (None: the run's, at ``parallel.shared_dir`` or
        ``<exp_name>/shared``, as ``parallel-rl coordinator`` opens it)."""
        from ..runtime import run_storage

        self.cfg = cfg
        self.storage = storage if storage is not None else run_storage(cfg)
        self.storage.health.name = "coordinator"  # its own snapshots; the workers report theirs
        self.token = token
        self.tasks = TaskTable()
        self.workers = WorkerRegistry(
            retention=cfg.parallel.coordinator.worker_retention, max_ended=cfg.parallel.coordinator.max_ended_workers
        )
        self.replay = ReplayIndex(
            cfg.policy.other.replay_buffer, storage, grace_seconds=cfg.parallel.coordinator.chunk_grace_seconds
        )
        self._lock = threading.RLock()
        self.commander: Commander = commander or create_parallel_commander(cfg)
        self.commander.attach(
            CommanderHandle(
                storage=storage,
                workers=self.workers,
                tasks=self.tasks,
                assign=self.assign,
                finish=self.finish,
                policy_version=lambda: self.policy_version,
                over=lambda: self.system_shutdown_flag,
                spare=lambda worker: self.flow.metering.spare(worker),
            )
        )
        self.membership = Membership(
            cfg,
            storage,
            token,
            self.workers,
            self.tasks,
            self._lock,
            end_task=self._end_task,
            kick=self.kick,
            over=lambda: self.reason if self.system_shutdown_flag else None,
        )
        self.flow = FlowControl(
            cfg,
            self.workers,
            self._lock,
            progress=self,
            epsilon=lambda env_steps: self.commander.epsilon(env_steps),
            replay=self.replay,
        )
        self.best = BestPolicy(storage, int(cfg.parallel.learner.keep_checkpoints))
        self.snapshots = Snapshots(
            self,
            lock=self._lock,
            tasks=self.tasks,
            workers=self.workers,
            replay=self.replay,
            commander=self.commander,
            best=self.best,
            membership=self.membership,
            states=self.storage.states,
            exp_name=cfg.exp_name,
            stop_value=cfg.run.stop_value,
            interval=float(cfg.parallel.coordinator.snapshot_interval),
        )
        self._wake = threading.Event()
        self._closing = threading.Event()
        # notified on every kick (task ends, workers joining and leaving): wind_down waits on it
        self._changed = threading.Condition()
        # the store as the message checks see it: unhealthy from a fault while checking a message (the message
        # is answered `unavailable` and sent again) until a chunk check reads the store again; the snapshots'
        # writes (storage.health) may work meanwhile, and must not hide that reads fail
        self.check_health = StorageHealth(None)  # its faults are logged by storage.health (_store_op), once
        self.messages = MessageTable(
            counters=self,
            lock=self._lock,
            tasks=self.tasks,
            replay=self.replay,
            storage=self.storage,
            check_health=self.check_health,
            membership=self.membership,
            flow=self.flow,
            commander=self.commander,
            worker_cfg=cfg.parallel.worker,
            max_repeated_failures=cfg.parallel.commander.max_repeated_failures,
            end_task=self._end_task,
            finish=self.finish,
            kick=self.kick,
        )
        self.done_event = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.state = CoordinatorState.RUNNING
        self.reason = ""
        self.started_at = time.time()
        self.uptime_origin = time.monotonic()  # what uptime counts from (a resume moves it back)
        self.env_steps = 0
        self.episodes = 0
        # the returns of the newest TRAIN_RETURN_WINDOW training episodes (the collectors' chunks report them): the
        # training-episode return DQN papers plot (Young & Tian 2019) and SB3 logs as rollout/ep_rew_mean
        self.train_returns: Deque[float] = deque(maxlen=TRAIN_RETURN_WINDOW)
        self.train_iter = 0
        self.policy_version = -1
        self.policy_published_at: Dict[int, float] = {}
        # the env steps collected when each version was announced: what the evaluated policy was trained on (an
        # evaluation's result comes back later, after more env steps, the more the busier the box)
        self.policy_env_steps: Dict[int, int] = {}
        # seconds from a policy's announcement to the first chunk stamped with it
        self.policy_propagation: List[float] = []
        self.learn_info: Dict[str, Any] = {}
        self.last_eval_return = math.nan
        self.best_eval_return = math.nan
        self.eval_history: List[Dict[str, Any]] = []
        self.throughput_history: List[Dict[str, Any]] = []

    def state_dict(self) -> Dict[str, Any]:
        """What a restarted coordinator needs (:meth:`Snapshots.state_dict`; DI-engine's name)."""
        return self.snapshots.state_dict()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.snapshots.load_state_dict(state_dict)

    def info(self, s: str) -> None:
        """Log ``s`` as the coordinator (DI-engine's helper)."""
        logger.info("coordinator: %s", s)

    def error(self, s: str) -> None:
        logger.error("coordinator: %s", s)

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> "Coordinator":
        self._thread = threading.Thread(target=self._control_loop, name="coordinator-control", daemon=True)
        self._thread.start()
        self.snapshots.start()
        return self

    @property
    def system_shutdown_flag(self) -> bool:
        return self.state != CoordinatorState.RUNNING

    def kick(self) -> None:
        """Wake the commander (something changed)."""
        self._wake.set()
        with self._changed:
            self._changed.notify_all()
        if self.flow.metering.members_changed():  # on-policy: the collectors' shares of a segment too
            self.flow.notify_progress()

    def finish(self, state: str, reason: str) -> None:
        """Training is over (solved, budget, failure): stop handing out work."""
        with self._lock:
            if self.state != CoordinatorState.RUNNING:
                return
            self.state, self.reason = state, reason
        logger.info("coordinator: %s: %s", state, reason)
        self.done_event.set()
        self.replay.wake_waiters()
        self.flow.notify_progress()
        self.kick()

    def close(self, notify_workers: bool = True) -> None:
        """Stop the control loop and tell every active worker to disconnect (best effort)."""
        if self._closing.is_set():
            return
        self.finish(CoordinatorState.CLOSED, "coordinator closed")
        self._closing.set()
        self.kick()
        if self._thread is not None:
            self._thread.join(5.0)
        self.snapshots.stop()  # and saves the final state: a resume starts exactly here
        if notify_workers:
            self.membership.disconnect_all(self.reason)

    def wind_down(self, timeout: float) -> bool:
        """Stop handing out work, let every worker go, and wait up to ``timeout`` s until none is active: their
        running tasks wrap up and the final reports (last chunks, learn info, task ends) arrive while the
        server still serves. Call before closing the server; True when every worker left in time."""
        self.finish(CoordinatorState.CLOSED, "coordinator closing")
        self.membership.release_workers()
        with self._changed:
            left = self._changed.wait_for(lambda: not self.workers.list(active_only=True), timeout=timeout)
        if not left:
            logger.warning(
                "coordinator: %s still active %gs after being let go; closing without their final "
                "reports (parallel.coordinator.final_report_timeout)",
                [w.worker_id for w in self.workers.list(active_only=True)],
                timeout,
            )
        return left

    def _control_loop(self) -> None:
        ttl = float(self.cfg.parallel.coordinator.heartbeat_ttl)
        tick = max(0.05, min(0.5, ttl / 4))
        next_sweep = 0.0
        while not self._closing.is_set():
            try:
                for worker in self.membership.reap(ttl):
                    self.messages.forget_worker(worker.worker_id)
                self.check_budgets()
                self.commander.step()
                self.replay.collect_garbage()
                self._sample_throughput()
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + TEMP_SWEEP_INTERVAL
                    self._sweep_store()
            except Exception:  # the control loop must survive any single bad step
                logger.exception("coordinator: control loop step failed")
            self._wake.wait(tick)
            self._wake.clear()

    def _sweep_store(self) -> None:
        removed = self.storage.remove_stale_temp_files(TEMP_FILE_MAX_AGE)
        if removed:
            logger.info("coordinator: removed %d temp file(s) left by killed writers", removed)
        max_age = float(self.cfg.parallel.coordinator.orphan_chunk_max_age)
        orphans = self.replay.remove_orphans(max_age)
        if orphans:
            logger.info(
                "coordinator: removed %d chunk file(s) no replay index knew, written over %gs ago (by "
                "killed collectors, or announced after the last snapshot of a killed coordinator)",
                orphans,
                max_age,
            )

    def check_budgets(self) -> None:
        """Finish the run (stopped) when a budget is used up: env steps, train iterations, seconds."""
        reason = budget_used_up(self.cfg.run, self.env_steps, self.train_iter, self.uptime)
        if reason:
            self.finish(CoordinatorState.STOPPED, reason)

    def _sample_throughput(self) -> None:
        now = self.uptime
        if self.throughput_history and now - self.throughput_history[-1]["t"] < 1.0:
            return
        self.throughput_history.append({"t": round(now, 3), "env_steps": self.env_steps, "train_iter": self.train_iter})
        del self.throughput_history[:-600]

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.uptime_origin

    # ---- tasks ----------------------------------------------------------------------------
    def assign(self, task: Task, worker: Worker) -> bool:
        """Hand ``task`` to ``worker`` over HTTP. Refused (4xx): the task fails, the worker stays (lost after
        ``MAX_REFUSALS`` refusals in a row); unreachable or 5xx: the task fails and the worker is lost."""
        with self._lock:
            if not worker.assignable:
                return False
            self.tasks.start(task, worker.worker_id)
            if task.kind == TaskKind.EVALUATOR:
                worker.eval_task = task.task_id
            else:
                worker.current_task = task.task_id
                worker.state = WorkerState.BUSY
            if task.kind == TaskKind.LEARNER:
                self.flow.metering.learner_task_started()
        if task.kind == TaskKind.EVALUATOR:
            self.best.evaluating(task.spec.get("policy_version"))  # not pruned before its result is in
            if self.flow.metering.members_changed():
                self.flow.notify_progress()  # on-policy: the other collectors take over the evaluator's share
        payload = {"task_id": task.task_id, "kind": task.kind.value, "spec": task.spec}
        try:  # a retried POST is safe: slaves acknowledge a task id they have seen without running it again
            worker.client.post("/slave/v1/tasks", payload, retries=1)
        except RemoteError as exc:
            if exc.status >= 500:
                self.membership.mark_lost(worker, f"failed on task {task.task_id}: {exc}")
                return False
            # the slave is alive and answered: it refused this task. Fail the task, keep the worker,
            # unless it refuses every task (then it is of no use, and retrying would spin)
            worker.refusals += 1
            if exc.status == 409:  # busy: still ending a task it was told to stop. Not this task's fault
                self._busy_refusal(task, worker, exc)
                return False
            logger.error("coordinator: %s at %s refused %s: %s", worker.worker_id, worker.address, task.task_id, exc)
            self._end_task(task.task_id, TaskState.FAILED, error=f"{worker.worker_id} refused it: {exc}")
            if worker.refusals >= MAX_REFUSALS:
                self.membership.mark_lost(worker, f"refused {worker.refusals} tasks in a row, the last: {exc}")
            return False
        except ParallelRLError as exc:
            logger.error(
                "coordinator: %s at %s unreachable for %s: %s", worker.worker_id, worker.address, task.task_id, exc
            )
            self.membership.mark_lost(worker, f"refused task {task.task_id}: {exc}")  # unreachable
            return False
        worker.refusals = 0
        logger.debug("coordinator: %s -> %s %s", task.task_id, worker.worker_id, task.spec)
        return True

    def _busy_refusal(self, task: Task, worker: Worker, exc: RemoteError) -> None:
        """The worker is still ending an earlier task: the task goes back to pending (no attempt used up) and
        the worker backs off (0.5 s doubling) before it is asked again; lost after ``MAX_REFUSALS`` in a row.
        Failing the task instead used up a learner's attempts within milliseconds and ended the run."""
        wcfg = self.cfg.parallel.worker
        with self._lock:
            self.tasks.requeue(task)
            if worker.eval_task == task.task_id:
                worker.eval_task = None
            if worker.current_task == task.task_id:
                worker.current_task = None
                if worker.state == WorkerState.BUSY:
                    worker.state = WorkerState.IDLE
            delay = worker.back_off(wcfg.failure_backoff, wcfg.failure_max_backoff)
        logger.warning(
            "coordinator: %s at %s is busy (%s); %s waits, asking again in %.1fs",
            worker.worker_id,
            worker.address,
            exc,
            task.task_id,
            delay,
        )
        if worker.refusals >= MAX_REFUSALS:
            self.membership.mark_lost(worker, f"refused {worker.refusals} tasks in a row, the last: {exc}")
        self.kick()

    def _end_task(
        self,
        task_id: str,
        state: TaskState,
        result: Optional[dict] = None,
        error: Optional[str] = None,
        store_fault: bool = False,
    ) -> Optional[Task]:
        with self._lock:
            task = self.tasks.end(task_id, state, result=result, error=error)
            if task is None:
                return None
            worker = self.workers.get(task.worker_id) if task.worker_id else None
            if worker is not None:
                if worker.eval_task == task_id:
                    worker.eval_task = None
                if worker.current_task == task_id:
                    worker.current_task = None
                    if worker.state == WorkerState.BUSY:
                        worker.state = WorkerState.IDLE
                worker.tasks_done += 1
                leaving_done = worker.state == WorkerState.LEAVING and not worker.running_tasks
            else:
                leaving_done = False
        log = logger.info if state != TaskState.FINISHED or task.kind == TaskKind.LEARNER else logger.debug
        log("coordinator: %s %s%s", task_id, state.value, f" ({error})" if error else "")
        if state == TaskState.FAILED:
            self.commander.on_task_failed(task, store_fault=store_fault)
        if task.kind == TaskKind.EVALUATOR:
            if state == TaskState.FINISHED and result:
                self._on_eval_result(task, result)
            else:
                self.best.abandoned(task.spec.get("policy_version"))
        if state == TaskState.FINISHED:
            self.commander.on_task_finished(task)
        if leaving_done:
            self.membership.disconnect(worker, "removed")
        self.kick()
        return task

    def _on_eval_result(self, task: Task, result: dict) -> None:
        handed = task.spec.get("policy_version")
        # the version evaluated: the newest one when the one handed was pruned before the evaluator loaded it
        version = result.get("policy_version")
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= MAX_COUNTER:
            version = handed
        mean = result.get("eval_episode_return_mean")
        if mean is None:  # checked by _check_eval_result: no episode finished (NaN goes as null)
            logger.warning(
                "coordinator: eval of policy %s (%s) has no mean return (%s episode(s)); not counted",
                version,
                task.task_id,
                result.get("episodes", 0),
            )
            self.best.abandoned(handed)
            return
        mean = float(mean)
        with self._lock:
            self.last_eval_return = mean
            if math.isnan(self.best_eval_return) or mean > self.best_eval_return:
                self.best_eval_return = mean
            self.eval_history.append(
                {
                    "t": round(self.uptime, 3),
                    "policy_version": version,
                    "env_steps": self.env_steps,
                    "policy_env_steps": self.policy_env_steps.get(version),
                    "train_iter": self.train_iter,
                    "eval_return": mean,
                    "train_return": json_number(mean_return(self.train_returns)),
                }
            )
            del self.eval_history[:-10_000]
            env_steps, train_iter = self.env_steps, self.train_iter
        self.best.evaluated(version, mean, env_steps, train_iter, handed=handed)
        stop_value = self.cfg.run.stop_value  # None: no stop value, the run trains to its budget
        logger.info(
            "coordinator: eval of policy %s: mean return %.1f (%s)",
            version,
            mean,
            "no stop value" if stop_value is None else f"stop value {stop_value:g}",
        )
        # a battle evaluation says itself whether its stop rule (win rate and per-side bounds) holds
        if (
            stop_value is not None
            and result.get("episodes", 0) >= task.spec.get("n_episode", 0)
            and mean >= stop_value
            and result.get("stop", True) is not False
        ):
            self.finish(
                CoordinatorState.SOLVED,
                f"eval return {mean:.1f} >= stop value {stop_value:g} (policy version {version})",
            )

    # ---- metadata from slaves --------------------------------------------------------------
    def handle_metadata(self, worker_id: str, messages: List[Dict[str, Any]], **kw: Any) -> Dict[str, Any]:
        """Check a batch of messages from a slave, then apply the ones that passed (see MessageTable)."""
        return self.messages.handle_metadata(worker_id, messages, **kw)

    # ---- learner data ---------------------------------------------------------------------
    def sample(
        self,
        worker_id: str,
        batch_size: Optional[int],
        batches: int,
        train_iter: int,
        priorities: Optional[Dict[str, Any]] = None,
        wait: float = 1.0,
        encoding: str = "json",
        lease: Optional[str] = None,
        ahead: int = 0,
    ) -> Dict[str, Any]:
        """Batches of references for a learner, ``{"chunks", "batches"}`` (numbers as JSON lists, or packed
        with ``encoding="base64"``); waits up to ``wait`` s for enough data. ``batch_size``: rows per batch (None:
        the flow's own, :attr:`~.metering.Metering.batch_size`). ``ahead``: batches the learner holds untrained
        (its ``train_iter`` is its progress; the batches are trained later)."""
        worker = self.membership.heartbeat(worker_id, lease)
        if worker.kind != "learner":
            raise ConflictError(f"{worker_id} is a {worker.kind}; only learners sample batches")
        if not 0 <= train_iter <= MAX_COUNTER:
            raise ProtocolViolation(f"train_iter must be in [0, {MAX_COUNTER}], got {train_iter}")
        if priorities:
            try:
                self.replay.update_priorities(priorities["index"], priorities["uid"], priorities["priority"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ProtocolViolation(f"bad priorities: {exc}") from None
        with self._lock:
            worker.train_iter = max(worker.train_iter, train_iter)
            advanced = train_iter > self.train_iter
            self.train_iter = max(self.train_iter, train_iter)
        if advanced:
            self.flow.notify_progress()
        metering = self.flow.metering
        rows = metering.batch_size if batch_size is None else batch_size
        return metering.sample(self.replay, rows, batches, train_iter, wait, encoding, ahead)

    # ---- inspection ---------------------------------------------------------------------------
    def summary(self) -> Dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "workers": self.workers.counts(),
            "tasks": self.tasks.counts(),
            "tasks_forgotten": self.tasks.forgotten,
            "workers_forgotten": self.workers.forgotten,
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "train_iter": self.train_iter,
            "policy_version": self.policy_version,
            "last_eval_return": json_number(self.last_eval_return),
            "best_eval_return": json_number(self.best_eval_return),
            "train_return": json_number(mean_return(self.train_returns)),
            "stop_value": self.cfg.run.stop_value,  # null: no stop value, the run trains to its budget
            "policy_propagation_ms": self._propagation_stats(),
            "learn_info": dict(self.learn_info),
            "uptime": round(self.uptime, 3),
            "started_at": self.started_at,
            "state_saved_at": self.snapshots.saved_at,
            "resumed_from": self.snapshots.resumed_from,
            "storage": self.storage_summary(),
            "bottleneck": bottleneck(
                (w.kind, w.time_breakdown) for w in self.workers.list(active_only=True) if w.time_breakdown is not None
            ),
            "exp_name": self.cfg.exp_name,
            "env_id": self.cfg.env.env_id,
        }

    def _propagation_stats(self) -> Dict[str, Any]:
        with self._lock:
            delays = sorted(self.policy_propagation)
        if not delays:
            return {"count": 0, "p50": None, "p95": None, "max": None}
        pick = lambda q: round(1000 * delays[min(len(delays) - 1, int(q * len(delays)))], 1)  # noqa: E731
        return {"count": len(delays), "p50": pick(0.5), "p95": pick(0.95), "max": round(1000 * delays[-1], 1)}

    def storage_summary(self) -> Dict[str, Any]:
        """The shared store's health as the workers (and the coordinator's own snapshots) see it: unhealthy
        while any active worker reports it failing; ``since`` the earliest fault of those, ``error`` its."""
        failing = [("coordinator", h) for h in (self.storage.health, self.check_health) if not h.healthy][:1]
        failing += [(w.worker_id, w.storage) for w in self.workers.list(active_only=True) if not w.storage.healthy]
        first = min(failing, key=lambda f: f[1].since or 0.0, default=None)
        return {
            "healthy": not failing,
            "error": first[1].error if first else None,
            "since": first[1].since if first else None,
            "workers": [name for name, _ in failing],
        }
