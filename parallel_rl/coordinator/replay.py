"""The coordinator's replay buffer: an index of references into chunk files.

Rows live in the chunk files on the shared disk; the index holds one row per
transition with columns ``chunk`` (chunk id), ``row`` and ``collect_iter``,
inside the same buffer classes the serial pipeline uses (priorities, IS
weights, ``max_use``, ``max_staleness``). When the buffer evicts the last row
of a chunk, the file is deleted after a grace period (a learner may still be
reading it). A chunk a learner found damaged (:meth:`ReplayIndex.quarantine`)
leaves the index at once and its file goes the same way.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..data.buffer import create_buffer
from ..errors import StorageError, StorageFaultError
from ..transport import pack_array, unpack_array
from ..storage import SharedStorage
from ..storage.names import chunk_name, parse_chunk_name

logger = logging.getLogger(__name__)


# the columns of a batch of references on the wire, and their packed dtypes
# a chunk file whose deletion failed on the shared store is tried again after this many seconds
GC_RETRY_SECONDS = 2.0

REF_DTYPES = {"chunk": "<i4", "row": "<i4", "index": "<i8", "uid": "<i8", "weight": "<f4"}


class ReplayIndex:
    def __init__(self, buffer_cfg, storage: SharedStorage, grace_seconds: float = 10.0, name: str = "default"):
        self.name = name
        self.storage = storage
        self.grace_seconds = grace_seconds
        self.buffer = create_buffer(buffer_cfg, on_evict=self._on_evict)
        self._lock = threading.RLock()
        self._pushed = threading.Condition(self._lock)
        # chunk name -> (chunk id, rows, policy version, worker id): a plain tuple, which the garbage collector
        # stops tracking, so that a full collection (which holds the GIL) does not walk tens of thousands
        # of them; the rows still referenced by the buffer are counted apart, by chunk id
        self._chunks: Dict[str, Tuple[int, int, int, str]] = {}
        self._names: Dict[int, str] = {}
        self._refs: Dict[int, int] = {}
        self._next_id = 0
        self._doomed: List[tuple] = []  # (delete_at, name)
        # chunks quarantined (their files are not kept for the chunk after them), and when each chunk no row
        # references any more is due for deletion (a learner may read its rows, and so its base's frames, until
        # then): both forgotten once the file is deleted
        self._quarantined: set = set()
        self._released: Dict[str, float] = {}
        self.chunks_deleted = 0
        self.batches_served = 0
        # chunks found damaged by a learner and dropped from the index, and the rows they took with them
        self.chunks_quarantined = 0
        self.rows_quarantined = 0

    # ---- push ----------------------------------------------------------------------
    def known(self, name: str) -> bool:
        """True when chunk ``name`` was indexed already.

        No lock: one dict lookup is atomic, and the answer may change as soon as it is returned either way
        (``add_chunks`` decides under the lock). Taking the lock here, once per announced chunk, made every
        metadata call queue behind every other one."""
        return name in self._chunks

    def add_chunk(self, name: str, size: int, policy_version: int, worker_id: str) -> bool:
        """Index a chunk file's rows; False when the chunk is already known (a retried message)."""
        return self.add_chunks([(name, size, policy_version)], worker_id)[0]

    def add_chunks(self, chunks: List[Tuple[str, int, int]], worker_id: str, checked: bool = False) -> List[bool]:
        """Index the rows of chunk files ``(name, size, policy_version)`` sent by ``worker_id``, in one push
        into the buffer (one lock, one priority-tree update for a whole metadata call); per chunk False when
        it is already known (a retried message, or named twice).

        ``checked``: the caller validated each name and read each file's header just now (the coordinator's
        message check), so the files are not looked for again."""
        for name, size, _ in chunks:
            if size <= 0:
                raise StorageError(f"chunk {name!r}: size must be > 0, got {size}")
            if not checked:
                path = self.storage.chunks.path(name)  # validates the name, refuses escapes
                if not self.known(name) and not self.storage.chunks.exists(name):
                    raise StorageError(f"chunk {name!r} announced but {path} does not exist on the shared disk")
        with self._lock:
            added, ids, sizes, versions = [], [], [], []
            for name, size, policy_version in chunks:
                added.append(name not in self._chunks)
                if not added[-1]:
                    continue
                chunk_id = self._next_id
                self._next_id += 1
                self._chunks[name] = (chunk_id, size, policy_version, worker_id)
                self._names[chunk_id] = name
                self._refs[chunk_id] = size
                ids.append(chunk_id)
                sizes.append(size)
                versions.append(policy_version)
            if ids:
                self.buffer.push(
                    {
                        "chunk": np.repeat(np.array(ids, dtype=np.int64), sizes),
                        "row": np.concatenate([np.arange(size, dtype=np.int32) for size in sizes]),
                        "collect_iter": np.repeat(np.array(versions, dtype=np.int64), sizes),
                    }
                )
                self._pushed.notify_all()
            return added

    def _on_evict(self, rows: Dict[str, np.ndarray]) -> None:
        ids, counts = np.unique(rows["chunk"], return_counts=True)
        delete_at = time.monotonic() + self.grace_seconds
        for chunk_id, count in zip(ids.tolist(), counts.tolist()):
            name = self._names.get(chunk_id)
            if name is None:
                continue
            self._refs[chunk_id] -= count
            if self._refs[chunk_id] <= 0:
                self._doomed.append((delete_at, name))
                self._released[name] = delete_at

    def quarantine(self, name: str) -> Optional[int]:
        """Drop chunk ``name``'s rows from the index: a learner could not read it (a damaged file, a column
        of Python objects, rows of another layout), so every batch that samples it would lose those rows
        again. Its file is deleted as an evicted chunk's is. Returns the rows dropped, or None when the chunk
        is not indexed or already leaving (quarantined before, or all its rows evicted): nothing to count."""
        with self._lock:
            entry = self._chunks.get(name)
            if entry is None or self._refs.get(entry[0], 0) <= 0:
                return None
            self._quarantined.add(name)
            rows = self.buffer.discard("chunk", [entry[0]])  # on_evict dooms the file
            self.chunks_quarantined += 1
            self.rows_quarantined += rows
            return rows

    def collect_garbage(self, force: bool = False) -> int:
        """Delete chunk files no row references any more (after the grace period), but not while the chunk its
        collector wrote next is indexed: that chunk may refer to this one's frames (``frame_base``,
        :mod:`parallel_rl.data.frames`), and the replay evicts this one first; nor until that chunk's own grace is
        over. Decided by the names alone (no file is read): a collector's newest evicted chunk outlives its rows
        until the next one's rows leave."""
        now = time.monotonic()
        with self._lock:
            due = [n for t, n in self._doomed if force or t <= now]
            self._doomed = [(t, n) for t, n in self._doomed if not (force or t <= now)]
            held = set() if force else {n for n in due if self._next_needs_it(n, now)}
            if held:
                self._doomed.extend((now + self.grace_seconds, n) for n in held)
                due = [n for n in due if n not in held]
        gone: List[str] = []
        for i, name in enumerate(due):
            try:
                if self.storage.chunks.delete(name):
                    self.chunks_deleted += 1
            except StorageFaultError as exc:
                # the store fails (read-only, EIO, an object store's 5xx): these chunks stay indexed and doomed
                # (and so in the snapshots) and are tried again; forgetting them first had leaked every one
                # due at that moment, hundreds after a resume
                logger.warning(
                    "coordinator: deleting %d chunk file(s) failed, trying again in %gs: %s",
                    len(due) - i,
                    GC_RETRY_SECONDS,
                    exc,
                )
                with self._lock:
                    self._doomed.extend((now + GC_RETRY_SECONDS, n) for n in due[i:])
                break
            gone.append(name)
        with self._lock:
            for name in gone:
                self._quarantined.discard(name)
                self._released.pop(name, None)
                entry = self._chunks.pop(name, None)
                if entry is not None:
                    self._names.pop(entry[0], None)
                    self._refs.pop(entry[0], None)
        return len(gone)

    def _next_needs_it(self, name: str, now: float) -> bool:
        """Whether a learner may still read rows of the chunk named after ``name`` in its collector's sequence
        (indexed, or its own grace not over), which may refer to ``name``'s frames; never for a quarantined
        ``name`` (a damaged chunk's frames rebuild nothing). Only rows need the base: a chunk kept for the one
        after it keeps no other."""
        parsed = parse_chunk_name(name)
        if parsed is None or name in self._quarantined:
            return False
        nxt = chunk_name(parsed[0], parsed[1] + 1)
        entry = self._chunks.get(nxt)
        if entry is None:
            return False
        return self._refs.get(entry[0], 0) > 0 or self._released.get(nxt, now) > now

    def remove_orphans(self, max_age: float) -> int:
        """Delete chunk files the index does not know and nobody wrote for ``max_age`` seconds: written by a
        collector killed before it announced them, or announced to a coordinator killed before its next
        snapshot (the soak, benchmarks/soak.py, found ~20 per coordinator kill). Returns the files removed."""
        cutoff, removed = time.time() - max_age, 0
        try:
            for name in self.storage.chunks.names():
                if self.known(name):
                    continue
                try:
                    if self.storage.chunks.mtime(name) > cutoff:
                        continue
                except FileNotFoundError:
                    continue
                with self._lock:  # not indexed in the meantime: add_chunks decides under this lock
                    if name not in self._chunks:
                        removed += self.storage.chunks.delete(name)
        except StorageFaultError as exc:  # the next sweep tries again
            logger.warning("coordinator: sweeping chunk files the replay index does not know failed: %s", exc)
        return removed

    # ---- sample --------------------------------------------------------------------
    def wait_for(self, predicate, timeout: float) -> bool:
        """Block until ``predicate()`` holds (re-checked on every push) or ``timeout`` passes."""
        with self._pushed:
            return self._pushed.wait_for(predicate, timeout=timeout)

    def wake_waiters(self) -> None:
        with self._pushed:
            self._pushed.notify_all()

    def sample(self, batch_size: int, batches: int, learner_iter: int, encoding: str = "json") -> Dict[str, Any]:
        """Up to ``batches`` batches of references, ready for JSON: ``{"chunks": [names], "batches": [...]}``.

        Each batch's ``chunk`` column indexes the shared ``chunks`` list. Numbers are JSON lists, or packed
        with ``encoding="base64"`` (see :func:`~parallel_rl.transport.pack_array`)."""
        encode = (lambda values, dtype: values.tolist()) if encoding == "json" else pack_array
        samples = []
        with self._lock:
            for _ in range(batches):
                s = self.buffer.sample(batch_size, learner_iter)
                if s is None:
                    break
                samples.append(s)
            self.batches_served += len(samples)
            if not samples:
                return {"chunks": [], "batches": []}
            ids, local = np.unique(np.concatenate([s["chunk"] for s in samples]), return_inverse=True)
            names = [self._names[i] for i in ids.tolist()]
        out, start = [], 0
        for s in samples:
            n = len(s["chunk"])
            columns = {
                "chunk": local[start : start + n],
                "row": s["row"],
                "index": s["index"],
                "uid": s["uid"],
                "weight": s["weight"] if "weight" in s else np.ones(n, dtype=np.float32),
            }
            out.append({k: encode(np.asarray(v, dtype=REF_DTYPES[k]), REF_DTYPES[k]) for k, v in columns.items()})
            start += n
        return {"chunks": names, "batches": out}

    def update_priorities(self, index: Any, uid: Any, priority: Any) -> None:
        """Priorities for sampled slots: lists of numbers or packed arrays; ValueError when malformed."""
        index, uid = unpack_array(index, np.int64), unpack_array(uid, np.int64)
        priority = unpack_array(priority, np.float64)
        if len(index) != len(uid) or len(index) != len(priority):
            raise ValueError(
                f"priorities: index/uid/priority lengths differ ({len(index)}, {len(uid)}, {len(priority)})"
            )
        if not np.isfinite(priority).all():  # one NaN would poison the whole sum tree
            raise ValueError("priorities must be finite numbers (is the learner's loss diverging?)")
        if len(index):
            self.buffer.update({"index": index, "uid": uid, "priority": priority})

    # ---- inspection / state ----------------------------------------------------------
    def count(self) -> int:
        return self.buffer.count()

    def stats(self) -> Dict[str, Any]:
        with self._lock:  # one snapshot: a quarantine between the buffer's size and its counters tore them apart
            s = self.buffer.stats()
            chunks, doomed = len(self._chunks), len(self._doomed)
            deleted, quarantined, rows_quarantined = self.chunks_deleted, self.chunks_quarantined, self.rows_quarantined
            batches_served = self.batches_served
        return {
            "name": self.name,
            "type": self.buffer.cfg.type,
            "size": s.size,
            "capacity": s.capacity,
            "pushed": s.pushed,
            "sampled": s.sampled,
            "evicted": s.evicted,
            # on-policy: rows dropped unused, too many policy versions old (or, async, pushed out of a full buffer)
            "dropped_stale": s.dropped_stale,
            "staleness": s.mean_staleness if not math.isnan(s.mean_staleness) else 0.0,
            "chunks": chunks,
            "chunks_pending_delete": doomed,
            "chunks_deleted": deleted,
            "chunks_quarantined": quarantined,
            "rows_quarantined": rows_quarantined,
            "batches_served": batches_served,
        }

    def state_dict(self) -> Dict[str, np.ndarray]:
        with self._lock:
            state = {f"buffer/{k}": v for k, v in self.buffer.state_dict().items()}
            entries = list(self._chunks.items())
            state["chunks/name"] = np.array([name for name, _ in entries], dtype=str)
            state["chunks/worker"] = np.array([e[3] for _, e in entries], dtype=str)
            state["chunks/ints"] = np.array(
                [[e[0], e[1], e[2], self._refs[e[0]]] for _, e in entries], dtype=np.int64
            ).reshape(-1, 4)
            state["chunks/next_id"] = np.array(self._next_id)
            state["chunks/quarantined"] = np.array([self.chunks_quarantined, self.rows_quarantined], dtype=np.int64)
            return state

    def load_state_dict(self, state: Dict[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict`. Chunks no row references any more (evicted, waiting out their deletion
        grace when the snapshot was taken) are doomed again, a whole grace from now: the deletion queue is not
        in the snapshot, and without this every resume leaked them."""
        with self._lock:
            self.buffer.load_state_dict({k[7:]: v for k, v in state.items() if k.startswith("buffer/")})
            self._chunks, self._names, self._refs = {}, {}, {}
            for name, worker, (cid, size, version, refs) in zip(
                state["chunks/name"].tolist(), state["chunks/worker"].tolist(), state["chunks/ints"].tolist()
            ):
                self._chunks[name] = (cid, size, version, worker)
                self._names[cid] = name
                self._refs[cid] = refs
            self._next_id = int(state["chunks/next_id"])
            delete_at = time.monotonic() + self.grace_seconds
            self._doomed = [(delete_at, name) for name, (cid, *_rest) in self._chunks.items() if self._refs[cid] <= 0]
            self._released = {name: delete_at for _, name in self._doomed}
            self._quarantined = set()
            if "chunks/quarantined" in state:  # snapshots from before quarantines were counted have none
                self.chunks_quarantined, self.rows_quarantined = (int(v) for v in state["chunks/quarantined"])
