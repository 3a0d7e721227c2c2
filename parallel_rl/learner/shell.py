"""LearnerSlave: the learner's process shell in the cluster.

A learner task trains until stopped. :class:`DataPipeline` keeps the next
batches ready: one request to the coordinator returns references for several
batches (and carries the priorities of the batches just trained on); the rows
are read from chunk files (cached) while the learner trains on the current
batch. Every ``publish_every`` iterations the policy is written to the shared
disk and announced; every ``save_state_every`` the full learner state
(optimizer included) too, so a new learner resumes where a dead one stopped.
"""
from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np
from easydict import EasyDict

from ..envs.fit import env_spaces
from ..errors import ParallelRLError, PeerUnavailableError, StorageError, StorageFaultError
from ..policy import create_policy
from ..protocol import ChunkDamaged, LearnInfo, Policy, SampleAnswer, SampleRequest, TimeBreakdown
from ..runtime import experiment_dir, guarded_thread
from ..storage import SharedStorage
from ..tblog import TensorBoardLogger
from .learner import create_learner
from ..slave.comm import BaseCommLearner, register_comm_learner
from ..slave.phases import PhaseClock
from ..transport import ApiError, HttpClient, pack_array, unpack_array
from ..slave.slave import Slave, SlaveTask

logger = logging.getLogger(__name__)

# damaged chunks a RowStore remembers (never read again; the coordinator drops them from its index)
MAX_DAMAGED_REMEMBERED = 4096


