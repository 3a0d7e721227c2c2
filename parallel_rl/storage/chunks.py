"""Step-data chunks on the shared store: ``data/<name>.npz``, one per collector write, named by the
collector (a name from a message: checked by :func:`.names.check_name`), read by the learners and
checked (its header only) by the coordinator before it indexes the rows."""
from __future__ import annotations

import io
import posixpath
from typing import Any, Dict, List, Mapping

import numpy as np

from ..errors import StorageError, StorageFaultError
from .family import Family
from .formats import load_npz, npz_layout, read_npz, save_npz
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
        return read_npz(self.backend, self.path(name))

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

        Raises FileNotFoundError when it is not there, StorageError when it is not a chunk whose
        columns all have the same length and a plain dtype (a column of Python objects is refused: no
        learner could load it), StorageFaultError when the store fails the read."""
        path = self.path(name)
        return npz_layout(path, self.backend.readable(path))  # FileNotFoundError when absent

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
        return load_npz(path, io.BytesIO(data))
    except StorageError as exc:
        return exc
