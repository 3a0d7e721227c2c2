"""Frame stacks stored as single frames, rebuilt on read (DESIGN.md: "frame stacks are stored as single frames
and rebuilt on read").

A row of a frame-stacked env (ALE's 4x84x84 stacks) carries ``obs`` and ``next_obs``: 2 x 4 frames, of which
consecutive rows of a lane share all but one. A chunk of such rows is written *packed*:

- ``frame_pool`` (m, 84, 84) uint8: every distinct frame the chunk's rows need, once (a chunk-level column: its
  length is not the rows');
- ``obs_frames``, ``next_obs_frames`` (n, k) int32: for each row, the pool indices of its stacks' k frames, oldest first.

The pool is built from the stacks' contents (equal frames are one entry, compared byte for byte), so what is
rebuilt is exactly what the env gave, with no knowledge of lanes or episodes needed: the stack at an episode's
start (ALE pads it with blank frames) rebuilds like any other.

A self-contained chunk (:func:`pack_frames`) holds every frame its own rows refer to; the price is each lane's
k - 1 older frames and n - 1 look-ahead frames again in every chunk: 6 frames a lane for Pong's DQN, which on
the short chunks a learner-paced collector cuts (~64 rows of 10 lanes) doubled the bytes a transition (14 KB).
A collector's chunks are therefore packed by a :class:`FramePacker`, which lets a chunk refer to frames of the
collector's *previous* chunk (its ``frame_base``, always the chunk named just before it: ``<writer>-<seq - 1>``)
instead of storing them again: such references are negative indices, ``-1 - j`` for frame j of the base's own
pool. The store's chunk loader (:func:`parallel_rl.storage.chunks.load_chunk`) resolves them when it reads the
chunk and hands every reader a self-contained chunk; a base that is gone or damaged makes the chunk damaged
(quarantined like any other). The coordinator keeps a chunk's file while the chunk after it is indexed
(:meth:`parallel_rl.coordinator.replay.ReplayIndex.collect_garbage`), so eviction order cannot orphan a reference.

Chunks of envs that are not frame stacks (``EnvManager.frame_stack == 0``) are written as they were.

The serial pipeline's in-memory replay keeps frames once too, across pushes: :class:`FrameRing`.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional

import numpy as np

from ..storage.formats import FRAME_BASE_COLUMN, FRAMES_SUFFIX, POOL_COLUMN, STACKED_COLUMNS
from ..storage.names import chunk_name, parse_chunk_name
from .columns import Columns

# the store's names for them (its chunk loader checks a packed chunk's columns: parallel_rl.storage.chunks)
POOL = POOL_COLUMN  # the chunk's distinct frames (a chunk-level column: not one entry per row)
STACKS = STACKED_COLUMNS  # stacked columns; a packed chunk holds "<name>_frames" instead
SUFFIX = FRAMES_SUFFIX
BASE = FRAME_BASE_COLUMN  # the name of the chunk whose own pool a chunk's negative indices point into


def is_packed(columns: Mapping[str, np.ndarray]) -> bool:
    """Whether a chunk's columns are packed (its frame pool is there)."""
    return POOL in columns


def is_packed_rows(rows: Mapping[str, np.ndarray]) -> bool:
    """Whether rows gathered from packed chunks still need their stacks rebuilt."""
    return STACKS[0] + SUFFIX in rows


def pack_frames(columns: Mapping[str, np.ndarray]) -> Columns:
    """``columns`` with ``obs`` / ``next_obs`` frame stacks (n, k, H, W) replaced by pool indices and the pool: a
    self-contained chunk."""
    return _pack(columns, {})[0]


def _pack(columns: Mapping[str, np.ndarray], base: Mapping[bytes, int]):
    """(packed columns, the chunk's own pool as frame bytes -> index); a frame found in ``base`` (another chunk's
    own pool, frame bytes -> index j) is referred to as ``-1 - j`` instead of stored."""
    index: Dict[bytes, int] = {}
    pool = []
    out = {k: v for k, v in columns.items() if k not in STACKS}
    for name in STACKS:
        stacks = np.ascontiguousarray(columns[name])
        n, k = stacks.shape[:2]
        refs = np.empty(n * k, dtype=np.int32)  # one dtype whatever the pool's size: every chunk alike
        for i, frame in enumerate(stacks.reshape(n * k, -1)):
            key = frame.tobytes()  # the frame's bytes: equal frames (and only they) share an entry
            j = index.get(key)
            if j is None:
                b = base.get(key)
                if b is not None:
                    refs[i] = -1 - b
                    continue
                j = index[key] = len(pool)
                pool.append(frame)
            refs[i] = j
        out[name + SUFFIX] = refs.reshape(n, k)
    frame_shape = columns[STACKS[0]].shape[2:]
    dtype = np.asarray(columns[STACKS[0]]).dtype
    out[POOL] = np.stack(pool).reshape((len(pool),) + frame_shape) if pool else np.zeros((0,) + frame_shape, dtype)
    return out, index


