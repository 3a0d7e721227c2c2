"""The coordinator's side of each data flow (``parallel_rl.data.flows``): how collectors are metered and how a
learner's sample request is answered. One class per flow, :data:`METERING` keyed by the flow's name; the
coordinator and :class:`~.flow_control.FlowControl` ask it instead of branching on the flow.

- :class:`ReplayMetering` (off-policy): collectors may run ``max(warmup_env_steps, random_collect_size) +
  max_env_steps_per_update * train_iter`` env steps ahead; the learner gets batches sampled from the replay
  index once it holds ``min_buffer_size`` rows, at most ``max_updates_per_transition`` batches per row pushed.
- :class:`SegmentMetering` (synchronous on-policy): each collector collects its share of
  ``policy.collect.n_sample`` env steps per policy version and round (a new learner task starts a new round);
  the learner gets one batch holding the whole fresh segment.
- :class:`AsyncMetering` (asynchronous on-policy): collectors may fill the learner's queue up to
  ``rollout_queue_batches * n_sample`` rows, never waiting for a version; the learner gets one batch of the
  oldest queued rows within ``max_staleness`` versions of the iteration it will train them at.

Both allowances (replay, async) are one mechanism, :class:`AllowanceMetering`: the control block's
``allowed_env_steps``, which collectors count against, and a wake-up once ``allowance_grant`` more are allowed.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Dict, Optional

from easydict import EasyDict

from ..data.flows import flow_of
from ..policy.spec import policy_spec
from .workers import Worker, WorkerRegistry

EMPTY = {"chunks": [], "batches": []}
# seconds a worker waits before asking again when every long-poll slot was taken
LONG_POLL_RETRY_AFTER = 1.0


class Metering:
    """The base: what every flow's metering answers (the off-policy defaults where one fits both)."""

    def __init__(self, cfg: EasyDict, workers: WorkerRegistry, lock: threading.RLock, progress, flow_control, replay):
        self.cfg = cfg
        self._workers = workers
        self._lock = lock  # the coordinator's: counts change with the counters they are read against
        self._progress = progress
        self._flow = flow_control  # its long-poll slots
        self._replay = replay  # the replay index the learner samples
        # off-policy warm-up with random actions (only off-policy types have the key)
        self.random_collect_size = int(cfg.policy.get("random_collect_size", 0) or 0)
        # rows per batch a learner's sample request is answered with (one that names its own gets that): the
        # flow's, from the policy's typed section
        self.batch_size = flow_of(cfg.policy).learner_batch_size(policy_spec(cfg.policy.type).read(cfg))

    def control(self, worker: Worker) -> Dict[str, Any]:
        """This flow's fields of the control block ``worker`` gets."""
        raise NotImplementedError

    def may_collect(self, worker: Optional[Worker], loaded_version: Optional[int]) -> bool:
        """Whether a waiting collector may collect again (besides a newer policy or the run's end)."""
        raise NotImplementedError

    def sample(
        self, replay, batch_size: int, batches: int, train_iter: int, wait: float, encoding: str, ahead: int = 0
    ) -> Dict[str, Any]:
        """The answer to a learner's sample request (waits up to ``wait`` s for enough data). ``ahead``: batches
        the learner holds untrained, so the answer's first batch is trained at ``train_iter + ahead``."""
        raise NotImplementedError

    def _wait_for_data(self, replay, ready, wait: float) -> Optional[Dict[str, Any]]:
        """Wait (a long-poll) up to ``wait`` s until ``ready()`` or the run's end; the answer to send at once
        instead when every long-poll slot is taken, else None."""
        if wait > 0 and not ready():
            with self._flow.long_poll() as slot:
                if not slot:
                    return {**EMPTY, "retry_after": LONG_POLL_RETRY_AFTER}
                replay.wait_for(
                    lambda: ready() or self._progress.system_shutdown_flag, timeout=max(0.0, min(wait, 10.0))
                )
        return None

    def members_changed(self) -> bool:
        """Collectors came or went, or one started an evaluation: True when waiting collectors must look again."""
        return False

    def spare(self, worker: Worker) -> Optional[bool]:
        """Whether ``worker`` has nothing to collect now, so an evaluation there holds nothing up (None: this
        flow does not say; any collector will do)."""
        return None

    def learner_task_started(self) -> None:
        """A learner task starts (under the coordinator's lock)."""

    def chunk_counted(self, worker: Worker, version: int, steps: int) -> None:
        """``worker`` announced ``steps`` env steps made with policy ``version`` (under the coordinator's lock)."""


