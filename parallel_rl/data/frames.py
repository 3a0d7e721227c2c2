"""Frame stacks stored as single frames, rebuilt on read (DESIGN.md: "frame stacks are stored as single frames
and rebuilt on read").

A row of a frame-stacked env (ALE's 4x84x84 stacks) carries ``obs`` and ``next_obs``: 2 x 4 frames, of which
consecutive rows of a lane share all but one. A chunk of such rows is written *packed*:

- ``frame_pool`` (m, 84, 84) uint8: every distinct frame the chunk's rows need, once (a chunk-level column: its
  length is not the rows');
- ``obs_frames``, ``next_obs_frames`` (n, k) int32: for each row, the pool indices of its stacks' k frames, oldest first.

The pool is built from the stacks' contents (equal frames are one entry, compared byte for byte), so what is
rebuilt is exactly what the env gave, with no knowledge of lanes or episodes needed: the stack at an episode's
start (ALE pads it with blank frames) and a row whose history began in the previous chunk of its lane rebuild
like any other, because every chunk holds every frame its own rows refer to. The price of that is each lane's
k - 1 older frames at the start of each chunk (and an episode's first frames): with 8 lanes, stacks of 4 and
320-row chunks, ~8 % over one frame a transition. n-step rows (``next_obs`` n steps on) need nothing else.

Chunks of envs that are not frame stacks (``EnvManager.frame_stack == 0``) are written as they were.

The serial pipeline's in-memory replay keeps frames once too, across pushes: :class:`FrameRing`.
"""
from __future__ import annotations

from typing import Dict, Mapping

import numpy as np

from ..storage.formats import FRAMES_SUFFIX, POOL_COLUMN, STACKED_COLUMNS
from .columns import Columns

# the store's names for them (its chunk loader checks a packed chunk's columns: parallel_rl.storage.chunks)
POOL = POOL_COLUMN  # the chunk's distinct frames (a chunk-level column: not one entry per row)
STACKS = STACKED_COLUMNS  # stacked columns; a packed chunk holds "<name>_frames" instead
SUFFIX = FRAMES_SUFFIX


def is_packed(columns: Mapping[str, np.ndarray]) -> bool:
    """Whether a chunk's columns are packed (its frame pool is there)."""
    return POOL in columns


def is_packed_rows(rows: Mapping[str, np.ndarray]) -> bool:
    """Whether rows gathered from packed chunks still need their stacks rebuilt."""
    return STACKS[0] + SUFFIX in rows


def pack_frames(columns: Mapping[str, np.ndarray]) -> Columns:
    """``columns`` with ``obs`` / ``next_obs`` frame stacks (n, k, H, W) replaced by pool indices and the pool."""
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
                j = index[key] = len(pool)
                pool.append(frame)
            refs[i] = j
        out[name + SUFFIX] = refs.reshape(n, k)
    frame_shape = columns[STACKS[0]].shape[2:]
    out[POOL] = np.stack(pool).reshape((len(pool),) + frame_shape)
    return out


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
        if (found is not None and found >= max(self.floor, self.next_id - self.recent)
                and np.array_equal(self.frames[found % self.size], frame)):
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
