"""Step-data chunks on the shared store: ``data/<name>.npz``, one per collector write, named by the
collector (a name from a message: checked by :func:`.names.check_name`), read by the learners and
checked (its headers only) by the coordinator before it indexes the rows.

Every chunk read from the store goes through one door, :func:`load_chunk` (its headers only:
:func:`chunk_layout`): it returns a chunk every reader can use as it is, or raises StorageError."""
from __future__ import annotations

import io
import math
import posixpath
from typing import Any, Dict, List, Mapping, Tuple

import numpy as np

from ..errors import StorageError, StorageFaultError
from .family import Family
from .formats import FRAMES_SUFFIX, POOL_COLUMN, STACKED_COLUMNS, npz_arrays, open_npz, save_npz
from .health import store_op
from .names import CHUNK_DIR, CHUNK_SUFFIX, check_name


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
    def read(self, name: str) -> Dict[str, np.ndarray]:
        """Chunk ``name``'s columns (:func:`load_chunk`; FileNotFoundError when it is not there)."""
        path = self.path(name)
        return load_chunk(path, self.backend.readable(path))

    @store_op("reading chunks")
    def read_many(self, names: List[str]) -> Dict[str, Any]:
        """Several chunks at once: each one's columns, None for a chunk that is gone, the StorageError for one
        that is not a valid chunk (the others are read all the same); a fault of the store raises. Concurrent
        requests on an object store, where each request waits a round trip; one after the other on a local
        disk."""
        if not self.backend.remote:
            return {name: self._read_or_why(name) for name in names}
        if not names:  # fsspec's cat() of no paths raises FileNotFoundError([])
            return {}
        paths = {self.path(name): name for name in names}
        return {paths[path]: None if data is None else _decode_or_why(path, data)
                for path, data in self.backend.read_many(list(paths)).items()}

    def _read_or_why(self, name: str) -> Any:
        try:
            return self.read(name)
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
        return sorted(f[: -len(CHUNK_SUFFIX)] for f in self.backend.listdir(self.directory)
                      if f.endswith(CHUNK_SUFFIX) and not f.startswith("."))  # not temp files


def _decode_or_why(path: str, data: bytes) -> Any:
    """A fetched chunk's columns, or the StorageError when it is not a valid chunk (the others are good)."""
    try:
        return load_chunk(path, io.BytesIO(data))
    except StorageError as exc:
        return exc


# the dtypes a chunk's columns may have: numbers, bool, bytes and str (never objects, records or times)
COLUMN_KINDS = "biufcSU"
PACKED_COLUMNS = frozenset({POOL_COLUMN} | {name + FRAMES_SUFFIX for name in STACKED_COLUMNS})


def load_chunk(path: str, source: Any) -> Dict[str, np.ndarray]:
    """The columns of the chunk at ``path`` (read from ``source``: a local path, or the object's bytes already
    fetched), as every reader can use them: the one door a chunk comes in by.

    Checked before its data is read: every member an uncompressed ``.npy`` array whose header's size is what the
    zip stores for it (:func:`.formats.npz_arrays`: what is allocated is bounded by the file's size), of a plain
    dtype (:data:`COLUMN_KINDS`), all but the frame pool of the same number (>= 1) of rows; a packed chunk
    (:mod:`parallel_rl.data.frames`) with its pool and both index columns (integers, one row of indices each);
    and once read, every frame index inside the pool. StorageError naming the file and what is wrong for any
    damage whatever (any exception its parsing raises: :func:`.formats.open_npz`), FileNotFoundError when it is
    not there, the store's own OSError when the store fails the read."""
    return open_npz(path, source, _columns, "a valid step-data chunk")


def chunk_layout(path: str, source: Any) -> Tuple[int, int, int]:
    """``(rows, bytes, bytes per row)`` of the chunk at ``path`` from its headers only (no data is read): what
    :func:`load_chunk` checks before it reads, and its file's size. A packed chunk's bytes per row are 0: its
    size is not fixed bytes plus bytes per row (its pool varies), so its rows cannot be counted by size."""
    def layout(f, nbytes: int) -> Tuple[int, int, int]:
        headers = npz_arrays(f, nbytes, headers_only=True)
        rows, row_bytes = _check_columns(headers)
        return rows, nbytes, 0 if POOL_COLUMN in headers else row_bytes

    return open_npz(path, source, layout, "a valid step-data chunk")


def _columns(f, nbytes: int) -> Dict[str, np.ndarray]:
    columns = npz_arrays(f, nbytes)
    _check_columns({name: (column.shape, column.dtype) for name, column in columns.items()})
    if POOL_COLUMN in columns:
        frames = len(columns[POOL_COLUMN])
        for name in STACKED_COLUMNS:
            refs = columns[name + FRAMES_SUFFIX]
            low, high = int(refs.min()), int(refs.max())  # at least one row: never empty
            if low < 0 or high >= frames:
                raise ValueError(f"column {name + FRAMES_SUFFIX!r} points at frame {high if high >= frames else low} "
                                 f"of a pool of {frames}")
    return columns


def _check_columns(columns: Mapping[str, Tuple[tuple, np.dtype]]) -> Tuple[int, int]:
    """``(rows, bytes per row)`` of a chunk whose columns have these ``(shape, dtype)``; ValueError when they are
    not a chunk's."""
    for name, (shape, dtype) in columns.items():
        if dtype.kind not in COLUMN_KINDS:
            raise ValueError(f"column {name!r} has dtype {dtype}; chunks hold numeric, bool or str columns")
    rows = {name: shape for name, (shape, _) in columns.items() if name != POOL_COLUMN}
    lengths = sorted({shape[0] if shape else -1 for shape in rows.values()})
    if len(lengths) != 1 or lengths[0] < 1:
        raise ValueError(f"columns of different or no lengths {lengths} (each a row per entry, at least one)")
    packed = PACKED_COLUMNS & set(columns)
    if packed and packed != PACKED_COLUMNS:
        raise ValueError(f"a packed chunk without {sorted(PACKED_COLUMNS - packed)} (it has {sorted(packed)})")
    if packed:
        if len(columns[POOL_COLUMN][0]) < 1 or columns[POOL_COLUMN][0][0] < 1:
            raise ValueError(f"a frame pool of shape {columns[POOL_COLUMN][0]}: no frames")
        for name in STACKED_COLUMNS:
            shape, dtype = columns[name + FRAMES_SUFFIX]
            if dtype.kind not in "iu" or len(shape) != 2:
                raise ValueError(f"column {name + FRAMES_SUFFIX!r} is {dtype}{list(shape)}; frame indices are "
                                 f"integers, one row of them per row")
    return lengths[0], sum(dtype.itemsize * math.prod(shape[1:]) for name, (shape, dtype) in columns.items()
                           if name != POOL_COLUMN)
