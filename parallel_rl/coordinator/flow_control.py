"""Flow control: how far collectors may run ahead of the learner, and how many requests wait at once.

How collectors are metered and how a learner's sample request is answered is the policy's data flow's
(``parallel_rl.data.flows``): one metering class per flow, :data:`METERING`, chosen by the flow's name.

- **Allowance** (off-policy, :class:`ReplayMetering`): collectors collect up to ``max(warmup, random_collect_size) +
  max_env_steps_per_update * train_iter`` env steps; a throttled collector's metadata request waits
  (:meth:`FlowControl.wait_for_allowance`) until the learner advanced or a newer policy is out.
- **Queue** (asynchronous on-policy, :class:`AsyncMetering`): the same allowance, counted in rows the learner has
  not taken yet: at most ``rollout_queue_batches * n_sample``, shared among the active collectors.
- **Segments** (on-policy, :class:`SegmentMetering`): each collector collects its share of ``policy.collect.n_sample`` env steps per
  policy version and round (a new learner task starts a new round), no more than the segment still misses.
- **Long-polls**: at most ``long_poll_slots`` requests wait at once (each holds a server thread); the rest
  are answered at once with ``retry_after``.
- **Admission** (:class:`Admission`): at most ``ADMITTED`` metadata requests are served at once.

The counters it meters against (env steps, train iterations, the policy version) belong to the coordinator;
:class:`Progress` says which ones it reads.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Dict, Optional, Protocol

from easydict import EasyDict

from ..data.flows import flow_of
from ..errors import UnavailableError
from .metering import LONG_POLL_RETRY_AFTER, METERING, Metering  # noqa: F401 (LONG_POLL_RETRY_AFTER: its users)
from .workers import Worker, WorkerRegistry

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
    def __init__(
        self,
        cfg: EasyDict,
        workers: WorkerRegistry,
        lock: threading.RLock,
        progress: Progress,
        epsilon: Callable[[int], float],
        replay,
    ):
        self.cfg = cfg
        self._workers = workers
        self._lock = lock  # the coordinator's: segment counts change with the counters they are read against
        self._progress = progress
        self._epsilon = epsilon
        # how the policy's data flow meters collectors and answers sample requests
        self.metering: Metering = METERING[flow_of(cfg.policy).name](cfg, workers, lock, progress, self, replay)
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
        return {
            "policy_version": p.policy_version,
            "epsilon": self._epsilon(p.env_steps),
            # off-policy warm-up: collectors act with random actions until the cluster has this many env steps
            "random_collect": p.env_steps < self.metering.random_collect_size,
            "stop": p.system_shutdown_flag,
            "state": worker.state.value,
            "env_steps": p.env_steps,
            # allowed_env_steps (off-policy), segment_env_steps and segment_round (on-policy)
            **self.metering.control(worker),
            # tasks this coordinator does not know (issued before a restart, after the snapshot it resumed)
            "cancel_tasks": list(worker.stale_tasks),
        }

    def wait_for_allowance(
        self,
        timeout: float,
        policy_version: Optional[int] = None,
        worker: Optional[Worker] = None,
        loaded_version: Optional[int] = None,
    ) -> bool:
        """Block a collector until the flow's metering lets it collect again, or ``timeout``."""
        p, metering = self._progress, self.metering

        def may_collect() -> bool:
            newer = policy_version is not None and p.policy_version > policy_version
            return p.system_shutdown_flag or newer or metering.may_collect(worker, loaded_version)

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
            raise UnavailableError(
                f"the coordinator is overloaded: no metadata batch was admitted within "
                f"{self.timeout:g}s; send it again later"
            )
        self._held.turn = True

    def leave(self) -> None:
        """Give back this thread's turn, if it holds one."""
        if getattr(self._held, "turn", False):
            self._held.turn = False
            self._turns.release()
