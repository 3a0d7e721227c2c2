"""The learner's data side in the cluster: :class:`DataPipeline` keeps the next batches ready in a background
thread. One request to the coordinator returns references for several batches (and carries the priorities of the
batches just trained on); :class:`RowStore` reads their rows from chunk files (cached in fixed slots) while the
learner trains on the current batch.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import queue
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

import numpy as np

from ..collector.defaults import CollectorSection
from ..data.flows import DataFlow
from ..data.frames import POOL, is_packed_rows, rebuild_stacks
from ..errors import ConfigError, ParallelRLError, PeerUnavailableError, StorageError, StorageFaultError
from ..policy.spec import policy_spec
from ..protocol import SampleAnswer, SampleRequest
from ..runtime import guarded_thread
from ..slave.phases import PhaseClock
from ..storage import SharedStorage
from ..storage.names import parse_chunk_name
from ..transport import HttpClient, pack_array, unpack_array
from .defaults import LearnerSection

logger = logging.getLogger(__name__)

# damaged chunks a RowStore remembers (never read again; the coordinator drops them from its index)
MAX_DAMAGED_REMEMBERED = 4096
# the cache thrashes when the rows sampled over THRASH_WINDOW rows needed more file reads than this share of them
# (said once)
THRASH_SHARE, THRASH_WINDOW = 0.25, 20_000
# rows a cache page holds: a chunk takes whole pages, so a chunk of 4 rows costs 8 rows of the cache, not a slot of
# chunk_size rows
PAGE_ROWS = 8


class _Cached:
    """A chunk in the cache: its rows sit at ``pages[r // page_rows] * page_rows + r % page_rows``; its pool's first
    ``own`` frames are its file's own (those the chunk after it may refer to)."""

    __slots__ = ("key", "pages", "rows", "pool", "own")

    def __init__(self, key: int, pages: np.ndarray, rows: int, pool: Optional[np.ndarray], own: int):
        self.key, self.pages, self.rows, self.pool, self.own = key, pages, rows, pool, own


class RowStore:
    """Chunk rows kept in memory in preallocated column arrays, so a batch is gathered with one index per column.

    A batch of 64 rows may touch 64 chunks; indexing each chunk's columns
    separately costs hundreds of small numpy calls. Here every loaded chunk
    is copied once into pages of ``PAGE_ROWS`` rows of the column arrays, which
    hold ``slots * slot_rows`` rows (``chunk_cache_size`` x ``chunk_size``);
    the least recently used chunks give their pages back when room is needed.
    Chunks smaller than ``chunk_size`` (a collector paced by the learner ends
    one every allowance grant) take only the pages their rows need, so the
    cache holds about as many rows as it was sized for, whatever the chunks'
    sizes.

    A packed chunk (a frame-stacked env's: :mod:`parallel_rl.data.frames`) keeps its frame pool beside its
    pages, self-contained as the store's loader hands it out; :meth:`gather` rebuilds the rows' stacks from it,
    so the cache holds single frames too. A chunk that refers to the frames of the chunk before it takes them
    from the cache when that chunk is there (not read from the store again).

    A chunk that cannot be read as one of ours is damaged: whatever the store's chunk loader found wrong with it
    (:func:`parallel_rl.storage.chunks.load_chunk`: a damaged file, a column of Python objects, sizes its file
    does not hold, a frame index past its pool, any exception its parsing raised), or what does not fit beside
    the chunks before it (more rows than ``slot_rows``, other columns, frames of another shape or dtype). Its
    rows are dropped like a deleted chunk's, it is logged and handed to ``on_damaged(name, reason)`` once (the
    learner tells the coordinator, which drops it from its index), and never read again; so what is cached
    always rebuilds. A fault of the store (StorageFaultError) is no damage: it raises, the file may be fine.
    """

    def __init__(
        self,
        storage: SharedStorage,
        slots: int,
        slot_rows: int,
        on_damaged: Optional[Callable[[str, str], None]] = None,
    ):
        self.storage, self.slots, self.slot_rows = storage, slots, slot_rows
        self.on_damaged = on_damaged
        self.damaged: "collections.OrderedDict[str, str]" = collections.OrderedDict()  # name -> reason
        self.damaged_count = 0  # chunks found damaged (the dict above forgets the oldest past a bound)
        self.page_rows = min(PAGE_ROWS, slot_rows)
        self.pages = max(slots, slots * slot_rows // self.page_rows)  # at least one page a slot: a round fits
        self._columns: Dict[str, np.ndarray] = {}
        self._frame: Optional[tuple] = None  # (shape, dtype) of a frame of the packed chunks' pools
        self._lru: "collections.OrderedDict[str, _Cached]" = collections.OrderedDict()
        self._free = list(range(self.pages - 1, -1, -1))
        self._keys = 0  # a key for each chunk loaded (its frame pool's key in gather)
        self._short: set = set()  # chunks found to hold fewer rows than were asked of them (logged once)
        self._window = [0, 0, 0]  # since the last thrash check: rows asked, files read, rows those files held
        self._thrash_said = False

    def _entry(self, name: str, fetched: Dict[str, Optional[Dict[str, np.ndarray]]], pinned: set) -> Optional[_Cached]:
        """The chunk in the cache (loading the file on a miss, unless in ``fetched``), or None when the file is gone
        or damaged. A chunk of ``pinned`` (this gather's) is never evicted to make room."""
        entry = self._lru.get(name)
        if entry is not None:
            self._lru.move_to_end(name)
            return entry
        if name in self.damaged:
            return None
        if name in fetched:
            cols = fetched[name]
        else:
            try:
                cols = self.storage.chunks.read(name, self._known_frames)
            except FileNotFoundError:
                cols = None
            except StorageFaultError:  # the store failed, not the file
                raise
            except StorageError as exc:
                cols = exc
        if cols is None:
            return None  # evicted and deleted since it was sampled
        problem = str(cols) if isinstance(cols, StorageError) else self._unfit(name, cols)
        if problem:
            self._damaged(name, problem)
            return None
        own = getattr(cols, "own_frames", 0)
        pool = cols.pop(POOL, None)
        if pool is not None and self._frame is None:
            self._frame = (pool.shape[1:], pool.dtype)
        n = len(next(iter(cols.values())))
        self._window[1] += 1
        self._window[2] += n
        if not self._columns:
            self._columns = {
                k: np.zeros((self.pages * self.page_rows,) + v.shape[1:], dtype=v.dtype) for k, v in cols.items()
            }
        need = max(1, -(-n // self.page_rows))
        while len(self._free) < need:
            oldest = next(iter(self._lru))
            if oldest in pinned:  # DataPipeline sizes the cache for a round; a caller asked for more
                raise ValueError(
                    f"the chunks of one gather hold more rows than the cache's {self.pages} pages of {self.page_rows}"
                )
            self._free.extend(self._lru.pop(oldest).pages.tolist())
        pages = np.array([self._free.pop() for _ in range(need)], dtype=np.int64)
        rows = np.arange(n)
        pos = pages[rows // self.page_rows] * self.page_rows + rows % self.page_rows
        for k, v in cols.items():
            self._columns[k][pos] = v
        self._keys += 1
        entry = self._lru[name] = _Cached(self._keys, pages, n, pool, own)
        return entry

    def _known_frames(self, name: str) -> Optional[np.ndarray]:
        """The own frames of chunk ``name`` when it is cached (a chunk after it refers to them: not read again)."""
        entry = self._lru.get(name)
        return None if entry is None or entry.pool is None else entry.pool[: entry.own]

    def _check_thrash(self, rows: int) -> None:
        """Say once when most sampled rows need a file read: a replay of more rows than the cache holds reads
        files instead of training."""
        self._window[0] += rows
        asked, files, held = self._window
        if asked < THRASH_WINDOW:
            return
        self._window = [0, 0, 0]
        if files > THRASH_SHARE * asked and not self._thrash_said:
            self._thrash_said = True
            mean = held / max(files, 1)
            logger.warning(
                "learner: the last %d rows sampled needed %d chunk file reads: the cache holds %d rows "
                "(parallel.learner.chunk_cache_size x parallel.collector.chunk_size, in pages of %d rows) and the "
                "chunks hold %.0f rows on average. Give chunk_cache_size x chunk_size about the replay's size in rows",
                asked,
                files,
                self.pages * self.page_rows,
                self.page_rows,
                mean,
            )

    def _unfit(self, name: str, cols: Dict[str, np.ndarray]) -> Optional[str]:
        """Why the columns of chunk ``name`` (a chunk in itself: the store's loader checked it) cannot go into the
        cache beside the chunks before it (None when they can)."""
        n = len(next(v for k, v in cols.items() if k != POOL))
        if n > self.slot_rows:
            return f"chunk {name!r} has {n} rows, more than parallel.collector.chunk_size={self.slot_rows}"
        if self._columns:
            if set(cols) - {POOL} != set(self._columns):
                return f"chunk {name!r} has columns {sorted(cols)}, the chunks before it {sorted(self._columns)}"
            pool = cols.get(POOL)
            if pool is not None and self._frame is not None and (pool.shape[1:], pool.dtype) != self._frame:
                # one batch's stacks are rebuilt from several chunks' pools into one array
                return (
                    f"chunk {name!r} has frames of {pool.dtype}{list(pool.shape[1:])}, the chunks before it "
                    f"{self._frame[1]}{list(self._frame[0])}"
                )
            for k, v in cols.items():
                if k == POOL:
                    continue
                have = self._columns[k]
                if v.shape[1:] != have.shape[1:] or not np.can_cast(v.dtype, have.dtype, "same_kind"):
                    return (
                        f"chunk {name!r}: column {k!r} is {v.dtype}{list(v.shape[1:])}, the chunks before it "
                        f"{have.dtype}{list(have.shape[1:])}"
                    )
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
        is not read."""
        if len(chunks) > self.pages:  # loading one would evict another this call still reads
            raise ValueError(f"{len(chunks)} chunks in one gather, more than the cache's {self.pages} pages")
        # on an object store every read waits a round trip: fetch the misses together
        misses = [n for n in chunks if n not in self._lru]
        fetched = self.storage.chunks.read_many(misses, self._known_frames) if self.storage.remote else {}
        pinned: set = set()
        entries = []
        for name in chunks:
            entries.append(self._entry(name, fetched, pinned))
            pinned.add(name)
        self._check_thrash(len(local))
        held = np.array([0 if e is None else e.rows for e in entries], dtype=np.int64)
        keep = rows < held[local]
        short = (held[local] > 0) & ~keep
        if short.any():
            for i in set(local[short].tolist()):
                if chunks[i] not in self._short:
                    self._short.add(chunks[i])
                    logger.warning(
                        "chunk %r holds %d rows, rows up to %d were asked of it: those past its end are dropped",
                        chunks[i],
                        held[i],
                        rows[local == i].max(),
                    )
        if not keep.any():
            return None, keep
        # every chunk's page list end to end: row r of chunk i is at page table[start[i] + r // page_rows]
        lists = [np.zeros(0, np.int64) if e is None else e.pages for e in entries]
        start = np.concatenate([[0], np.cumsum([len(p) for p in lists])[:-1]]).astype(np.int64)
        table = np.concatenate(lists)
        mine, r = local[keep], rows[keep]
        pos = table[start[mine] + r // self.page_rows] * self.page_rows + r % self.page_rows
        out = {k: v[pos] for k, v in self._columns.items()}
        if is_packed_rows(out):
            keys = np.array([0 if e is None else e.key for e in entries], dtype=np.int64)
            pools = {e.key: e.pool for e in entries if e is not None}
            out = rebuild_stacks(out, pools, keys[mine])
        return out, keep


def collector_lanes(chunks: List[str], chunk: np.ndarray, row: np.ndarray, env_id: np.ndarray):
    """On-policy rows' env lanes, and a key that orders each lane's rows in time.

    A collector names its chunks ``<collector>-<seq>`` and steps the same envs from one chunk to the next, so
    env ``e`` of collector ``c`` is one lane through a run of consecutive chunks ``c-k``, ``c-(k+1)``, ...: the
    advantage recursions (GAE, V-trace) run on across the chunks' ends instead of bootstrapping at each (a
    1,024-row chunk of 32 envs would cut a 128-step horizon to 32). A gap in the sequence (a chunk gone, or in
    another batch) starts a new lane, and so does a chunk named otherwise (a lane per chunk and env).

    ``chunk``: each row's index into ``chunks``; ``row``: its row in that chunk. Returns (lane ids, time keys)."""
    parsed = [parse_chunk_name(name) or (name, 0) for name in chunks]
    run = np.zeros(len(chunks), dtype=np.int64)  # the run of consecutive chunks each chunk belongs to
    order = sorted(range(len(chunks)), key=lambda i: parsed[i])
    for before, i in zip([None] + order[:-1], order):
        run[i] = (
            run[before]
            if before is not None and parsed[before][0] == parsed[i][0] and parsed[before][1] + 1 == parsed[i][1]
            else (0 if before is None else run[before] + 1)
        )
    rank = np.empty(len(chunks), dtype=np.int64)
    rank[order] = np.arange(len(chunks))  # chunks in (collector, seq) order
    lane = run[chunk] * (int(env_id.max(initial=0)) + 1) + env_id
    return lane, rank[chunk] * (int(row.max(initial=0)) + 1) + row


@dataclasses.dataclass(frozen=True)
class PipelineSection:
    """What the data pipeline reads of the run config, each value from the typed section that owns it
    (:meth:`read`). The batch size is not among them: the coordinator answers every sample request with its own
    data flow's (``policy.learn.batch_size``; on-policy ``policy.collect.n_sample``)."""

    prefetch: int  # batches asked for per round trip: parallel.learner.prefetch_batches (on-policy flows: 1)
    cache_slots: int  # chunks the row cache holds: parallel.learner.chunk_cache_size, or room for a whole round
    chunk_rows: int  # rows a chunk holds at most: parallel.collector.chunk_size

    def __post_init__(self) -> None:
        if min(self.prefetch, self.cache_slots, self.chunk_rows) < 1:
            raise ConfigError(f"a data pipeline needs every value >= 1, got {self!r}")

    @classmethod
    def read(cls, cfg: Mapping[str, Any], flow: DataFlow) -> "PipelineSection":
        """From the compiled config ``cfg``'s typed sections (parallel.learner, parallel.collector, the policy's)
        and the policy's data ``flow``. A round of batches touches at most prefetch * batch_size chunks, and they
        must fit in the cache at once (a segment: at most one chunk per row)."""
        learner, collector = LearnerSection.read(cfg), CollectorSection.read(cfg)
        prefetch = flow.learner_prefetch(learner)
        round_rows = prefetch * flow.learner_batch_size(policy_spec(cfg["policy"]["type"]).read(cfg))
        return cls(prefetch, max(learner.chunk_cache_size, round_rows), collector.chunk_size)


class DataPipeline:
    """Prefetches batches for a learner in a background thread: ``section`` (:class:`PipelineSection`) says how
    many per round trip and how many chunks' rows it caches, ``flow`` (the policy's data flow) what a batch is.

    With the flow's ``whole_segments`` (synchronous on-policy) each batch is one whole segment (at least the
    coordinator's batch size of rows of the policy versions it accepts for the learner's ``train_iter``), and the
    next one is asked for only after the learner trained on the last (:meth:`trained`): asked for earlier, it
    would be asked for with the iteration before, by a learner about to be one version further.
    Otherwise each request says how many batches the learner holds untrained (``ahead``: queued, or
    handed over and not trained yet), so the coordinator knows the iteration the answer is trained at.
    With the flow's ``lanes`` (on-policy) a batch's env ids are made distinct per chunk.
    """

    buffer = "default"  # the coordinator's replay index (a run has one)

    def __init__(
        self,
        section: PipelineSection,
        flow: DataFlow,
        client: HttpClient,
        worker_id: str,
        storage: SharedStorage,
        *,
        on_control: Optional[Callable[[Dict[str, Any]], None]] = None,
        on_damaged: Optional[Callable[[str, str], None]] = None,
        load_rows: bool = True,
        clock: Optional[PhaseClock] = None,
    ):
        """``client``, ``worker_id``: the learner's link to the coordinator; ``storage``: where the chunks are.
        ``on_control``: gets each answer's control block; ``on_damaged(name, reason)``: a chunk found damaged;
        ``load_rows``: hand over rows (False: references, each learner rank reads its own share); ``clock``: where
        the thread's time goes (background phases sample_request and reading_rows)."""
        self.client, self.worker_id, self.storage = client, worker_id, storage
        self.clock = clock or PhaseClock((), background=("sample_request", "reading_rows"))
        self.whole_segments = flow.whole_segments
        self.lanes = flow.lanes
        self.load_rows = load_rows
        self.prefetch = prefetch = section.prefetch
        self.on_control = on_control
        self.train_iter = 0
        self.error: Optional[str] = None
        self.missing_rows = 0
        self.wait_seconds = 0.0
        self._rows = RowStore(storage, section.cache_slots, section.chunk_rows, on_damaged)
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
            priorities = (
                {
                    k: pack_array(np.concatenate([i[k] for i in infos]), dtype)
                    for k, dtype in (("index", "<i8"), ("uid", "<i8"), ("priority", "<f4"))
                }
                if infos
                else None
            )
            body = SampleRequest(  # no batch_size: the coordinator answers with its flow's
                worker_id=self.worker_id,
                batches=self.prefetch,
                train_iter=self.train_iter,
                ahead=min(256, self._put - self._trained),
                wait=1.0,
                encoding="base64",
                priorities=priorities,
            ).to_json()
            try:
                with self.clock.timing("sample_request", background=True):
                    answer = SampleAnswer.from_json(
                        self.client.post(
                            f"/api/v1/buffers/{self.buffer}/sample", body, timeout=self.client.timeout + 1.0
                        )
                    )
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
                self._stop.wait(min(1.0, 0.1 * 2**retries))  # bounded backoff
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
        cols = {
            k: [unpack_array(r[k], dtype) for r in refs]
            for k, dtype in (
                ("chunk", np.int64),
                ("row", np.int64),
                ("index", np.int64),
                ("uid", np.int64),
                ("weight", np.float32),
            )
        }
        local = np.concatenate(cols.pop("chunk"))
        if not self.load_rows:  # references only: each learner rank reads its own share of the rows
            flat = {k: np.concatenate(v) for k, v in cols.items()}
            flat["chunk"] = np.asarray(chunks, dtype=str)[local]
            parts = {k: np.split(v, np.cumsum([len(r) for r in cols["index"]])[:-1]) for k, v in flat.items()}
            return [{k: p[i] for k, p in parts.items()} for i in range(len(refs))]
        in_chunk = np.concatenate(cols.pop("row"))
        rows, keep = self._rows.gather(chunks, local, in_chunk)
        self.missing_rows += int(len(keep) - keep.sum())
        if rows is None:
            return []
        rows.update((k, np.concatenate(v)[keep]) for k, v in cols.items())
        lanes = self.lanes and "env_id" in rows
        if lanes:
            rows["env_id"], rows["_time"] = collector_lanes(chunks, local[keep], in_chunk[keep], rows["env_id"])
        ends = np.cumsum([len(r) for r in cols["index"]])
        cuts = np.cumsum(keep)[ends[:-1] - 1]  # kept rows before each batch boundary
        parts = {k: np.split(v, cuts) for k, v in rows.items()}
        batches = [
            batch for batch in ({k: p[i] for k, p in parts.items()} for i in range(len(refs))) if len(batch["index"])
        ]
        if lanes:  # each lane's rows in time order within the batch (the advantage recursions read them so)
            for batch in batches:
                order = np.argsort(batch.pop("_time"), kind="stable")
                batch.update((k, v[order]) for k, v in batch.items())
        return batches