class AllowanceMetering(Metering):
    """Collectors may collect up to ``allowed_env_steps`` env steps in all (the cluster's count, ``env_steps``);
    collectors that outrun the learner only steal its CPU and collect data it never trains on. A collector
    past it waits until at least :meth:`grant` more are allowed."""

    def allowed_env_steps(self, worker: Optional[Worker]) -> Optional[float]:
        """The env steps ``worker`` may have been collected by the cluster, at most (None: no limit)."""
        raise NotImplementedError

    def grant(self) -> int:
        # a waiting collector is woken for allowance_grant steps, not for every few (a round trip per tiny chunk)
        return int(self.cfg.parallel.commander.allowance_grant)

    def control(self, worker):
        allowed = self.allowed_env_steps(worker)
        return {
            "allowed_env_steps": None if allowed is None else int(allowed),
            "segment_env_steps": None,
            "segment_round": 0,
        }

    def may_collect(self, worker, loaded_version):
        allowed = self.allowed_env_steps(worker)
        return allowed is None or allowed - self._progress.env_steps >= self.grant()


class ReplayMetering(AllowanceMetering):
    """Off-policy: an allowance of env steps ahead of the learner's updates; batches sampled from the replay
    index."""

    def allowed_env_steps(self, worker=None):
        ratio = float(self.cfg.parallel.commander.max_env_steps_per_update)
        if ratio <= 0:
            return None
        warmup = max(float(self.cfg.parallel.commander.warmup_env_steps), float(self.random_collect_size))
        return warmup + ratio * self._progress.train_iter

    def sample(self, replay, batch_size, batches, train_iter, wait, encoding, ahead=0):
        lcfg, p = self.cfg.parallel.learner, self._progress
        # the learner starts once the random warm-up is in the buffer (RL Zoo's learning_starts)
        min_size = max(batch_size, int(lcfg.min_buffer_size), self.random_collect_size)
        ratio = float(lcfg.max_updates_per_transition)

        def allowed() -> int:
            if p.system_shutdown_flag or replay.count() < min_size:
                return 0
            if ratio > 0:
                return max(0, int(ratio * replay.buffer.pushed) - replay.batches_served)
            return batches

        refused = self._wait_for_data(replay, lambda: allowed() > 0, wait)
        if refused:
            return refused
        n = min(batches, allowed())
        return replay.sample(batch_size, n, train_iter, encoding) if n > 0 else dict(EMPTY)


