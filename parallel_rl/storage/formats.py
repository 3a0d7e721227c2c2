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
from typing import Any, Callable, Dict, Mapping, Optional

import numpy as np

from ..errors import StorageError
from .backends import LocalBackend, atomic_write

# a packed chunk's columns (parallel_rl.data.frames): its frame pool, the one column whose length is not the
# rows', and for each stacked column (obs, next_obs) "<name>_frames", its rows' indices into the pool
POOL_COLUMN = "frame_pool"
STACKED_COLUMNS = ("obs", "next_obs")
FRAMES_SUFFIX = "_frames"
# a packed chunk may refer to frames of the chunk its collector wrote just before it instead of storing them again:
# "frame_base" (one str: that chunk's name) says which, and its index columns' negative entries -1 - j are frame j
# of that chunk's own pool (parallel_rl.data.frames.FramePacker; resolved by storage.chunks.load_chunk)
FRAME_BASE_COLUMN = "frame_base"
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


def open_npz(path: str, source: Any, parse: Callable[[Any, int], Any], kind: str) -> Any:
    """``parse(file, nbytes)`` of the ``.npz`` at ``path``, read from ``source`` (a local path, or the object's bytes
    already fetched, as a BytesIO): the door every ``.npz`` read from the shared store goes through.

    Whatever a damaged file makes the parser raise (zipfile's, numpy's and our own ValueErrors, EOFError, an
    IndexError, a MemoryError: any exception) is the file's damage: StorageError naming the file as not ``kind``.
    A fault of the store (an OSError with an errno other than :data:`NOT_A_FILE_ERRNOS`) raises as it is, and so
    does FileNotFoundError (not there); but EINVAL while parsing is the file's: the seek to a negative offset that
    a damaged zip directory asks for (it used to be taken for a fault of the store, and made it unhealthy)."""
    try:
        if isinstance(source, str):
            with open(source, "rb") as f:  # its size from the file opened: a file replaced meanwhile is not mixed up
                nbytes = os.fstat(f.fileno()).st_size
                try:
                    return parse(f, nbytes)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    raise ValueError(f"a seek the file's offsets ask for fails ({exc})") from exc
        return parse(source, source.getbuffer().nbytes)
    except (FileNotFoundError, StorageError):
        raise
    except OSError as exc:
        if exc.errno is not None and exc.errno not in NOT_A_FILE_ERRNOS:  # the store failed us: the file may be fine
            raise
        raise StorageError(f"{path}: not {kind} ({exc})") from exc
    except Exception as exc:  # noqa: BLE001 (any exception of the parser is the file's damage)
        why = str(exc) if isinstance(exc, (ValueError, zipfile.BadZipFile)) else f"{type(exc).__name__}: {exc}"
        raise StorageError(f"{path}: not {kind} ({why})") from exc


def npz_arrays(f, nbytes: int, headers_only: bool = False) -> Dict[str, Any]:
    """Every array of the ``.npz`` open in ``f`` (``nbytes`` long): name -> array, or with ``headers_only`` name ->
    ``(shape, dtype)`` and no data read.

    Each member is checked before a byte of its data is read: a ``.npy`` array of a plain dtype (never Python
    objects: nothing is unpickled), stored uncompressed (as :func:`numpy.savez` writes), no name twice, its
    header's shape x itemsize exactly the bytes the zip stores for it, and the members' stored bytes together no
    more than the file's: what a read allocates is bounded by the file's size, whatever the headers say.
    ValueError saying what is wrong (or whatever zipfile raises on a damaged zip: see :func:`open_npz`)."""
    arrays: Dict[str, Any] = {}
    stored = 0
    with zipfile.ZipFile(f) as archive:
        for member in archive.infolist():
            if not member.filename.endswith(".npy"):
                raise ValueError(f"member {member.filename!r} is not a .npy array")
            name = member.filename[: -len(".npy")]
            if name in arrays:
                raise ValueError(f"two arrays named {name!r}")
            if member.compress_type != zipfile.ZIP_STORED:
                raise ValueError(f"array {name!r} is compressed; arrays are stored uncompressed (numpy.savez)")
            stored += member.compress_size
            if member.file_size != member.compress_size or stored > nbytes:
                raise ValueError(
                    f"array {name!r}: the zip says {member.file_size} bytes stored in "
                    f"{member.compress_size}, the arrays so far in {stored} of a {nbytes}-byte file"
                )
            with archive.open(member) as data:
                header = _npy_header(data)
                shape, fortran, dtype = _npy_declared(header)
                size = dtype.itemsize * math.prod(shape)
                if len(header) + size != member.file_size:
                    raise ValueError(
                        f"array {name!r} declares {dtype}{list(shape)} ({size} bytes), its member "
                        f"holds {member.file_size - len(header)} bytes of data"
                    )
                arrays[name] = (shape, dtype) if headers_only else _npy_data(data, shape, fortran, dtype, size)
    return arrays


