"""Step-data chunks on the shared store: ``data/<name>.npz``, one per collector write, named by the
collector (a name from a message: checked by :func:`.names.check_name`), read by the learners and
checked (its headers only) by the coordinator before it indexes the rows.

Every chunk read from the store goes through one door, :func:`load_chunk` (its headers only:
:func:`chunk_layout`): it returns a chunk every reader can use as it is, or raises StorageError."""

from __future__ import annotations

import functools
import io
import math
import posixpath
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import StorageError, StorageFaultError
from .family import Family
from .formats import FRAME_BASE_COLUMN, FRAMES_SUFFIX, POOL_COLUMN, STACKED_COLUMNS, npz_arrays, open_npz, save_npz
from .health import store_op
from .names import CHUNK_DIR, CHUNK_SUFFIX, check_name, chunk_name, parse_chunk_name


class ChunkFiles(Family):
    noun = "chunk"

    def __init__(self, store):
        super().__init__(store, CHUNK_DIR)

    def relpath(self, name: str) -> str:
        return posixpath.join(CHUNK_DIR, check_name(name) + CHUNK_SUFFIX)

    def path(self, name: str) -> str:
        return self.store.resolve(self.relpath(name))

    @store_op("writing a chunk", write=True)
    def write(self, name: str, columns: Mapping[str, np.ndarray]) -> str:
        path = self.path(name)
        save_npz(self.backend, path, columns)
        return path

    @store_op("reading a chunk")
    def read(self, name: str, known: Optional[Callable[[str], Optional[np.ndarray]]] = None) -> "Chunk":
        """Chunk ``name``'s columns (:func:`load_chunk`; FileNotFoundError when it is not there). The frames of
        the chunk it refers to, if any, are ``known(base)`` (a reader's cache: that chunk's own pool, None when
        not at hand) or read from the store."""
        path = self.path(name)
        return load_chunk(path, self.backend.readable(path), lambda base: self._own_frames(base, known))

    def _own_frames(self, name: str, known: Optional[Callable[[str], Optional[np.ndarray]]] = None) -> np.ndarray:
        """Chunk ``name``'s own frame pool (:func:`chunk_frames`): a base another chunk refers to."""
        frames = None if known is None else known(name)
        if frames is not None:
            return frames
        path = self.path(name)
        return chunk_frames(path, self.backend.readable(path))

    @store_op("reading chunks")
    def read_many(
        self, names: List[str], known: Optional[Callable[[str], Optional[np.ndarray]]] = None
    ) -> Dict[str, Any]:
        """Several chunks at once: each one's columns, None for a chunk that is gone, the StorageError for one
        that is not a valid chunk (the others are read all the same); a fault of the store raises. Concurrent
        requests on an object store, where each request waits a round trip; one after the other on a local
        disk. ``known``: as :meth:`read`'s."""
        if not self.backend.remote:
            return {name: self._read_or_why(name, known) for name in names}
        if not names:  # fsspec's cat() of no paths raises FileNotFoundError([])
            return {}
        paths = {self.path(name): name for name in names}
        fetched = self.backend.read_many(list(paths))

        def own_frames(base: str) -> np.ndarray:  # a base fetched in the same round is not fetched again
            path = self.path(base)
            data = fetched.get(path)
            return self._own_frames(base, known) if data is None else chunk_frames(path, io.BytesIO(data))

        return {
            paths[path]: None if data is None else _decode_or_why(path, data, own_frames)
            for path, data in fetched.items()
        }

    def _read_or_why(self, name: str, known=None) -> Any:
        try:
            return self.read(name, known)
        except FileNotFoundError:
            return None
        except StorageFaultError:
            raise
        except StorageError as exc:
            return exc

    @store_op("looking for a chunk")
    def exists(self, name: str) -> bool:
        return self.backend.isfile(self.path(name))

    @store_op("reading a chunk's header")
    def layout(self, name: str) -> tuple:
        """``(rows, bytes, bytes per row)`` of chunk ``name``: its rows and its row size from its column
        headers (no data is read), and its file's size.

        Raises FileNotFoundError when it is not there, StorageError when its headers are not a chunk's
        (:func:`chunk_layout`), StorageFaultError when the store fails the read."""
        path = self.path(name)
        return chunk_layout(path, self.backend.readable(path))  # FileNotFoundError when absent

    @store_op("looking at a chunk's size")
    def size(self, name: str) -> int:
        """The size in bytes of chunk ``name``'s file (FileNotFoundError when absent): one ``lstat`` (a HEAD
        request on an object store); a link is not followed."""
        return self.backend.size(self.relpath(name))

    @store_op("deleting a chunk")
    def delete(self, name: str) -> bool:
        return self.backend.unlink(self.path(name))

    @store_op("reading a chunk's modification time")
    def mtime(self, name: str) -> float:
        """When chunk ``name``'s file was written (seconds since the epoch; FileNotFoundError when absent)."""
        return self.backend.mtime(self.path(name))

    @store_op("listing chunks")
    def names(self) -> List[str]:
        return sorted(
            f[: -len(CHUNK_SUFFIX)]
            for f in self.backend.listdir(self.directory)
            if f.endswith(CHUNK_SUFFIX) and not f.startswith(".")
        )  # not temp files