class SegmentMetering(Metering):
    """Synchronous on-policy: shares of one segment per policy version; the learner takes it whole."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        # env steps each collector sent per policy version (its share of the next segment)
        self._segment_steps: Dict[int, Dict[str, int]] = {}
        # a new learner task starts a new round of segments (its predecessor may have taken the current
        # version's segment with it); collectors count what they sent per (version, round)
        self.segment_round = 0
        self._absent_by_version: Dict[int, set] = {}  # collectors evaluating during a version (_split)

    def control(self, worker):
        # env steps this collector may collect in all with policy `policy_version`
        return {
            "allowed_env_steps": None,
            "segment_env_steps": self.segment_steps_allowed(worker),
            "segment_round": self.segment_round,
        }

    def may_collect(self, worker, loaded_version):
        # the collector acts with the current version and its share of the segment is not collected yet
        return (
            worker is not None
            and loaded_version == self._progress.policy_version
            and self.segment_steps_allowed(worker) > self._segment_done(worker)[0]
        )

    def sample(self, replay, batch_size, batches, train_iter, wait, encoding, ahead=0):
        """One batch holding every row of the policy versions within ``max_staleness`` of the learner's
        ``train_iter``, once there are at least ``batch_size`` of them."""
        p, buffer = self._progress, replay.buffer
        replay.wait_for(
            lambda: p.system_shutdown_flag or buffer.fresh_count(train_iter) >= batch_size,
            timeout=max(0.0, min(wait, 10.0)),
        )
        if p.system_shutdown_flag:
            return dict(EMPTY)
        return replay.sample(batch_size, 1, train_iter, encoding)

    def members_changed(self) -> bool:
        return True  # a collector that leaves raises the others' shares

    def spare(self, worker: Worker) -> Optional[bool]:
        # its share of the current version's segment is in: it would wait for the next version anyway
        return (
            self._progress.policy_version >= 0 and self.segment_steps_allowed(worker) <= self._segment_done(worker)[0]
        )

    def learner_task_started(self) -> None:
        self.segment_round += 1
        self._segment_steps.clear()

    def chunk_counted(self, worker, version, steps):
        per_worker = self._segment_steps.setdefault(version, {})
        per_worker[worker.worker_id] = per_worker.get(worker.worker_id, 0) + steps
        for old in [v for v in self._segment_steps if v < self._progress.policy_version]:
            del self._segment_steps[old]

    def segment_share(self, collectors: int) -> int:
        """Env steps each of ``collectors`` contributes to one segment: ``policy.collect.n_sample`` split among
        them, rounded up to whole vector steps."""
        envs = int(self.cfg.env.collector_env_num)
        per_collector = math.ceil(int(self.cfg.policy.collect.n_sample) / max(1, collectors))
        return math.ceil(per_collector / envs) * envs

    def _split(self) -> tuple:
        """(ids of the collectors left out of the current version's segment, how many active ones share it).

        A collector given an evaluation while the version is current collects nothing until the evaluation ends:
        it is left out and the others collect its share instead of the segment waiting for it (an evaluation of
        long episodes takes seconds). One whose evaluation ends mid-version stays out until the next version: the
        others were told to collect its share, and rows they have under way are not counted yet."""
        with self._lock:
            version = self._progress.policy_version
            active = {w.worker_id: w for w in self._workers.list("collector", active_only=True)}
            evaluating = {i for i, w in active.items() if w.eval_task}
            absent = self._absent_by_version.setdefault(version, set())
            absent.update(evaluating)
            if not active.keys() - absent:  # all of them evaluated: the ones done collect it
                absent = self._absent_by_version[version] = evaluating
            for old in [v for v in self._absent_by_version if v < version]:
                del self._absent_by_version[old]
            return absent, len(active.keys() - absent)

    def _segment_done(self, worker: Worker) -> tuple:
        """(env steps of ``worker``, of all collectors) announced with the current policy version."""
        with self._lock:
            per_worker = self._segment_steps.get(self._progress.policy_version, {})
            return per_worker.get(worker.worker_id, 0), sum(per_worker.values())

    def segment_steps_allowed(self, worker: Worker) -> int:
        """The env steps ``worker`` may collect in all with the current policy version: its share, and no more
        than the segment still misses (a segment larger than ``n_sample`` would be taken before the rest
        arrives, and the rest thrown away). 0 before the learner published a first policy, and while it is given
        an evaluation (the others collect its share)."""
        if self._progress.policy_version < 0:
            return 0
        absent, sharing = self._split()
        if worker.worker_id in absent:
            return 0
        mine, total = self._segment_done(worker)
        missing = max(0, int(self.cfg.policy.collect.n_sample) - total)
        return min(self.segment_share(sharing), mine + missing)


class AsyncMetering(AllowanceMetering):
    """Asynchronous on-policy: a bounded queue between collectors and learner (IMPALA's actor queue). Collectors
    never wait for a version, only for room: rows collected and not yet taken by the learner are at most
    ``rollout_queue_batches * n_sample`` (plus what collectors had under way); the learner gets the oldest
    queued rows within ``max_staleness`` versions, one batch per request."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._trains_at = 0  # the iteration the learner trains its newest batch at (its last request says)
        n_sample = int(self.cfg.policy.collect.n_sample)
        self.capacity = int(self.cfg.parallel.commander.rollout_queue_batches) * n_sample  # 0: no limit
        # a waiting collector is woken for allowance_grant steps, or as soon as the learner is short of a batch
        # (the room is then more than capacity - n_sample): a larger grant would never wake it
        self._grant = max(1, min(int(self.cfg.parallel.commander.allowance_grant), self.capacity - n_sample + 1))

    def grant(self) -> int:
        return self._grant

    def queued(self) -> int:
        """Rows waiting for the learner that it may still train on (stale rows are dropped, not trained)."""
        trains_at = max(self._trains_at, self._progress.train_iter)
        return self._replay.buffer.fresh_count(trains_at)

    def allowed_env_steps(self, worker):
        """The cluster's env steps plus ``worker``'s share of the room left in the queue: the room divided among
        the active collectors, rounded up to whole vector steps (the chunks' unit). The share is computed anew
        for every control block from the rows queued, so nothing is reserved for a collector: one that leaves
        or dies holds no room back, and with 16 collectors a freed batch is not collected 16 times over."""
        if self.capacity <= 0:
            return None
        room = self.capacity - self.queued()
        if room <= 0:
            return self._progress.env_steps + room
        collectors = max(1, sum(1 for _ in self._workers.list("collector", active_only=True)))
        envs = int(self.cfg.env.collector_env_num)
        return self._progress.env_steps + math.ceil(room / collectors / envs) * envs

    def may_collect(self, worker, loaded_version):
        # nothing to act with before a first policy: a newer version (or the run's end) wakes the collector
        acting = loaded_version is None or loaded_version >= 0
        return acting and self.capacity > 0 and self.capacity - self.queued() >= self._grant

    def sample(self, replay, batch_size, batches, train_iter, wait, encoding, ahead=0):
        """One batch of the oldest ``batch_size`` rows collected at most ``max_staleness`` versions before the
        iteration the learner trains it at (``train_iter + ahead``); older rows are dropped, counted. One batch,
        whatever ``batches`` asks: a second one would be trained an iteration later than the check assumed.
        Rows taken (or dropped) make room in the queue: waiting collectors look again."""
        trains_at = train_iter + ahead
        self._trains_at = trains_at
        buffer = replay.buffer
        refused = self._wait_for_data(replay, lambda: buffer.fresh_count(trains_at) >= batch_size, wait)
        if refused or self._progress.system_shutdown_flag:
            return refused or dict(EMPTY)
        answer = replay.sample(batch_size, 1, trains_at, encoding)
        self._flow.notify_progress()
        return answer

    def members_changed(self) -> bool:
        return self.capacity > 0  # a collector that leaves raises the others' shares of the room


METERING = {"replay": ReplayMetering, "segments": SegmentMetering, "async": AsyncMetering}