class RowStore:
    """Chunk rows kept in memory in fixed slots, so a batch is gathered with one index per column.

    A batch of 64 rows may touch 64 chunks; indexing each chunk's columns
    separately costs hundreds of small numpy calls. Here every loaded chunk
    is copied once into slot ``s`` (rows ``s*slot_rows ...``) of preallocated
    column arrays; the least recently used chunk's slot is reused.

    A chunk that cannot be read as one of ours (a damaged file, a column of Python objects, more rows than a
    slot, other columns than the chunks before) is damaged: its rows are dropped like a deleted chunk's, it
    is logged and handed to ``on_damaged(name, reason)`` once (the learner tells the coordinator, which drops
    it from its index), and never read again. A fault of the store (StorageFaultError) is no damage: it
    raises, the file may be fine.
    """

    def __init__(self, storage: SharedStorage, slots: int, slot_rows: int,
                 on_damaged: Optional[Callable[[str, str], None]] = None):
        self.storage, self.slots, self.slot_rows = storage, slots, slot_rows
        self.on_damaged = on_damaged
        self.damaged: "collections.OrderedDict[str, str]" = collections.OrderedDict()  # name -> reason
        self.damaged_count = 0  # chunks found damaged (the dict above forgets the oldest past a bound)
        self._columns: Dict[str, np.ndarray] = {}
        self._lru: "collections.OrderedDict[str, int]" = collections.OrderedDict()
        self._free = list(range(slots - 1, -1, -1))
        self._rows_in = np.zeros(slots, dtype=np.int64)  # rows of the chunk in each slot
        self._short: set = set()  # chunks found to hold fewer rows than were asked of them (logged once)

    def _slot(self, name: str, fetched: Dict[str, Optional[Dict[str, np.ndarray]]]) -> int:
        """The chunk's slot (loading the file on a miss, unless in ``fetched``), or -1 when the file is gone or
        damaged."""
        slot = self._lru.get(name)
        if slot is not None:
            self._lru.move_to_end(name)
            return slot
        if name in self.damaged:
            return -1
        if name in fetched:
            cols = fetched[name]
        else:
            try:
                cols = self.storage.read_chunk(name)
            except FileNotFoundError:
                cols = None
            except StorageFaultError:  # the store failed, not the file
                raise
            except StorageError as exc:
                cols = exc
        if cols is None:
            return -1  # evicted and deleted since it was sampled
        problem = str(cols) if isinstance(cols, StorageError) else self._unfit(name, cols)
        if problem:
            self._damaged(name, problem)
            return -1
        n = len(next(iter(cols.values())))
        if not self._columns:
            self._columns = {k: np.zeros((self.slots * self.slot_rows,) + v.shape[1:], dtype=v.dtype)
                             for k, v in cols.items()}
        slot = self._free.pop() if self._free else self._lru.popitem(last=False)[1]
        base = slot * self.slot_rows
        for k, v in cols.items():
            self._columns[k][base:base + n] = v
        self._rows_in[slot] = n
        self._lru[name] = slot
        return slot

    def _unfit(self, name: str, cols: Dict[str, np.ndarray]) -> Optional[str]:
        """Why the columns of chunk ``name`` cannot go into a slot (None when they can)."""
        lengths = {len(v) for v in cols.values()}
        if len(lengths) != 1:
            return f"chunk {name!r}: columns of different or no lengths {sorted(lengths)}"
        n = lengths.pop()
        if n > self.slot_rows:
            return f"chunk {name!r} has {n} rows, more than parallel.collector.chunk_size={self.slot_rows}"
        if self._columns:
            if set(cols) != set(self._columns):
                return f"chunk {name!r} has columns {sorted(cols)}, the chunks before it {sorted(self._columns)}"
            for k, v in cols.items():
                have = self._columns[k]
                if v.shape[1:] != have.shape[1:] or not np.can_cast(v.dtype, have.dtype, "same_kind"):
                    return (f"chunk {name!r}: column {k!r} is {v.dtype}{list(v.shape[1:])}, the chunks before it "
                            f"{have.dtype}{list(have.shape[1:])}")
        return None

    def _damaged(self, name: str, reason: str) -> None:
        self.damaged[name] = reason
        self.damaged_count += 1
        while len(self.damaged) > MAX_DAMAGED_REMEMBERED:
            self.damaged.popitem(last=False)
        logger.error("learner: chunk %r is damaged, its rows are dropped: %s", name, reason)
        if self.on_damaged is not None:
            self.on_damaged(name, reason)

    def gather(self, chunks: List[str], local: np.ndarray, rows: np.ndarray):
        """Columns of rows ``rows`` of chunks ``chunks[local]``; and the mask of rows kept: a row whose chunk
        file was gone or damaged, or past the end of its file (a file that holds fewer rows than were indexed),
        is not read; the slot it would point into holds another chunk's rows."""
        if len(chunks) > self.slots:  # loading one would evict another this call still reads
            raise ValueError(f"{len(chunks)} chunks in one gather, more than the {self.slots} cache slots")
        # on an object store every read waits a round trip: fetch the misses together
        fetched = self.storage.read_chunks([n for n in chunks if n not in self._lru]) if self.storage.remote else {}
        by_chunk = np.array([self._slot(name, fetched) for name in chunks], dtype=np.int64)
        slots = by_chunk[local]
        keep = rows < np.where(slots >= 0, self._rows_in[slots], 0)
        short = (slots >= 0) & ~keep
        if short.any():
            for i in set(local[short].tolist()):
                if chunks[i] not in self._short:
                    self._short.add(chunks[i])
                    logger.warning("chunk %r holds %d rows, rows up to %d were asked of it: those past its end "
                                   "are dropped", chunks[i], self._rows_in[by_chunk[i]], rows[local == i].max())
        pos = (slots * self.slot_rows + rows)[keep]
        if len(pos) == 0:
            return None, keep
        return {k: v[pos] for k, v in self._columns.items()}, keep