def _decode_or_why(path: str, data: bytes, own_frames: Callable[[str], np.ndarray]) -> Any:
    """A fetched chunk's columns, or the StorageError when it is not a valid chunk (the others are good)."""
    try:
        return load_chunk(path, io.BytesIO(data), own_frames)
    except StorageError as exc:
        return exc


# the dtypes a chunk's columns may have: numbers, bool, bytes and str (never objects, records or times)
COLUMN_KINDS = "biufcSU"
PACKED_COLUMNS = frozenset({POOL_COLUMN} | {name + FRAMES_SUFFIX for name in STACKED_COLUMNS})
# a chunk's columns that are not one entry a row: its frame pool, and the name of the chunk it refers to for frames
CHUNK_COLUMNS = frozenset({POOL_COLUMN, FRAME_BASE_COLUMN})
KIND = "a valid step-data chunk"


class Chunk(dict):
    """A chunk's columns (name -> array) as :func:`load_chunk` hands them out. ``own_frames``: how many of its
    frame pool's frames, the first, its own file holds (the others came from the chunk it refers to): the frames
    the chunk after it may refer to (a reader that caches the pool passes them back: ``ChunkFiles.read``'s
    ``known``); 0 for a chunk without frames."""

    own_frames = 0


def load_chunk(path: str, source: Any, own_frames: Optional[Callable[[str], np.ndarray]] = None) -> Chunk:
    """The columns of the chunk at ``path`` (read from ``source``: a local path, or the object's bytes already
    fetched), as every reader can use them: the one door a chunk comes in by.

    Checked before its data is read: every member an uncompressed ``.npy`` array whose header's size is what the
    zip stores for it (:func:`.formats.npz_arrays`: what is allocated is bounded by the file's size), of a plain
    dtype (:data:`COLUMN_KINDS`), all but the chunk-level columns (:data:`CHUNK_COLUMNS`) of the same number
    (>= 1) of rows; a packed chunk (:mod:`parallel_rl.data.frames`) with its pool (>= 1 frame) and both index
    columns (integers, one row of indices each), and a ``frame_base`` only in a packed chunk, one str; once
    read, every frame index inside the pool, and a ``frame_base`` naming the chunk just before this one
    (``<writer>-<seq - 1>``).

    A chunk with a ``frame_base`` is resolved: ``own_frames(name)`` gives that chunk's own pool (read through
    :func:`chunk_frames`), its negative indices must fall inside it, and the chunk comes back self-contained (the
    frames it uses appended to its pool, its indices remapped, no ``frame_base``), so readers never see a
    reference. A base that is gone (FileNotFoundError) or damaged (StorageError), or no ``own_frames``, is this
    chunk's damage.

    StorageError naming the file and what is wrong for any damage whatever (any exception its parsing raises:
    :func:`.formats.open_npz`), FileNotFoundError when it is not there, the store's own OSError (or
    StorageFaultError) when the store fails the read, its own or its base's."""
    columns = Chunk(open_npz(path, source, functools.partial(_columns, path), KIND))
    columns.own_frames = len(columns.get(POOL_COLUMN, ()))
    if FRAME_BASE_COLUMN not in columns:
        return columns
    base = str(columns.pop(FRAME_BASE_COLUMN)[0])
    try:
        if own_frames is None:
            raise StorageError("no store to read it from was given")
        pool = own_frames(base)
    except StorageFaultError:
        raise
    except FileNotFoundError:
        raise StorageError(
            f"{path}: not {KIND} (its frames refer to chunk {base!r}, which is not on the store: "
            f"the chunk cannot be rebuilt)"
        ) from None
    except StorageError as exc:
        raise StorageError(
            f"{path}: not {KIND} (its frames refer to chunk {base!r}, which cannot be read: "
            f"{' '.join(str(exc).split())[:300]})"
        ) from exc
    try:
        return _resolve(columns, base, pool)
    except Exception as exc:  # noqa: BLE001 (any exception of resolving it is the chunk's damage, as open_npz's)
        why = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        raise StorageError(f"{path}: not {KIND} ({why})") from exc


