"""The file formats of the shared store: step-data columns as ``.npz`` (never unpickled), checkpoints as
``torch.save`` of a state dict (loaded with ``weights_only=True``). A backend (:mod:`.backends`) moves the
bytes; this module encodes and decodes them."""
from __future__ import annotations

import errno
import functools
import io
import math
import os
import zipfile
from typing import Any, Dict, Mapping

import numpy as np

from ..errors import StorageError
from .backends import LocalBackend, atomic_write

# a packed chunk's frame pool (parallel_rl.data.frames.POOL), the one column whose length is not the rows'
POOL_COLUMN = "frame_pool"
# the longest .npy column header a chunk may have (numpy's default limit for untrusted files)
NPY_MAX_HEADER = 10000
# errors of the store that say the thing at a chunk's name is not a file: retrying cannot help, so the chunk is
# bad (StorageError), not the store failing (StorageFaultError). Every other errno (EIO, ESTALE, EMFILE, ENFILE,
# EACCES, ENOTDIR, ...) is a fault of the store: it may pass, or an operator repairs it, and then the same read
# works (a permission or a directory is the store's, not the file's content)
NOT_A_FILE_ERRNOS = frozenset({errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG})


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> memoryview:
    """Columns as an uncompressed ``.npz`` in memory (object arrays are refused)."""
    for name, arr in arrays.items():
        if np.asarray(arr).dtype == object:
            raise StorageError(f"column {name!r} has dtype object; only plain numeric/bool/str arrays are stored")
    buffer = io.BytesIO()  # zipfile writes member by member with seeks; the disk gets one write
    np.savez(buffer, **arrays)
    return buffer.getbuffer()


def save_npz(backend, path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Write columns to ``path`` through ``backend``: one atomic write (a temp file renamed, or one PUT)."""
    data = npz_bytes(arrays)
    backend.write_atomic(path, lambda f: f.write(data))


def atomic_save_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Save columns as an uncompressed ``.npz`` atomically on a local disk (object arrays are refused)."""
    data = npz_bytes(arrays)
    atomic_write(path, lambda f: f.write(data))


def load_npz(path: str, source: Any = None) -> Dict[str, np.ndarray]:
    """Load every array of an ``.npz`` (from ``source``, a file object, when given) without ever unpickling."""
    try:
        with np.load(path if source is None else source, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno is not None and exc.errno not in NOT_A_FILE_ERRNOS:  # the store failed us: the file may be fine
            raise
        raise StorageError(f"{path}: not a valid step-data chunk ({exc})") from exc
    except (ValueError, zipfile.BadZipFile) as exc:
        raise StorageError(f"{path}: not a valid step-data chunk ({exc})") from exc


def read_npz(backend, path: str) -> Dict[str, np.ndarray]:
    """The columns at ``path`` through ``backend`` (FileNotFoundError when absent)."""
    return load_npz(path, backend.readable(path))


def _npy_header(f) -> bytes:
    """The header of the ``.npy`` file open in ``f``, as bytes: magic string and version, the header's length
    (2 bytes in format 1.0, 4 in 2.0 and 3.0: NEP 1) and the header itself; numpy parses it (:func:`_npy_layout`)."""
    head = f.read(np.lib.format.MAGIC_LEN)
    length = f.read(2 if head[6:7] == b"\x01" else 4)
    size = int.from_bytes(length, "little")
    if size > NPY_MAX_HEADER:  # numpy's own limit: a damaged length must not make us read the whole column
        raise ValueError(f"a .npy header of {size} bytes (at most {NPY_MAX_HEADER})")
    return head + length + f.read(size)


@functools.lru_cache(maxsize=1024)
def _npy_layout(header: bytes) -> tuple:
    """(rows, bytes per row) of the array whose ``.npy`` header is ``header`` (rows -1 for a scalar), parsed by
    numpy (ValueError when it is not one). Cached: a collector's chunks repeat a few headers, and parsing one
    (``ast.literal_eval``) cost the coordinator more than the rest of a chunk's announcement."""
    f = io.BytesIO(header)
    version = np.lib.format.read_magic(f)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read_header(f, max_header_size=NPY_MAX_HEADER)
    if dtype.hasobject:  # Python objects: loading them would unpickle (we never do): no learner could read it
        raise ValueError(f"a column of dtype {dtype} (Python objects); chunks hold numeric, bool or str columns")
    return (shape[0], dtype.itemsize * math.prod(shape[1:])) if shape else (-1, 0)


def npz_layout(path: str, source: Any) -> tuple:
    """``(rows, bytes, bytes per row)`` of the ``.npz`` at ``path``, read from ``source`` (a local path or the
    object's bytes already fetched): its rows and row size from its column headers (no data is read), and its
    size. StorageError when it is not a chunk whose columns all have the same length and a plain dtype."""
    lengths, row_bytes, pooled = set(), 0, False
    try:
        nbytes = os.stat(source).st_size if isinstance(source, str) else len(source.getbuffer())
        with zipfile.ZipFile(source) as archive:
            for member in archive.infolist():
                with archive.open(member) as f:
                    rows, per_row = _npy_layout(_npy_header(f))  # the header only, never the data
                if member.filename == POOL_COLUMN + ".npy":  # a chunk-level column (parallel_rl.data.frames): any length
                    pooled = True
                    continue
                lengths.add(rows)
                row_bytes += per_row
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno is not None and exc.errno not in NOT_A_FILE_ERRNOS:  # the store failed us, not the file
            raise
        raise StorageError(f"{path}: not a valid step-data chunk ({exc})") from exc
    except (ValueError, zipfile.BadZipFile) as exc:
        raise StorageError(f"{path}: not a valid step-data chunk ({exc})") from exc
    if len(lengths) != 1 or min(lengths) < 0:
        raise StorageError(f"{path}: columns of different or no lengths {sorted(lengths)}; not a chunk")
    # a packed chunk's size is not fixed bytes plus bytes per row (its pool varies): no row size to count by
    return lengths.pop(), nbytes, 0 if pooled else row_bytes


def torch_save_atomic(path: str, state: Mapping, backend=LocalBackend) -> None:
    """``torch.save`` of ``state`` to ``path`` in one atomic, durable write."""
    import torch

    # checkpoints promise durability: fsynced on a local disk (an object PUT is durable when it returns)
    backend.write_atomic(path, lambda f: torch.save(dict(state), f), durable=True)


def torch_load(path: str, backend=LocalBackend) -> Dict:
    """The state dict at ``path``, loaded with ``weights_only=True`` (FileNotFoundError when absent)."""
    import torch

    source = backend.readable(path)  # FileNotFoundError when absent
    try:
        return torch.load(source, map_location="cpu", weights_only=True)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) or exc.errno is not None:  # not there, or the store failed us
            raise
        raise StorageError(f"{path}: not a loadable checkpoint ({type(exc).__name__}: {exc})") from exc
    except Exception as exc:  # torch raises many types for corrupt or unsafe files
        raise StorageError(f"{path}: not a loadable checkpoint ({type(exc).__name__}: {exc})") from exc
