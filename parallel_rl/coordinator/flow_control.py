"""Flow control: how far collectors may run ahead of the learner, and how many requests wait at once.

- **Allowance** (off-policy): collectors collect up to ``max(warmup, random_collect_size) +
  max_env_steps_per_update * train_iter`` env steps; a throttled collector's metadata request waits
  (:meth:`FlowControl.wait_for_allowance`) until the learner advanced or a newer policy is out.
- **Segments** (on-policy): each collector collects its share of ``policy.collect.n_sample`` env steps per
  policy version and round (a new learner task starts a new round), no more than the segment still misses.
- **Long-polls**: at most ``long_poll_slots`` requests wait at once (each holds a server thread); the rest
  are answered at once with ``retry_after``.
- **Admission** (:class:`Admission`): at most ``ADMITTED`` metadata requests are served at once.

The counters it meters against (env steps, train iterations, the policy version) belong to the coordinator;
:class:`Progress` says which ones it reads.
"""
from __future__ import annotations

import contextlib
import math
import threading
from typing import Any, Callable, Dict, Optional, Protocol

from easydict import EasyDict

from ..errors import UnavailableError
from .workers import Worker, WorkerRegistry

# seconds a worker waits before asking again when every long-poll slot was taken
LONG_POLL_RETRY_AFTER = 1.0
# metadata requests served at once (body read, checked, applied, answered; a long-poll's wait not counted):
# more threads at once only take turns on the GIL, each holding the coordinator's and the replay index's
# locks longer, and every other request (GET /api/v1/cluster) waited behind all of them
ADMITTED = 2
ADMISSION_TIMEOUT = 10.0


class Progress(Protocol):
    """The coordinator's counters, as flow control reads them."""

    env_steps: int
    train_iter: int
    policy_version: int

    @property
    def system_shutdown_flag(self) -> bool: ...