def chunk_frames(path: str, source: Any) -> np.ndarray:
    """The own frame pool of the packed chunk at ``path`` (its base not resolved): checked as :func:`load_chunk`
    checks it; StorageError when it is damaged or not packed, FileNotFoundError when it is not there."""
    columns = open_npz(path, source, functools.partial(_columns, path), KIND)
    if POOL_COLUMN not in columns:
        raise StorageError(f"{path}: not {KIND} with frames (no {POOL_COLUMN!r})")
    return columns[POOL_COLUMN]


def chunk_layout(path: str, source: Any) -> Tuple[int, int, int]:
    """``(rows, bytes, bytes per row)`` of the chunk at ``path`` from its headers only (no data is read): what
    :func:`load_chunk` checks before it reads, and its file's size. A packed chunk's bytes per row are 0: its
    size is not fixed bytes plus bytes per row (its pool varies), so its rows cannot be counted by size."""

    def layout(f, nbytes: int) -> Tuple[int, int, int]:
        headers = npz_arrays(f, nbytes, headers_only=True)
        rows, row_bytes = _check_columns(headers)
        return rows, nbytes, 0 if POOL_COLUMN in headers else row_bytes

    return open_npz(path, source, layout, KIND)


def _columns(path: str, f, nbytes: int) -> Dict[str, np.ndarray]:
    columns = npz_arrays(f, nbytes)
    _check_columns({name: (column.shape, column.dtype) for name, column in columns.items()})
    if POOL_COLUMN in columns:
        frames = len(columns[POOL_COLUMN])
        floor = 0
        if FRAME_BASE_COLUMN in columns:
            base = str(columns[FRAME_BASE_COLUMN][0])
            own = parse_chunk_name(posixpath.basename(path)[: -len(CHUNK_SUFFIX)])
            if own is None or own[1] < 1 or base != chunk_name(own[0], own[1] - 1):
                raise ValueError(
                    f"its frames refer to chunk {base[:140]!r}; a chunk may only refer to the chunk its "
                    f"collector wrote just before it"
                )
            floor = None  # negative indices point into the base's pool: checked when it is read (_resolve)
        for name in STACKED_COLUMNS:
            refs = columns[name + FRAMES_SUFFIX]
            low, high = int(refs.min()), int(refs.max())  # at least one row: never empty
            if (floor is not None and low < floor) or high >= frames:
                raise ValueError(
                    f"column {name + FRAMES_SUFFIX!r} points at frame {high if high >= frames else low} "
                    f"of a pool of {frames}"
                )
    return columns