def load_npz(path: str, source: Any = None) -> Dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path`` (read from ``source`` when given: see :func:`open_npz`), checked
    (:func:`npz_arrays`); never unpickled. StorageError when it is not a valid ``.npz`` of arrays."""
    return open_npz(path, path if source is None else source, npz_arrays, "a valid .npz of arrays")


def read_npz(backend, path: str) -> Dict[str, np.ndarray]:
    """The columns at ``path`` through ``backend`` (FileNotFoundError when absent)."""
    return load_npz(path, backend.readable(path))


def _npy_header(f) -> bytes:
    """The header of the ``.npy`` file open in ``f``, as bytes: magic string and version, the header's length
    (2 bytes in format 1.0, 4 in 2.0 and 3.0: NEP 1) and the header itself; numpy parses it (:func:`_npy_declared`)."""
    head = f.read(np.lib.format.MAGIC_LEN)
    length = f.read(2 if head[6:7] == b"\x01" else 4)
    size = int.from_bytes(length, "little")
    if size > NPY_MAX_HEADER:  # numpy's own limit: a damaged length must not make us read the whole column
        raise ValueError(f"a .npy header of {size} bytes (at most {NPY_MAX_HEADER})")
    return head + length + f.read(size)


@functools.lru_cache(maxsize=1024)
def _npy_declared(header: bytes) -> tuple:
    """``(shape, fortran order, dtype)`` the ``.npy`` header ``header`` declares, parsed by numpy (ValueError when
    it is not one, or declares Python objects, negative lengths or items of no bytes). Cached: a collector's
    chunks repeat a few headers, and parsing one (``ast.literal_eval``) cost the coordinator more than the rest
    of a chunk's announcement."""
    f = io.BytesIO(header)
    version = np.lib.format.read_magic(f)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read_header(f, max_header_size=NPY_MAX_HEADER)
    if dtype.hasobject:  # Python objects: loading them would unpickle (we never do)
        raise ValueError(f"an array of dtype {dtype} (Python objects); only numeric, bool or str arrays are stored")
    if dtype.itemsize == 0 or any(n < 0 for n in shape):
        raise ValueError(f"an array of dtype {dtype} and shape {shape}")
    return shape, fortran, dtype


def _npy_data(f, shape: tuple, fortran: bool, dtype: np.dtype, size: int) -> np.ndarray:
    """The array of ``size`` bytes (checked against the zip already) that ``f`` is at (after its header)."""
    data = bytearray(size)
    got = f.readinto(data)
    if got != size:
        raise ValueError(f"an array of {size} bytes whose data ends after {got}")
    array = np.frombuffer(data, dtype=dtype)  # a bytearray's: writable, as numpy.load's arrays are
    return array.reshape(shape[::-1]).transpose() if fortran else array.reshape(shape)


def torch_save_atomic(path: str, state: Mapping, backend=LocalBackend) -> None:
    """``torch.save`` of ``state`` to ``path`` in one atomic, durable write."""
    import torch

    # checkpoints promise durability: fsynced on a local disk (an object PUT is durable when it returns)
    backend.write_atomic(path, lambda f: torch.save(dict(state), f), durable=True)


# how deep a checkpoint's state nests (a model's state dict, an optimizer's state, its param groups: 4 or 5)
MAX_STATE_DEPTH = 32


def torch_load(path: str, backend=LocalBackend, check: Optional[Callable[[Dict], None]] = None) -> Dict:
    """The state dict at ``path``, loaded with ``weights_only=True`` (FileNotFoundError when absent): the door every
    checkpoint comes in by (``check``: a family's own shape, raising ValueError).

    Checked before torch reads it: a zip as ``torch.save`` writes (its members stored uncompressed, each no larger
    than the file: what torch allocates for a record is bounded by the file's size, whatever the zip's directory
    declares); once loaded: a dict with names for keys, of tensors, numbers, strings, lists and dicts (names or
    indices for keys) at most :data:`MAX_STATE_DEPTH` deep. StorageError in one line naming the file for any
    damage; the store's own OSError when the store fails the read."""
    import torch

    source = backend.readable(path)  # FileNotFoundError when absent

    def parse(f, nbytes: int) -> Dict:
        _check_torch_zip(f, nbytes)
        f.seek(0)
        state = torch.load(f, map_location="cpu", weights_only=True)
        check_state(state)
        if check is not None:
            check(state)
        return state

    try:
        return open_npz(path, source, parse, "a loadable checkpoint")
    except StorageError as exc:
        raise StorageError(" ".join(str(exc).split())[:600]) from exc.__cause__


def _check_torch_zip(f, nbytes: int) -> None:
    """ValueError unless ``f`` (``nbytes`` long) is a zip as ``torch.save`` writes: members stored, each within the
    file."""
    if f.read(4) != b"PK\x03\x04":
        raise ValueError("not a torch.save zip archive (the legacy format, or not a checkpoint)")
    f.seek(0)
    with zipfile.ZipFile(f) as archive:
        for member in archive.infolist():
            if (
                member.compress_type != zipfile.ZIP_STORED
                or member.file_size != member.compress_size
                or member.file_size > nbytes
            ):
                raise ValueError(
                    f"member {member.filename!r}: {member.file_size} bytes stored in "
                    f"{member.compress_size} of a {nbytes}-byte file (torch.save stores them whole)"
                )


def check_state(state: Any, depth: int = 0, where: str = "the checkpoint") -> None:
    """ValueError naming the place unless ``state`` is a state dict: a dict with names for keys (deeper, names or
    indices: an optimizer's state), of tensors, numbers, strings, None, lists and dicts, at most
    :data:`MAX_STATE_DEPTH` deep."""
    import torch

    if depth > MAX_STATE_DEPTH:
        raise ValueError(f"{where} nests more than {MAX_STATE_DEPTH} deep")
    if isinstance(state, dict):
        keys = (str,) if depth == 0 else (str, int)
        for key, value in state.items():
            if not isinstance(key, keys) or isinstance(key, bool):
                raise ValueError(f"{where} has a key {key!r:.40} ({type(key).__name__}); state dicts name their parts")
            check_state(value, depth + 1, f"{where}[{key!r:.40}]")
    elif depth == 0:
        raise ValueError(f"a {type(state).__name__}, not a state dict")
    elif isinstance(state, (list, tuple)):
        for i, value in enumerate(state):
            check_state(value, depth + 1, f"{where}[{i}]")
    elif not isinstance(state, (torch.Tensor, int, float, str, bytes, type(None))):
        raise ValueError(f"{where} is a {type(state).__name__}")