class FlowControl:
    def __init__(self, cfg: EasyDict, workers: WorkerRegistry, lock: threading.RLock, progress: Progress,
                 epsilon: Callable[[int], float]):
        self.cfg = cfg
        self._workers = workers
        self._lock = lock  # the coordinator's: segment counts change with the counters they are read against
        self._progress = progress
        self._epsilon = epsilon
        # the data flow the policy asks for: on-policy data is used as whole segments of recent versions
        self.on_policy = bool(cfg.policy.on_policy)
        self.random_collect_size = int(cfg.policy.get("random_collect_size", 0) or 0)  # only off-policy types have it
        # on-policy: env steps each collector sent per policy version (its share of the next segment)
        self._segment_steps: Dict[int, Dict[str, int]] = {}
        # on-policy: a new learner task starts a new round of segments (its predecessor may have taken the
        # current version's segment with it); collectors count what they sent per (version, round)
        self.segment_round = 0
        # notified when the learner advances (collectors waiting for their allowance wake up)
        self._advanced = threading.Condition()
        # long-polls each hold a server thread: at most long_poll_slots wait at once (the server has that
        # many threads beyond the ones for short calls, so heartbeats are always answered)
        self._long_polls = threading.BoundedSemaphore(int(cfg.parallel.coordinator.long_poll_slots))
        self.long_polls_refused = 0
        self.admission = Admission(ADMITTED, ADMISSION_TIMEOUT)

    def control_for(self, worker: Worker) -> Dict[str, Any]:
        """The control block every answer to ``worker`` carries."""
        p = self._progress
        allowed = None if self.on_policy else self.allowed_env_steps()
        return {
            "policy_version": p.policy_version,
            "epsilon": self._epsilon(p.env_steps),
            # off-policy warm-up: collectors act with random actions until the cluster has this many env steps
            "random_collect": p.env_steps < self.random_collect_size,
            "stop": p.system_shutdown_flag,
            "state": worker.state.value,
            "env_steps": p.env_steps,
            "allowed_env_steps": None if allowed is None else int(allowed),
            # on-policy: env steps this collector may collect in all with policy `policy_version`
            "segment_env_steps": self.segment_steps_allowed(worker) if self.on_policy else None,
            "segment_round": self.segment_round,
            # tasks this coordinator does not know (issued before a restart, after the snapshot it resumed)
            "cancel_tasks": list(worker.stale_tasks),
        }

    # ---- replay ratio -------------------------------------------------------------------------
    def allowed_env_steps(self) -> Optional[float]:
        """How far collectors may run ahead of the learner (None: no limit).

        ``max(warmup_env_steps, policy.random_collect_size) + max_env_steps_per_update * train_iter``: collectors
        that outrun the learner only steal its CPU and fill the buffer with data
        it never trains on.
        """
        ratio = float(self.cfg.parallel.commander.max_env_steps_per_update)
        if ratio <= 0:
            return None
        warmup = max(float(self.cfg.parallel.commander.warmup_env_steps), float(self.random_collect_size))
        return warmup + ratio * self._progress.train_iter

    def wait_for_allowance(self, timeout: float, policy_version: Optional[int] = None,
                           worker: Optional[Worker] = None, loaded_version: Optional[int] = None) -> bool:
        """Block a collector until it may collect ``allowance_grant`` steps again (the learner advanced), a
        policy newer than its ``policy_version`` is out (its first batch need not wait), or ``timeout``.

        Waking collectors for every few steps of allowance would cost a round trip per tiny chunk.
        On-policy: until a policy newer than ``policy_version`` is out, or the collector acts with the
        current one (``loaded_version``) and its share of the segment is not collected yet."""
        grant = int(self.cfg.parallel.commander.allowance_grant)
        p = self._progress

        def may_collect() -> bool:
            newer = policy_version is not None and p.policy_version > policy_version
            if self.on_policy:
                return (p.system_shutdown_flag or newer or (
                    worker is not None and loaded_version == p.policy_version
                    and self.segment_steps_allowed(worker) > self._segment_done(worker)[0]))
            allowed = self.allowed_env_steps()
            return p.system_shutdown_flag or allowed is None or allowed - p.env_steps >= grant or newer

        with self._advanced:
            return self._advanced.wait_for(may_collect, timeout=max(0.0, min(timeout, 10.0)))

    def notify_progress(self) -> None:
        """The learner advanced, a policy came out, collectors came or went, or the run ended: waiting
        collectors look again."""
        with self._advanced:
            self._advanced.notify_all()

    @contextlib.contextmanager
    def long_poll(self):
        """A long-poll slot (True), or False when all are taken: the caller answers at once. A request that
        waits gives up its turn (:class:`Admission`) first."""
        self.admission.leave()
        slot = self._long_polls.acquire(blocking=False)
        if not slot:
            with self._lock:
                self.long_polls_refused += 1
        try:
            yield slot
        finally:
            if slot:
                self._long_polls.release()

    # ---- on-policy segments ------------------------------------------------------------------
    def new_segment_round(self) -> None:
        """A learner task starts (call under the coordinator's lock): the segments counted so far are void."""
        self.segment_round += 1
        self._segment_steps.clear()

    def segment_share(self) -> int:
        """Env steps each active collector contributes to one segment: ``policy.collect.n_sample`` split
        among them, rounded up to whole vector steps (a collector that leaves raises the others' share)."""
        collectors = sum(1 for w in self._workers.list("collector", active_only=True))
        envs = int(self.cfg.env.collector_env_num)
        per_collector = math.ceil(int(self.cfg.policy.collect.n_sample) / max(1, collectors))
        return math.ceil(per_collector / envs) * envs

    def _segment_done(self, worker: Worker) -> tuple:
        """(env steps of ``worker``, of all collectors) announced with the current policy version."""
        with self._lock:
            per_worker = self._segment_steps.get(self._progress.policy_version, {})
            return per_worker.get(worker.worker_id, 0), sum(per_worker.values())

    def segment_steps_allowed(self, worker: Worker) -> int:
        """On-policy: the env steps ``worker`` may collect in all with the current policy version: its share,
        and no more than the segment still misses (a segment larger than ``n_sample`` would be taken before
        the rest arrives, and the rest thrown away). 0 before the learner published a first policy."""
        if self._progress.policy_version < 0:
            return 0
        mine, total = self._segment_done(worker)
        missing = max(0, int(self.cfg.policy.collect.n_sample) - total)
        return min(self.segment_share(), mine + missing)

    def count_segment_steps(self, worker: Worker, version: int, steps: int) -> None:
        with self._lock:
            per_worker = self._segment_steps.setdefault(version, {})
            per_worker[worker.worker_id] = per_worker.get(worker.worker_id, 0) + steps
            for old in [v for v in self._segment_steps if v < self._progress.policy_version]:
                del self._segment_steps[old]


class Admission:
    """At most ``size`` requests hold a turn at once; :meth:`enter` waits ``timeout`` s for one, then raises
    :class:`~parallel_rl.errors.UnavailableError` (503: the slave sends its batch again later). The
    coordinator's HTTP app makes each metadata request take a turn before its body is read and give it back
    once its answer is built; a request that is about to wait (a long-poll) gives it back early
    (:meth:`leave` from the same thread)."""

    def __init__(self, size: int, timeout: float):
        self.timeout = timeout
        self._turns = threading.BoundedSemaphore(size)
        self._held = threading.local()

    def enter(self) -> None:
        if not self._turns.acquire(timeout=self.timeout):
            raise UnavailableError(f"the coordinator is overloaded: no metadata batch was admitted within "
                                   f"{self.timeout:g}s; send it again later")
        self._held.turn = True

    def leave(self) -> None:
        """Give back this thread's turn, if it holds one."""
        if getattr(self._held, "turn", False):
            self._held.turn = False
            self._turns.release()