class DataPipeline:
    """Prefetches batches for a learner in a background thread.

    With ``whole_segments`` (on-policy) each batch is one whole segment (at least ``batch_size`` rows of
    the policy versions the coordinator accepts for the learner's ``train_iter``), and the next one is
    asked for only after the learner trained on the last (:meth:`trained`): asked for earlier, it
    would be asked for with the iteration before, by a learner about to be one version further.
    Otherwise each request says how many batches the learner holds untrained (``ahead``: queued, or
    handed over and not trained yet), so the coordinator knows the iteration the answer is trained at.
    With ``lanes`` (on-policy) a batch's env ids are made distinct per chunk.
    """

    def __init__(self, client: HttpClient, worker_id: str, storage: SharedStorage, batch_size: int,
                 prefetch: int, cache_size: int, chunk_rows: int, on_control=None, buffer: str = "default",
                 whole_segments: bool = False, load_rows: bool = True,
                 on_damaged: Optional[Callable[[str, str], None]] = None, lanes: bool = False,
                 clock: Optional[PhaseClock] = None):
        """``clock``: where the thread's time goes (background phases sample_request and reading_rows)."""
        self.client, self.worker_id, self.storage = client, worker_id, storage
        self.clock = clock or PhaseClock((), background=("sample_request", "reading_rows"))
        self.whole_segments = whole_segments
        self.lanes = lanes
        self.load_rows = load_rows
        if whole_segments:
            prefetch = 1
        self.batch_size, self.prefetch = batch_size, prefetch
        self.buffer = buffer
        self.on_control = on_control
        self.train_iter = 0
        self.error: Optional[str] = None
        self.missing_rows = 0
        self.wait_seconds = 0.0
        # a round of batches touches at most prefetch * batch_size chunks, and they must fit at once (a
        # segment: at most one chunk per row)
        self._rows = RowStore(storage, max(cache_size, prefetch * batch_size), chunk_rows, on_damaged)
        # batches put in the queue (the data thread's count) and trained on (the learner's): the difference is
        # what the learner holds untrained, counted without a lock (a late read only overstates it)
        self._put = self._trained = 0
        self._ready: "queue.Queue[Dict[str, np.ndarray]]" = queue.Queue(maxsize=2 * prefetch)
        self._priorities: List[Dict[str, np.ndarray]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._room = threading.Event()  # set by get() when a whole round of batches fits in the queue
        # ESTALE on NFS, a bug: the thread ends with ``error`` set and the learner's task fails with it (a dead
        # data thread must never leave the learner waiting forever); a damaged chunk only loses its rows
        self._thread = guarded_thread(self._loop, "learner-data", self._died)

    def _died(self, reason: str) -> None:
        self.error = reason

    @property
    def damaged_chunks(self) -> int:
        """Chunks found damaged (their rows dropped, counted in ``missing_rows``)."""
        return self._rows.damaged_count

    def start(self) -> "DataPipeline":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._room.set()
        while True:  # empty the queue: a put blocked on a full queue returns at once
            try:
                self._ready.get_nowait()
            except queue.Empty:
                break
        self._thread.join(5.0)

    def get(self, timeout: float) -> Optional[Dict[str, np.ndarray]]:
        """The next batch; time spent waiting is added to ``wait_seconds`` (a starved learner shows here)."""
        try:
            batch = self._ready.get_nowait()
        except queue.Empty:
            start = time.monotonic()
            try:
                batch = self._ready.get(timeout=timeout)
            except queue.Empty:
                return None
            finally:
                self.wait_seconds += time.monotonic() - start
        if not self.whole_segments and self._ready.qsize() <= self.prefetch and not self._room.is_set():
            self._room.set()
        return batch

    def trained(self, train_iter: int) -> None:
        """The learner trained on a batch it got and is at ``train_iter`` now (a whole segment: ask for the
        next one)."""
        self.train_iter = train_iter
        self._trained += 1
        if self.whole_segments:
            self._room.set()

    def give_priorities(self, info: Optional[Dict[str, np.ndarray]]) -> None:
        if info is not None:
            with self._lock:
                self._priorities.append(info)

    def _take_priorities(self) -> List[Dict[str, np.ndarray]]:
        with self._lock:
            infos, self._priorities = self._priorities, []
        return infos

    def _wait_for_room(self) -> None:
        """Until a whole round of batches fits: the thread wakes once per round, not once per batch
        (every wake-up takes the GIL from the training thread)."""
        while not self._stop.is_set():
            self._room.clear()
            if self.whole_segments:
                if self._put == self._trained:
                    return
            elif self._ready.qsize() <= self.prefetch:
                return
            self._room.wait(0.5)

    def _loop(self) -> None:
        failures = retries = 0
        while not self._stop.is_set():
            self._wait_for_room()
            infos = self._take_priorities()
            priorities = {k: pack_array(np.concatenate([i[k] for i in infos]), dtype)
                          for k, dtype in (("index", "<i8"), ("uid", "<i8"), ("priority", "<f4"))} if infos else None
            body = SampleRequest(worker_id=self.worker_id, batch_size=self.batch_size, batches=self.prefetch,
                                 train_iter=self.train_iter, ahead=min(256, self._put - self._trained),
                                 wait=1.0, encoding="base64", priorities=priorities).to_json()
            try:
                with self.clock.timing("sample_request", background=True):
                    answer = SampleAnswer.from_json(self.client.post(f"/api/v1/buffers/{self.buffer}/sample", body,
                                                                     timeout=self.client.timeout + 1.0))
                failures = retries = 0
            except ParallelRLError as exc:
                # an unreachable coordinator (restarting) is waited for: the slave's heartbeat gives up after
                # 3 x TTL; a coordinator that answers with refusals fails the task after 5 of them
                failures += 1 if not isinstance(exc, PeerUnavailableError) else 0
                retries += 1
                with self._lock:  # they go with the next attempt
                    self._priorities[:0] = infos
                if failures > 5:
                    self.error = f"sampling from the coordinator failed {failures} times: {exc}"
                    logger.error("learner: %s", self.error)
                    return
                self._stop.wait(min(1.0, 0.1 * 2 ** retries))  # bounded backoff
                continue
            if self.on_control is not None and answer.control:
                self.on_control(answer.control)
            if answer.retry_after:  # every long-poll slot was taken: ask again later, not at once
                self._stop.wait(min(answer.retry_after, 5.0))
            with self.clock.timing("reading_rows", background=True):
                batches = self._load(answer.chunks, answer.batches)
            for batch in batches:
                self._put += 1  # before the learner can take it: the count never falls behind _trained
                while not self._stop.is_set():
                    try:
                        self._ready.put(batch, timeout=0.5)
                        break
                    except queue.Full:
                        continue

    def _load(self, chunks: List[str], refs: List[Dict[str, Any]]) -> List[Dict[str, np.ndarray]]:
        """The rows of a round of batches, gathered at once (one index per column), split into batches.

        Rows whose chunk file is gone or damaged, or past its end, are dropped (counted in ``missing_rows``)."""
        if not refs:
            return []
        cols = {k: [unpack_array(r[k], dtype) for r in refs] for k, dtype in (
            ("chunk", np.int64), ("row", np.int64), ("index", np.int64), ("uid", np.int64), ("weight", np.float32))}
        local = np.concatenate(cols.pop("chunk"))
        if not self.load_rows:  # references only: each learner rank reads its own share of the rows
            flat = {k: np.concatenate(v) for k, v in cols.items()}
            flat["chunk"] = np.asarray(chunks, dtype=str)[local]
            parts = {k: np.split(v, np.cumsum([len(r) for r in cols["index"]])[:-1]) for k, v in flat.items()}
            return [{k: p[i] for k, p in parts.items()} for i in range(len(refs))]
        rows, keep = self._rows.gather(chunks, local, np.concatenate(cols.pop("row")))
        self.missing_rows += int(len(keep) - keep.sum())
        if rows is None:
            return []
        rows.update((k, np.concatenate(v)[keep]) for k, v in cols.items())
        if self.lanes and "env_id" in rows:
            # env ids are per collector: rows of one chunk (one collector, time-ordered) get their own ids
            rows["env_id"] = rows["env_id"] + local[keep] * (int(rows["env_id"].max()) + 1)
        ends = np.cumsum([len(r) for r in cols["index"]])
        cuts = np.cumsum(keep)[ends[:-1] - 1]  # kept rows before each batch boundary
        parts = {k: np.split(v, cuts) for k, v in rows.items()}
        return [batch for batch in ({k: p[i] for k, p in parts.items()} for i in range(len(refs)))
                if len(batch["index"])]


class LearnerSlave(Slave, BaseCommLearner):
    kind = "learner"
    loads_rows = True  # the data pipeline hands over rows (False: references, each rank reads its share)

    def validate_task(self, task: SlaveTask) -> None:
        if task.kind != "learner":
            raise ApiError(400, "bad_request", f"a learner runs learner tasks, not {task.kind!r}")
        with self._lock:
            if self._running:
                raise ApiError(409, "conflict", f"already running {sorted(self._running)}")

    clock: Optional[PhaseClock] = None  # where the time goes (see time_breakdown); made once, at the first setup

    def setup(self, cfg: EasyDict) -> None:
        obs_shape, self.action_spec = env_spaces(cfg.env, cfg.policy.type)
        self.obs_dim = int(np.prod(obs_shape))
        if self.clock is None:
            self.clock = PhaseClock(("waiting_for_data", "train", "publishing"),
                                    background=("sample_request", "reading_rows"))

    def time_breakdown(self) -> Optional[TimeBreakdown]:
        return None if self.clock is None else self.clock.breakdown()

    # ---- the learner's outputs --------------------------------------------------------------
    def send_policy(self, policy, train_iter: int, final: bool = False) -> None:
        """Write policy checkpoint ``train_iter`` (and, periodically, the full state) and announce it.

        On-policy the full state goes with every checkpoint, first: a learner that takes over resumes at
        the newest version the collectors act with (an older one would never get a segment)."""
        lcfg = self.cfg.parallel.learner
        with self.clock.timing("publishing"):
            if final or policy.flow.state_with_every_checkpoint or train_iter % int(lcfg.save_state_every) == 0:
                self.storage.save_learner_state(train_iter, {"policy": policy.state_dict(), "train_iter": train_iter})
            self.storage.save_policy(train_iter, policy.model_state_dict())
            self.storage.prune_checkpoints(int(lcfg.keep_checkpoints))
            self.send_metadata(Policy(version=train_iter).to_json(), urgent=True)

    def send_learn_info(self, task: SlaveTask, learner, pipeline: DataPipeline, rate: float = 0.0) -> None:
        info = {k: v for k, v in learner.learn_info.items() if isinstance(v, (int, float))}
        info["missing_rows"] = pipeline.missing_rows
        info["damaged_chunks"] = pipeline.damaged_chunks
        info["data_wait_seconds"] = round(pipeline.wait_seconds, 3)
        info["updates_per_second"] = round(rate, 1)
        info.update(self.data_stats)
        # whatever scalars the policy reports (DQN: loss, q_value, td_error; PPO: policy_loss, entropy, ...)
        self.tb.scalars(learner.train_iter, "learner/",
                        **{k: v for k, v in info.items() if k not in ("train_iter", "envstep", "missing_rows")})
        self.send_metadata(LearnInfo(train_iter=learner.train_iter, info=info, task_id=task.task_id).to_json())

    data_stats: Dict[str, int] = {}

    def report_damaged_chunk(self, name: str, reason: str) -> None:
        """Tell the coordinator that chunk ``name`` cannot be read: it drops the chunk from its replay index."""
        self.send_metadata(ChunkDamaged(chunk=name, error=reason[:300]).to_json(), urgent=True)

    def get_data(self, pipeline: DataPipeline, timeout: float) -> Optional[Dict[str, np.ndarray]]:
        return pipeline.get(timeout)

    # ---- the task -----------------------------------------------------------------------------
    # hooks of the training run (a LearnerAggregator runs them across its ranks)
    def start_training(self, policy, learner) -> None:
        """Called once the policy is built (and resumed), before the first batch."""

    def stop_training(self) -> None:
        """Called when the run ends (normally or not), after the data pipeline stopped."""

    def train_step(self, learner, batch: Dict[str, np.ndarray]) -> None:
        """One update on ``batch``; ``learner.priority_info`` holds its priorities afterwards."""
        learner.train(batch)

    def execute(self, task: SlaveTask) -> Dict[str, Any]:
        return self.run_training(task, resume=bool(task.spec.get("resume")))

    def run_training(self, task: SlaveTask, resume: bool) -> Dict[str, Any]:
        """Train until ``task`` is stopped; ``resume``: from the newest good learner state on the shared disk."""
        cfg, lcfg = self.cfg, self.cfg.parallel.learner
        policy = create_policy(cfg.policy, self.obs_dim, self.action_spec, seed=cfg.seed)
        learner = create_learner(cfg.policy.learn.learner, policy.learn_mode, exp_dir=None,
                                 instance_name=f"learner {self.worker_id}")
        if resume:
            found = self.storage.latest_good_learner_state()
            if found is not None:
                version, state = found
                policy.load_state_dict(state["policy"])
                learner.train_iter = int(state["train_iter"])
                logger.info("learner %s: resumed from learner state %d", self.worker_id, version)
        start_iter = learner.train_iter
        self.start_training(policy, learner)
        self.send_policy(policy, learner.train_iter)
        # on-policy: one update per batch (the policy runs its epochs over it), every update published, and what
        # the learner trained on reported (flow.learner_stats): batches, their rows and the largest staleness
        # (train_iter - the oldest policy version in a batch) it ever saw
        flow = policy.flow
        name = flow.learner_stats
        self.data_stats = {f"{name}s": 0, f"{name}_rows": 0, f"{name}_rows_total": 0,
                           f"{name}_staleness_max": 0} if name else {}
        batch_size = flow.learner_batch_size(cfg.policy)
        pipeline = DataPipeline(self.coordinator, self.worker_id, self.storage, batch_size,
                                flow.learner_prefetch(lcfg), int(lcfg.chunk_cache_size),
                                int(cfg.parallel.collector.chunk_size), on_control=self.on_control,
                                whole_segments=flow.whole_segments, load_rows=self.loads_rows,
                                on_damaged=self.report_damaged_chunk, lanes=flow.lanes, clock=self.clock).start()
        publish_every = flow.publish_every(lcfg)
        self.tb = TensorBoardLogger(self.storage.local_dir("tensorboard", "learner", fallback=experiment_dir(cfg))
                                    if cfg.system.tensorboard else None)
        last_info, last_iter = time.monotonic(), learner.train_iter
        started = time.monotonic()
        learner.call_hook("before_run")
        try:
            try:
                while not task.stop.is_set():
                    with self.clock.timing("waiting_for_data"):
                        batch = self.get_data(pipeline, timeout=0.25)
                    if batch is None:
                        if pipeline.error:
                            raise RuntimeError(pipeline.error)
                        continue
                    if name:
                        self._count_batch(name, batch, learner.train_iter)
                    with self.clock.timing("train"):
                        self.train_step(learner, batch)
                    pipeline.give_priorities(learner.priority_info)
                    if learner.train_iter % publish_every == 0:
                        self.send_policy(policy, learner.train_iter)
                    pipeline.trained(learner.train_iter)
                    now = time.monotonic()
                    if now - last_info >= 0.25:
                        self.send_learn_info(task, learner, pipeline,
                                             (learner.train_iter - last_iter) / (now - last_info))
                        last_info, last_iter = now, learner.train_iter
            finally:
                pipeline.stop()
                self.stop_training()
                learner.call_hook("after_run")
            self.send_policy(policy, learner.train_iter, final=True)
            self.send_learn_info(task, learner, pipeline)
        finally:
            self.tb.close()
        elapsed = time.monotonic() - started
        return {"train_iter": learner.train_iter, "updates": learner.train_iter - start_iter,
                "updates_per_second": (learner.train_iter - start_iter) / elapsed if elapsed > 0 else 0.0,
                **self.data_stats}

    def _count_batch(self, name: str, batch: Dict[str, np.ndarray], train_iter: int) -> None:
        """What the learner is about to train on, from the rows themselves (each carries its policy version)."""
        staleness = train_iter - int(batch["collect_iter"].min())
        stats = self.data_stats
        stats[f"{name}s"] += 1
        stats[f"{name}_rows"] = len(batch["collect_iter"])
        stats[f"{name}_rows_total"] += len(batch["collect_iter"])
        stats[f"{name}_staleness_max"] = max(stats[f"{name}_staleness_max"], staleness)
        if staleness > int(self.cfg.policy.other.replay_buffer.max_staleness):
            logger.error("learner %s: a %s %d versions old reached iteration %d (max_staleness %d)", self.worker_id,
                         name, staleness, train_iter, self.cfg.policy.other.replay_buffer.max_staleness)


register_comm_learner("flask_fs", LearnerSlave)