def _resolve(columns: Chunk, base: str, base_pool: np.ndarray) -> Chunk:
    """A chunk whose negative frame indices point into ``base_pool`` (chunk ``base``'s own pool), self-contained:
    the base frames it uses appended to its own pool, its indices remapped. ValueError when they do not fit."""
    own = columns[POOL_COLUMN]
    if base_pool.shape[1:] != own.shape[1:] or base_pool.dtype != own.dtype:
        raise ValueError(
            f"its frames are {own.dtype}{list(own.shape[1:])}, those of chunk {base!r} it refers to "
            f"{base_pool.dtype}{list(base_pool.shape[1:])}"
        )
    refs = [columns[name + FRAMES_SUFFIX].astype(np.int64) for name in STACKED_COLUMNS]  # any integer dtype
    low = min(int(r.min()) for r in refs)
    if low < -len(base_pool):
        raise ValueError(f"it points at frame {-1 - low} of chunk {base!r}, whose pool holds {len(base_pool)}")
    used = np.unique(np.concatenate([-1 - r[r < 0] for r in refs]))
    out = Chunk(columns)
    out.own_frames = len(own)
    out[POOL_COLUMN] = np.concatenate([own, base_pool[used]])
    # the writer's int32 (what every self-contained chunk has), wide enough for the pool whatever the file's dtype
    dtype = np.int32 if len(out[POOL_COLUMN]) <= np.iinfo(np.int32).max else np.int64
    for name, r in zip(STACKED_COLUMNS, refs):
        out[name + FRAMES_SUFFIX] = np.where(r < 0, len(own) + np.searchsorted(used, -1 - r), r).astype(dtype)
    return out


def _check_columns(columns: Mapping[str, Tuple[tuple, np.dtype]]) -> Tuple[int, int]:
    """``(rows, bytes per row)`` of a chunk whose columns have these ``(shape, dtype)``; ValueError when they are
    not a chunk's."""
    for name, (shape, dtype) in columns.items():
        if dtype.kind not in COLUMN_KINDS:
            raise ValueError(f"column {name!r} has dtype {dtype}; chunks hold numeric, bool or str columns")
    rows = {name: shape for name, (shape, _) in columns.items() if name not in CHUNK_COLUMNS}
    lengths = sorted({shape[0] if shape else -1 for shape in rows.values()})
    if len(lengths) != 1 or lengths[0] < 1:
        raise ValueError(f"columns of different or no lengths {lengths} (each a row per entry, at least one)")
    packed = PACKED_COLUMNS & set(columns)
    if packed and packed != PACKED_COLUMNS:
        raise ValueError(f"a packed chunk without {sorted(PACKED_COLUMNS - packed)} (it has {sorted(packed)})")
    if FRAME_BASE_COLUMN in columns:
        shape, dtype = columns[FRAME_BASE_COLUMN]
        if not packed or dtype.kind != "U" or shape != (1,):
            raise ValueError(
                f"column {FRAME_BASE_COLUMN!r} is {dtype}{list(shape)}"
                f"{'' if packed else ' in a chunk without frames'}; it is one str, in a packed chunk"
            )
    if packed:
        if len(columns[POOL_COLUMN][0]) < 1 or columns[POOL_COLUMN][0][0] < 1:
            raise ValueError(f"a frame pool of shape {columns[POOL_COLUMN][0]}: no frames")
        for name in STACKED_COLUMNS:
            shape, dtype = columns[name + FRAMES_SUFFIX]
            if dtype.kind not in "iu" or len(shape) != 2:
                raise ValueError(
                    f"column {name + FRAMES_SUFFIX!r} is {dtype}{list(shape)}; frame indices are "
                    f"integers, one row of them per row"
                )
    return lengths[0], sum(
        dtype.itemsize * math.prod(shape[1:]) for name, (shape, dtype) in columns.items() if name not in CHUNK_COLUMNS
    )