class FramePacker:
    """Packs one collector's consecutive chunks, each referring to the frames of the chunk before it instead of
    storing them again (the module's docstring): about one frame a transition whatever the chunks' length.

    :meth:`pack` is given each chunk's name (``<writer>-<seq>``) before it is written and :meth:`written` once
    it is; a chunk refers only to the chunk named just before it, and only when that one was written (a failed
    write, or the first chunk, makes a self-contained chunk). :meth:`forget` starts over (a collector whose
    previous chunk may leave the store before the next one is read: an on-policy collector's new version)."""

    def __init__(self):
        self._last: Optional[tuple] = None  # (name, its own pool: frame bytes -> index) of the last chunk written
        self._packed: Optional[tuple] = None  # the same of the chunk packed and not written yet

    def pack(self, name: str, columns: Mapping[str, np.ndarray]) -> Columns:
        base_name, base = self._last if self._last is not None else (None, {})
        parsed = parse_chunk_name(name)
        if base_name is None or parsed is None or parsed[1] < 1 or base_name != chunk_name(parsed[0], parsed[1] - 1):
            base_name, base = None, {}
        out, index = _pack(columns, base)
        if base_name is not None and (not len(out[POOL]) or all((out[s + SUFFIX] >= 0).all() for s in STACKS)):
            out, index = _pack(columns, {})  # no frame of the base used, or none of its own: self-contained
            base_name = None
        if base_name is not None:
            out[BASE] = np.array([base_name])
        self._packed = (name, index)
        return out

    def written(self, name: str) -> None:
        """Chunk ``name`` (the last one packed) is on the store: the next chunk may refer to its frames."""
        if self._packed is not None and self._packed[0] == name:
            self._last, self._packed = self._packed, None

    def forget(self) -> None:
        self._last = self._packed = None


def unpack_frames(columns: Mapping[str, np.ndarray]) -> Columns:
    """A packed chunk's columns as rows again: ``obs`` and ``next_obs`` stacks rebuilt from its pool."""
    rows = {k: v for k, v in columns.items() if k != POOL}
    return rebuild_stacks(rows, [columns[POOL]], np.zeros(len(rows[STACKS[0] + SUFFIX]), dtype=np.int64))


def rebuild_stacks(rows: Columns, pools, owner: np.ndarray) -> Columns:
    """Rows gathered from packed chunks, ``obs`` and ``next_obs`` rebuilt: row i's indices point into
    ``pools[owner[i]]`` (its chunk's pool); the index columns are dropped."""
    out = {k: v for k, v in rows.items() if k not in {name + SUFFIX for name in STACKS}}
    chunks = np.unique(owner)
    for name in STACKS:
        refs = rows[name + SUFFIX]
        frame = pools[int(chunks[0])].shape[1:] if len(chunks) else ()
        dtype = pools[int(chunks[0])].dtype if len(chunks) else np.uint8
        stacks = np.empty(refs.shape + frame, dtype=dtype)
        for c in chunks.tolist():
            mine = owner == c
            stacks[mine] = pools[c][refs[mine]]
        out[name] = stacks
    return out


class FrameRing:
    """The frames of an in-memory replay (the serial pipeline's), each stored once: a ring of ``size`` frames
    with ids that only grow (the frame of id i sits at ``i % size``).

    :meth:`pack` swaps a batch's ``obs`` / ``next_obs`` stacks for frame ids, adding the frames not seen in
    the last ``recent`` frames (the stacks of consecutive steps share all but one frame; a lane's history spans
    a few pushes). Frames are matched by hash, then compared byte for byte (exact). A row whose frames the ring
    has lapped (``floor``) cannot be rebuilt: the buffer evicts such rows before writing over their frames."""

    def __init__(self, size: int, recent: int = 4096):
        self.size, self.recent = int(size), int(recent)
        self.frames: np.ndarray = np.zeros(0)
        self.next_id = 0
        self._seen: Dict[int, int] = {}  # hash of a frame's bytes -> its newest id

    @property
    def floor(self) -> int:
        """The oldest frame id still stored."""
        return max(0, self.next_id - self.size)

    def pack(self, columns: Mapping[str, np.ndarray]) -> Columns:
        """``columns`` with the stacks replaced by frame ids (``<name>_frames``, int64) and ``frame_floor`` (each
        row's oldest frame id); the new frames are in the ring when it returns."""
        first = np.asarray(columns[STACKS[0]])
        if not self.frames.size:
            self.frames = np.zeros((self.size,) + first.shape[2:], dtype=first.dtype)
        out = {k: v for k, v in columns.items() if k not in STACKS}
        for name in STACKS:
            stacks = np.ascontiguousarray(columns[name])
            n, k = stacks.shape[:2]
            ids = np.empty(n * k, dtype=np.int64)
            for i, frame in enumerate(stacks.reshape((n * k,) + stacks.shape[2:])):
                ids[i] = self._id_of(frame)
            out[name + SUFFIX] = ids.reshape(n, k)
        out["frame_floor"] = np.minimum(out["obs" + SUFFIX].min(axis=1), out["next_obs" + SUFFIX].min(axis=1))
        if len(self._seen) > 2 * self.recent:  # forget frames older than the window (they may be stored again)
            oldest = self.next_id - self.recent
            self._seen = {h: i for h, i in self._seen.items() if i >= oldest}
        return out

    def _id_of(self, frame: np.ndarray) -> int:
        key = hash(frame.tobytes())
        found = self._seen.get(key)
        if (
            found is not None
            and found >= max(self.floor, self.next_id - self.recent)
            and np.array_equal(self.frames[found % self.size], frame)
        ):
            return found
        new = self.next_id
        self.frames[new % self.size] = frame
        self.next_id += 1
        self._seen[key] = new
        return new

    def rebuild(self, rows: Columns) -> Columns:
        """Sampled rows with ``obs`` / ``next_obs`` stacks rebuilt from their frame ids."""
        out = {k: v for k, v in rows.items() if k != "frame_floor" and k not in {s + SUFFIX for s in STACKS}}
        for name in STACKS:
            out[name] = self.frames[rows[name + SUFFIX] % self.size]
        return out

    def state_dict(self) -> Dict[str, np.ndarray]:
        return {"frames/data": self.frames.copy(), "frames/next_id": np.array(self.next_id)}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        self.frames = np.array(state["frames/data"])
        self.next_id = int(state["frames/next_id"])
        self._seen = {}
