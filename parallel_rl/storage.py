"""The shared filesystem: every path is built here, inside one root.

The root is a local directory (a plain path or ``file://``: the default and the fastest) or an
object-store URL through fsspec (``s3://bucket/prefix`` via s3fs, ``gs://``, ``az://``, ``memory://``):
any store whose whole-object writes are atomic. :class:`SharedStorage` has one API for both; the
difference lives in two small backends, :class:`LocalBackend` (today's POSIX code) and
:class:`FsspecBackend`.

Layout under the root (see docs/storage.md)::

    data/<chunk_name>.npz          step-data chunks (columns; loaded with allow_pickle=False)
    policy/policy_000001234.pt     policy checkpoints (torch.save of a state dict; weights_only=True)
    learner/learner_000001234.pt   full learner state (model, target network, optimizer) for resume
    coordinator/state_000000042.npz + .json   coordinator snapshots (replay index arrays; the rest as JSON)
    run.lock                       the lock of the run using the directory (lock_shared_dir)
    league/snapshot_000001234.pt   two-player self-play: policy versions frozen into the opponent pool
                                   (copies of policy checkpoints, so pruning those never removes them)
    videos/video_000001234.mp4     an evaluator's recorded episode of that policy version (record_every;
                                   made by the first video; the newest KEEP_VIDEOS are kept)

Every local file is written to a temporary name in its directory and moved into
place with ``os.replace``; an object is written with one whole-object PUT. Either
way a reader never sees half a file. Names that
come from messages are validated and resolved; anything pointing outside the
root raises :class:`PathOutsideRootError`.
"""
from __future__ import annotations

import errno
import functools
import io
import json
import logging
import math
import os
import posixpath
import re
import threading
import time
import zipfile
from typing import Any, Callable, Dict, List, Mapping, Optional

import numpy as np

from .errors import (PathOutsideRootError, SharedDirInUseError, StateFormatError, StorageError, StorageFaultError,
                     StorageUnavailableError)

logger = logging.getLogger(__name__)

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_POLICY_RE = re.compile(r"^policy_(\d{9,})\.pt$")
_LEARNER_RE = re.compile(r"^learner_(\d{9,})\.pt$")
_CHUNK_RE = re.compile(r"^.+\.npz$")
_STATE_RE = re.compile(r"^state_(\d{9,})\.(json|npz)$")
_STATE_JSON_RE = re.compile(r"^state_(\d{9,})\.json$")
_SNAPSHOT_RE = re.compile(r"^snapshot_(\d{9,})\.pt$")
_VIDEO_RE = re.compile(r"^video_(\d{9,})\.mp4$")

# the longest .npy column header a chunk may have (numpy's default limit for untrusted files)
NPY_MAX_HEADER = 10000
# errors of the store that say the thing at a chunk's name is not a file: retrying cannot help, so the chunk is
# bad (StorageError), not the store failing (StorageFaultError). Every other errno (EIO, ESTALE, EMFILE, ENFILE,
# EACCES, ENOTDIR, ...) is a fault of the store: it may pass, or an operator repairs it, and then the same read
# works (a permission or a directory is the store's, not the file's content)
NOT_A_FILE_ERRNOS = frozenset({errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG})
# the coordinator state format this code writes and reads; a file with another one is refused
COORDINATOR_STATE_FORMAT = 1
# coordinator snapshots kept: the newest, and the one before as a fallback when the newest is damaged
KEEP_COORDINATOR_STATES = 2
# recorded evaluation episodes kept in videos/ (the dashboard plays the newest)
KEEP_VIDEOS = 20
# the lock file of the run that uses a shared directory (see SharedStorage.lock)
RUN_LOCK_NAME = "run.lock"


def _atomic_write(path: str, write: Callable[[Any], None], durable: bool = False) -> None:
    """Write through ``write(fileobj)`` to a temp file beside ``path``, then rename.

    The temp name is the final name plus this process and thread (unique: names are unique per
    writer), created with O_EXCL; ``tempfile.mkstemp``'s random names cost a collector ~6% of its time."""
    directory, base = os.path.split(path)
    tmp = os.path.join(directory or ".", f".tmp-{os.getpid()}-{threading.get_ident()}-{base}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:  # left by a crashed writer that had our pid and thread id
        os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            if durable:  # on the disk before it gets its name: a crash leaves the old file or the whole new one
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if durable:  # and the rename itself
            dir_fd = os.open(directory or ".", os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _unlink(path: str) -> bool:
    """Remove ``path``; False when it was already gone."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> memoryview:
    """Columns as an uncompressed ``.npz`` in memory (object arrays are refused)."""
    for name, arr in arrays.items():
        if np.asarray(arr).dtype == object:
            raise StorageError(f"column {name!r} has dtype object; only plain numeric/bool/str arrays are stored")
    buffer = io.BytesIO()  # zipfile writes member by member with seeks; the disk gets one write
    np.savez(buffer, **arrays)
    return buffer.getbuffer()


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


def atomic_save_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Save columns as an uncompressed ``.npz`` atomically (object arrays are refused)."""
    data = _npz_bytes(arrays)
    _atomic_write(path, lambda f: f.write(data))


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


# protocols whose writes replace a whole object at once (a reader sees the old object or the new one)
ATOMIC_PROTOCOLS = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory")
LOCAL_PROTOCOLS = ("", "file", "local")
# a remote store's policy listing is asked for at most this often by policy_dir_stamp (one LIST request)
_REMOTE_POLL_S = 0.25


def split_url(url: str) -> tuple:
    """(protocol, rest) of a shared-dir URL; a plain path has protocol ''."""
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", url or "")
    return (m.group(1).lower(), m.group(2)) if m else ("", url)


def is_remote(url: str) -> bool:
    return split_url(url)[0] not in LOCAL_PROTOCOLS


class LocalBackend:
    """A POSIX directory: temp file + ``os.replace``; the directory's mtime tells of new checkpoints."""

    remote = False
    # what the store failing looks like (FileNotFoundError excepted): ENOSPC, EIO, ESTALE, EROFS, EACCES, ...
    faults: tuple = (OSError,)

    def __init__(self, url: str):
        self.base = os.path.realpath(os.path.abspath(split_url(url)[1]))
        self.url = self.base

    def resolve(self, relpath: str) -> str:
        full = os.path.realpath(os.path.join(self.base, relpath))
        if os.path.commonpath([full, self.base]) != self.base or full == self.base:
            raise PathOutsideRootError(f"path {relpath!r} points outside the shared root {self.base!r}")
        return full

    def size(self, relpath: str) -> int:
        """Bytes of the file at ``relpath`` (a plain relative path, checked by the caller); a link is not
        followed (its own size), so no path is resolved."""
        return os.lstat(os.path.join(self.base, relpath)).st_size

    def prepare(self, directories) -> None:
        try:
            for d in directories:
                os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the shared directory {self.base!r}: {exc}; pass --shared-dir") from exc

    save_npz = staticmethod(atomic_save_npz)
    load_npz = staticmethod(load_npz)
    unlink = staticmethod(_unlink)
    listdir = staticmethod(os.listdir)
    isfile = staticmethod(os.path.isfile)

    @staticmethod
    def makedirs(directory: str) -> None:
        os.makedirs(directory, exist_ok=True)

    @staticmethod
    def read_bytes(path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    @staticmethod
    def write_atomic(path: str, write: Callable[[Any], None], durable: bool = False) -> None:
        _atomic_write(path, write, durable)

    @staticmethod
    def readable(path: str):
        return path

    @staticmethod
    def dir_stamp(directory: str) -> int:
        return os.stat(directory).st_mtime_ns

    @staticmethod
    def mtime(path: str) -> float:
        return os.stat(path).st_mtime


def _remote_faults() -> tuple:
    """What an object store failing looks like: fsspec and s3fs raise OSError (5xx, timeouts, throttling); a
    connection the client cannot make raises botocore's or aiohttp's own errors."""
    faults: list = [OSError]
    try:
        import botocore.exceptions

        faults.append(botocore.exceptions.BotoCoreError)
    except ImportError:
        pass
    try:
        import aiohttp

        faults.append(aiohttp.ClientError)
    except ImportError:
        pass
    return tuple(faults)


class FsspecBackend:
    """An object store through fsspec: one whole-object write (PUT) per file, so no temp files."""

    remote = True

    def __init__(self, url: str, options: Optional[Mapping] = None):
        protocol, rest = split_url(url)
        if protocol not in ATOMIC_PROTOCOLS:
            raise StorageUnavailableError(
                f"shared store {url}: unsupported protocol {protocol!r} (its writes are not atomic whole-object "
                f"writes); use a local path, file://, or one of {', '.join(p + '://' for p in ATOMIC_PROTOCOLS)}")
        import fsspec

        kwargs = dict(options or {})
        if protocol in ("s3", "s3a"):
            kwargs.setdefault("use_listings_cache", False)
            # fail in seconds, not minutes, when the endpoint is down; a few retries for transient errors
            kwargs.setdefault("config_kwargs", {"connect_timeout": 5, "read_timeout": 60,
                                                "retries": {"max_attempts": 3, "mode": "standard"}})
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if endpoint:
                kwargs.setdefault("endpoint_url", endpoint)
        kwargs.setdefault("skip_instance_cache", True)
        try:
            self.fs = fsspec.filesystem(protocol, **kwargs)
        except (ImportError, ValueError, TypeError) as exc:
            raise StorageUnavailableError(f"shared store {url}: {type(exc).__name__}: {exc}") from None
        self.faults = _remote_faults()
        self.base = rest.strip("/")
        if not self.base:
            raise StorageUnavailableError(f"shared store {url}: no bucket in the URL; use {protocol}://BUCKET/PREFIX")
        self.url = f"{protocol}://{self.base}"
        self._stamp = (0.0, None, 0)  # (listed at, names, stamp)

    def resolve(self, relpath: str) -> str:
        full = posixpath.normpath(posixpath.join(self.base, relpath))
        if not full.startswith(self.base + "/"):
            raise PathOutsideRootError(f"path {relpath!r} points outside the shared root {self.url!r}")
        return full

    def size(self, relpath: str) -> int:
        return self.fs.size(self.resolve(relpath))  # FileNotFoundError when absent

    def prepare(self, directories) -> None:
        """Object stores have no directories: check that we can write and delete an object instead, so a
        wrong bucket, wrong credentials or an unreachable endpoint fail here, before anything starts."""
        probe = f"{self.base}/.probe-{os.getpid()}-{threading.get_ident()}"
        try:
            self.fs.pipe_file(probe, b"")
            self.fs.rm_file(probe)
        except Exception as exc:  # botocore, aiohttp and fsspec raise many types; all mean "unusable"
            cause = " ".join(str(exc).split()) or type(exc).__name__
            raise StorageUnavailableError(
                f"shared store {self.url}: cannot write there ({type(exc).__name__}: {cause}); check the bucket, "
                f"the endpoint (AWS_ENDPOINT_URL) and the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                f"AWS_PROFILE or parallel.storage_options)") from None

    def write_atomic(self, path: str, write: Callable[[Any], None], durable: bool = False) -> None:
        """One PUT: atomic, and durable once it returns (``durable`` asks nothing more of an object store)."""
        buffer = io.BytesIO()
        write(buffer)
        self.fs.pipe_file(path, buffer.getvalue())

    def save_npz(self, path: str, arrays: Mapping[str, np.ndarray]) -> None:
        self.fs.pipe_file(path, bytes(_npz_bytes(arrays)))

    def makedirs(self, directory: str) -> None:
        """Object stores have no directories: nothing to make."""

    def read_bytes(self, path: str) -> bytes:
        return self.fs.cat_file(path)  # FileNotFoundError when absent

    def readable(self, path: str) -> io.BytesIO:
        return io.BytesIO(self.fs.cat_file(path))  # FileNotFoundError when absent

    def load_npz(self, path: str) -> Dict[str, np.ndarray]:
        return load_npz(path, self.readable(path))

    def load_npz_many(self, paths: List[str]) -> Dict[str, Any]:
        """Every path's columns (None when absent, the StorageError when it is not a valid chunk), fetched
        concurrently: one round of requests, not n."""
        out: Dict[str, Any] = {}
        for path, data in self.fs.cat(list(paths), on_error="return").items():
            if isinstance(data, FileNotFoundError):
                out[path] = None
                continue
            if isinstance(data, self.faults):  # the store failing (SharedStorage makes it a StorageFaultError)
                raise data
            if isinstance(data, BaseException):
                raise StorageError(f"{path}: cannot read ({type(data).__name__}: {data})") from data
            try:
                out[path] = load_npz(path, io.BytesIO(data))
            except StorageError as exc:  # one damaged chunk: the others are good
                out[path] = exc
        return out

    def unlink(self, path: str) -> bool:
        try:
            self.fs.rm_file(path)
            return True
        except FileNotFoundError:
            return False

    def listdir(self, directory: str) -> List[str]:
        try:
            return [posixpath.basename(p.rstrip("/")) for p in self.fs.ls(directory, detail=False)]
        except FileNotFoundError:  # no object under that prefix yet
            return []

    def isfile(self, path: str) -> bool:
        return self.fs.isfile(path)

    def dir_stamp(self, directory: str) -> int:
        """The local time (ns) at which the listing last changed; listed at most every ``_REMOTE_POLL_S``."""
        listed_at, names, stamp = self._stamp
        now = time.monotonic()
        if names is not None and now - listed_at < _REMOTE_POLL_S:
            return stamp
        current = sorted(self.listdir(directory))
        if current != names:
            stamp = time.time_ns()
        self._stamp = (now, current, stamp)
        return stamp

    def mtime(self, path: str) -> float:
        return self.fs.modified(path).timestamp()


class StorageHealth:
    """Whether the shared store works for this process: unhealthy from a fault of the store (a read or write
    that failed, :class:`StorageFaultError`) until a write succeeds again.

    ``faults`` counts every fault ever (it orders reports: a report with fewer faults than already seen is
    stale); ``failures`` counts tasks failed on the store in a row, and sets the backoff before the next
    task (:meth:`back_off`: ``backoff * 2**(failures - 1)``, at most ``max_backoff``)."""

    def __init__(self, name: Optional[str] = "storage"):
        self.name = name  # the actor in log messages; None: the caller logs (the coordinator's view of a worker)
        self._lock = threading.Lock()
        self.error: Optional[str] = None
        self.since: Optional[float] = None  # epoch seconds of the first fault since the store last worked
        self.faults = 0
        self.failures = 0
        self.retry_at = 0.0  # monotonic: no task before this

    @property
    def healthy(self) -> bool:
        return self.error is None

    @property
    def ready(self) -> bool:
        """False while backing off after a task failed on the store."""
        return time.monotonic() >= self.retry_at

    def fault(self, error: str, faults: Optional[int] = None, since: Optional[float] = None) -> None:
        """The store failed an operation (``faults``/``since``: as another process reported them)."""
        with self._lock:
            first = self.error is None
            self.error = error
            self.since = since if since is not None else (self.since if not first else time.time())
            self.faults = self.faults + 1 if faults is None else max(self.faults, faults)
        if first and self.name:
            logger.error("%s: the shared store is failing: %s", self.name, error)

    def recovered(self) -> None:
        """A write succeeded: healthy again, backoff reset."""
        with self._lock:
            was, self.error, self.since = self.error, None, None
            self.failures, self.retry_at = 0, 0.0
        if was is not None and self.name:
            logger.info("%s: the shared store works again (it failed with: %s)", self.name, was)

    def back_off(self, backoff: float, max_backoff: float) -> float:
        """A task failed on the store: seconds before the next one (exponential in failures in a row, capped)."""
        with self._lock:
            self.failures += 1
            delay = min(float(max_backoff), float(backoff) * 2 ** (self.failures - 1))
            self.retry_at = time.monotonic() + delay
            return delay

    def to_dict(self) -> Dict[str, Any]:
        return {"healthy": self.error is None, "error": self.error, "since": self.since, "faults": self.faults,
                "failures": self.failures}

    def update_from(self, report: Mapping[str, Any]) -> bool:
        """Take a process's own report (:meth:`to_dict`, checked by :func:`check_health_report`); a stale one
        (fewer faults than seen) changes nothing. True when the report was taken."""
        if report["faults"] < self.faults:
            return False
        if report["healthy"]:
            self.faults = report["faults"]
            if self.error is not None:
                self.recovered()
        else:
            self.fault(report["error"] or "unknown storage error", faults=report["faults"], since=report["since"])
        return True


def check_health_report(report: Any) -> Dict[str, Any]:
    """A storage health report from another process (:meth:`StorageHealth.to_dict`), checked; ValueError
    naming what is wrong."""
    if not isinstance(report, dict):
        raise ValueError(f"'storage' must be an object, got {report!r:.80}")
    healthy, error, since, faults = (report.get(k) for k in ("healthy", "error", "since", "faults"))
    if not isinstance(healthy, bool):
        raise ValueError(f"'storage.healthy' must be true or false, got {healthy!r:.40}")
    if error is not None and not isinstance(error, str):
        raise ValueError(f"'storage.error' must be a string or null, got {error!r:.40}")
    if since is not None and (isinstance(since, bool) or not isinstance(since, (int, float)) or not 0 <= since < 1e11):
        raise ValueError(f"'storage.since' must be epoch seconds or null, got {since!r:.40}")
    if isinstance(faults, bool) or not isinstance(faults, int) or not 0 <= faults < 2**53:
        raise ValueError(f"'storage.faults' must be a count, got {faults!r:.40}")
    return {"healthy": healthy, "error": None if error is None else error[:500],
            "since": None if since is None else float(since), "faults": faults}


def _store_op(what: str, write: bool = False):
    """Decorates a :class:`SharedStorage` method: a fault of the store (the backend's ``faults``, except
    FileNotFoundError, which means "not there") becomes :class:`StorageFaultError` naming ``what``, the
    cause and the root, and makes ``self.health`` unhealthy; a write that succeeds makes it healthy again."""

    def decorate(method):
        @functools.wraps(method)
        def op(self, *args, **kwargs):
            try:
                result = method(self, *args, **kwargs)
            except (FileNotFoundError, StorageError):
                raise
            except self.backend.faults as exc:
                code = errno.errorcode.get(getattr(exc, "errno", None) or -1)
                cause = f"{type(exc).__name__}: {' '.join(str(exc).split()) or type(exc).__name__}"
                message = (f"{what} failed on the shared store {self.root}: {cause}{f' ({code})' if code else ''}; "
                           f"free space or repair the store (workers back off and try again)")
                self.health.fault(message)
                raise StorageFaultError(message) from exc
            if write and self.health.error is not None:
                self.health.recovered()
            return result

        return op

    return decorate


class SharedStorage:
    """Paths and file operations on the shared filesystem root (a local directory or an object-store URL).

    ``root`` is what other processes are told to open: the absolute local path, or the store's URL.
    ``options`` go to the fsspec filesystem of a remote root (``parallel.storage_options``)."""

    def __init__(self, root: str, options: Optional[Mapping] = None):
        self.backend = FsspecBackend(root, options) if is_remote(root) else LocalBackend(root)
        self.root = self.backend.url
        self.remote = self.backend.remote
        self.health = StorageHealth()
        base = self.backend.base
        self.data_dir = posixpath.join(base, "data")
        self.policy_dir = posixpath.join(base, "policy")
        self.learner_dir = posixpath.join(base, "learner")
        self.state_dir = posixpath.join(base, "coordinator")
        self.league_dir = posixpath.join(base, "league")  # made by the first league snapshot (self-play runs)
        self.video_dir = posixpath.join(base, "videos")  # made by the first recorded episode (record_every)
        self.backend.prepare((self.data_dir, self.policy_dir, self.learner_dir, self.state_dir))

    def __repr__(self) -> str:
        return f"SharedStorage({self.root!r})"

    # ---- containment -------------------------------------------------------------
    def resolve(self, relpath: str) -> str:
        """Full path of ``relpath`` inside the root; refuses anything that escapes it."""
        if not isinstance(relpath, str) or not relpath or "\x00" in relpath:
            raise PathOutsideRootError(f"invalid path {relpath!r}")
        return self.backend.resolve(relpath)

    @staticmethod
    def check_name(name: str) -> str:
        if not isinstance(name, str) or not _NAME_RE.match(name) or ".." in name:
            raise PathOutsideRootError(
                f"invalid file name {name!r}: use letters, digits, '_', '-', '.' (max 128, no '..')"
            )
        return name

    def local_dir(self, *parts: str, fallback: str) -> Optional[str]:
        """A directory for files that need a local filesystem (TensorBoard's event files): under the root
        when it is local, else under ``fallback`` (the process's experiment directory)."""
        return os.path.join(fallback if self.remote else self.root, *parts)

    # ---- step data ---------------------------------------------------------------
    def _chunk_relpath(self, name: str) -> str:
        return posixpath.join("data", self.check_name(name) + ".npz")

    def chunk_path(self, name: str) -> str:
        return self.resolve(self._chunk_relpath(name))

    @_store_op("writing a chunk", write=True)
    def write_chunk(self, name: str, columns: Mapping[str, np.ndarray]) -> str:
        path = self.chunk_path(name)
        self.backend.save_npz(path, columns)
        return path

    @_store_op("reading a chunk")
    def read_chunk(self, name: str) -> Dict[str, np.ndarray]:
        return self.backend.load_npz(self.chunk_path(name))

    @_store_op("reading chunks")
    def read_chunks(self, names: List[str]) -> Dict[str, Any]:
        """Several chunks at once: each one's columns, None for a chunk that is gone, the StorageError for one
        that is not a valid chunk (the others are read all the same); a fault of the store raises. Concurrent
        requests on an object store, where each request waits a round trip; one after the other on a local
        disk."""
        if not self.remote:
            out: Dict[str, Any] = {}
            for name in names:
                try:
                    out[name] = self.read_chunk(name)
                except FileNotFoundError:
                    out[name] = None
                except StorageFaultError:
                    raise
                except StorageError as exc:
                    out[name] = exc
            return out
        if not names:  # fsspec's cat() of no paths raises FileNotFoundError([])
            return {}
        paths = {self.chunk_path(name): name for name in names}
        return {paths[path]: cols for path, cols in self.backend.load_npz_many(list(paths)).items()}

    @_store_op("looking for a chunk")
    def chunk_exists(self, name: str) -> bool:
        return self.backend.isfile(self.chunk_path(name))

    @_store_op("reading a chunk's header")
    def chunk_layout(self, name: str) -> tuple:
        """``(rows, bytes, bytes per row)`` of chunk ``name``: its rows and its row size from its column
        headers (no data is read), and its file's size.

        Raises FileNotFoundError when it is not there, StorageError when it is not a chunk whose
        columns all have the same length and a plain dtype (a column of Python objects is refused: no
        learner could load it), StorageFaultError when the store fails the read."""
        path = self.chunk_path(name)
        lengths, row_bytes = set(), 0
        source = self.backend.readable(path)  # FileNotFoundError when absent
        try:
            # a local path, or the object's bytes already fetched
            nbytes = os.stat(source).st_size if isinstance(source, str) else len(source.getbuffer())
            with zipfile.ZipFile(source) as archive:
                for member in archive.infolist():
                    with archive.open(member) as f:
                        rows, per_row = _npy_layout(_npy_header(f))  # the header only, never the data
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
        return lengths.pop(), nbytes, row_bytes

    @_store_op("looking at a chunk's size")
    def chunk_bytes(self, name: str) -> int:
        """The size in bytes of chunk ``name``'s file (FileNotFoundError when absent): one ``lstat`` (a HEAD
        request on an object store); a link is not followed."""
        return self.backend.size(self._chunk_relpath(name))

    @_store_op("deleting a chunk")
    def delete_chunk(self, name: str) -> bool:
        return self.backend.unlink(self.chunk_path(name))

    @_store_op("reading a chunk's modification time")
    def chunk_mtime(self, name: str) -> float:
        """When chunk ``name``'s file was written (seconds since the epoch; FileNotFoundError when absent)."""
        return self.backend.mtime(self.chunk_path(name))

    @_store_op("listing chunks")
    def list_chunks(self) -> List[str]:
        return sorted(f[:-4] for f in self.backend.listdir(self.data_dir)
                      if f.endswith(".npz") and not f.startswith("."))

    # ---- checkpoints ---------------------------------------------------------------
    def policy_path(self, version: int) -> str:
        if int(version) < 0:
            raise StorageError(f"policy version must be >= 0, got {version}")
        return posixpath.join(self.policy_dir, f"policy_{int(version):09d}.pt")

    def learner_path(self, version: int) -> str:
        return posixpath.join(self.learner_dir, f"learner_{int(version):09d}.pt")

    @_store_op("writing a policy checkpoint", write=True)
    def save_policy(self, version: int, state_dict: Mapping) -> str:
        path = self.policy_path(version)
        _torch_save_atomic(path, state_dict, self.backend)
        return path

    @_store_op("looking for a policy checkpoint")
    def policy_exists(self, version: int) -> bool:
        return self.backend.isfile(self.policy_path(version))

    @_store_op("reading a policy checkpoint")
    def load_policy(self, version: int) -> Dict:
        return _torch_load(self.policy_path(version), self.backend)

    @_store_op("writing the learner state", write=True)
    def save_learner_state(self, version: int, state: Mapping) -> str:
        path = self.learner_path(version)
        _torch_save_atomic(path, state, self.backend)
        return path

    @_store_op("reading a learner state")
    def load_learner_state(self, version: int) -> Dict:
        return _torch_load(self.learner_path(version), self.backend)

    def latest_good_learner_state(self) -> Optional[tuple]:
        """``(version, state)`` of the newest learner state that loads, or None when none does.

        A corrupt newest one (a crash mid-write on a disk without fsync, bit rot) is logged and skipped:
        resuming from the one before loses ``save_state_every`` iterations, not the run."""
        for version in reversed(self._versions(self.learner_dir, _LEARNER_RE)):
            try:
                return version, self.load_learner_state(version)
            except FileNotFoundError:  # pruned since it was listed
                continue
            except StorageFaultError:  # the store failing says nothing about the file
                raise
            except StorageError as exc:
                logger.error("storage: skipping learner state %d: %s", version, exc)
        return None

    # ---- league snapshots (two-player self-play) ------------------------------------------
    def league_snapshot_path(self, version: int) -> str:
        if int(version) < 0:
            raise StorageError(f"snapshot version must be >= 0, got {version}")
        return posixpath.join(self.league_dir, f"snapshot_{int(version):09d}.pt")

    @_store_op("writing a league snapshot", write=True)
    def snapshot_policy(self, version: int) -> str:
        """Freeze policy checkpoint ``version`` into the league (a byte copy: no torch needed, the
        coordinator never imports it). Raises FileNotFoundError when the checkpoint is gone."""
        path = self.league_snapshot_path(version)
        raw = self.backend.read_bytes(self.policy_path(version))
        self.backend.makedirs(self.league_dir)  # made by the first snapshot: only self-play runs have one
        self.backend.write_atomic(path, lambda dst: dst.write(raw), durable=True)
        return path

    @_store_op("reading a league snapshot")
    def load_league_snapshot(self, version: int) -> Dict:
        """A frozen snapshot's state dict (FileNotFoundError when it left the league)."""
        return _torch_load(self.league_snapshot_path(version), self.backend)

    def remove_league_snapshot(self, version: int) -> bool:
        return self.backend.unlink(self.league_snapshot_path(version))

    def league_snapshot_versions(self) -> List[int]:
        try:
            return self._versions(self.league_dir, _SNAPSHOT_RE)
        except FileNotFoundError:  # no league directory: not a self-play run
            return []

    # ---- videos (recorded evaluation episodes) -------------------------------------------
    def video_name(self, version: int) -> str:
        return f"video_{int(version):09d}.mp4"

    @_store_op("writing a video", write=True)
    def save_video(self, version: int, data: bytes) -> str:
        """Store the MP4 of an evaluation episode of policy ``version``; keep the newest KEEP_VIDEOS."""
        self.backend.makedirs(self.video_dir)
        path = posixpath.join(self.video_dir, self.video_name(version))
        self.backend.write_atomic(path, lambda f: f.write(data))
        for old in self.video_versions()[:-KEEP_VIDEOS]:
            self.backend.unlink(posixpath.join(self.video_dir, self.video_name(old)))
        return path

    def video_versions(self) -> List[int]:
        try:
            return self._versions(self.video_dir, _VIDEO_RE)
        except FileNotFoundError:  # no video recorded yet
            return []

    def videos(self) -> List[Dict[str, Any]]:
        """The recorded episodes, newest first: ``name``, ``policy_version``, ``created`` (seconds since the epoch)."""
        out = []
        for version in reversed(self.video_versions()):
            name = self.video_name(version)
            try:
                created = self.backend.mtime(posixpath.join(self.video_dir, name))
            except FileNotFoundError:  # pruned since it was listed
                continue
            out.append({"name": name, "policy_version": version, "created": created})
        return out

    def video_source(self, name: str):
        """A local path or an in-memory file of video ``name`` (FileNotFoundError when absent or not a video)."""
        if not _VIDEO_RE.match(self.check_name(name)):
            raise FileNotFoundError(name)
        path = posixpath.join(self.video_dir, name)
        return self.backend.readable(path)

    @_store_op("listing checkpoints")
    def _versions(self, directory: str, pattern: re.Pattern) -> List[int]:
        out = []
        for name in self.backend.listdir(directory):
            m = pattern.match(name)
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    def policy_versions(self) -> List[int]:
        return self._versions(self.policy_dir, _POLICY_RE)

    def policy_dir_stamp(self) -> int:
        """Changes when a checkpoint is added or removed: the policy directory's mtime (ns) on a local disk;
        on an object store, the time its listing was last seen to change (listed at most every 0.25 s)."""
        return self.backend.dir_stamp(self.policy_dir)

    def latest_policy_version(self) -> Optional[int]:
        versions = self.policy_versions()
        return versions[-1] if versions else None

    def latest_learner_version(self) -> Optional[int]:
        versions = self._versions(self.learner_dir, _LEARNER_RE)
        return versions[-1] if versions else None

    def _our_files(self):
        """(directory, name, is_temp) of every file of ours on the shared store."""
        for directory, pattern in ((self.data_dir, _CHUNK_RE), (self.policy_dir, _POLICY_RE),
                                   (self.learner_dir, _LEARNER_RE), (self.state_dir, _STATE_RE),
                                   (self.league_dir, _SNAPSHOT_RE), (self.video_dir, _VIDEO_RE)):
            try:
                names = self.backend.listdir(directory)
            except FileNotFoundError:  # the league's is made by the first snapshot
                continue
            for name in names:
                if name.startswith(".tmp-") or pattern.match(name):
                    yield directory, name, name.startswith(".tmp-")

    # ---- coordinator state ------------------------------------------------------------
    def state_paths(self, seq: int) -> tuple:
        """(json, npz) paths of coordinator snapshot ``seq``."""
        base = posixpath.join(self.state_dir, f"state_{int(seq):09d}")
        return base + ".json", base + ".npz"

    def coordinator_states(self) -> List[int]:
        """Sequence numbers of the complete coordinator snapshots (their JSON, written last, exists), oldest first."""
        return self._versions(self.state_dir, _STATE_JSON_RE)

    @_store_op("writing the coordinator state", write=True)
    def save_coordinator_state(self, seq: int, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> str:
        """Write snapshot ``seq``: the arrays (``.npz``), then the JSON that names them (the commit point); prune
        all but the newest :data:`KEEP_COORDINATOR_STATES`. Returns the JSON path."""
        json_path, npz_path = self.state_paths(seq)
        self.backend.save_npz(npz_path, arrays)
        body = json.dumps({"format": COORDINATOR_STATE_FORMAT, "seq": int(seq), "arrays": os.path.basename(npz_path),
                           **meta}).encode()
        self.backend.write_atomic(json_path, lambda f: f.write(body))
        for old in self.coordinator_states()[:-KEEP_COORDINATOR_STATES]:
            for path in self.state_paths(old):
                self.backend.unlink(path)
        return json_path

    def load_coordinator_state(self, seq: int) -> tuple:
        """(meta, arrays) of snapshot ``seq``; StorageError naming the file when it is damaged or of another format."""
        json_path, npz_path = self.state_paths(seq)
        try:
            source = self.backend.readable(json_path)
            with open(source, "rb") if isinstance(source, str) else source as f:
                meta = json.loads(f.read())
        except (OSError, ValueError) as exc:
            raise StorageError(f"{json_path}: not a readable coordinator state ({exc})") from exc
        fmt = meta.get("format") if isinstance(meta, dict) else None
        if fmt != COORDINATOR_STATE_FORMAT:
            raise StateFormatError(f"{json_path}: coordinator state format {fmt!r}, this parallel_rl reads format "
                               f"{COORDINATOR_STATE_FORMAT} only; run the parallel_rl version that wrote it, or "
                               f"start over with --fresh")
        try:
            arrays = self.backend.load_npz(npz_path)
        except FileNotFoundError as exc:
            raise StorageError(f"{npz_path}: missing (its snapshot {json_path} names it)") from exc
        return meta, arrays

    def latest_coordinator_state(self) -> Optional[tuple]:
        """(meta, arrays) of the newest loadable snapshot, None when there is none.

        A damaged newest snapshot falls back to the one before (logged, naming the file); when every snapshot
        is damaged, StorageError names them: we never start empty over existing state."""
        errors = []
        for seq in reversed(self.coordinator_states()):
            try:
                state = self.load_coordinator_state(seq)
            except (StateFormatError, StorageFaultError):
                raise  # another version's snapshot (falling back would lose its work), or the store failing
            except StorageError as exc:
                logger.warning("storage: %s; falling back to the snapshot before it", exc)
                errors.append(str(exc))
                continue
            return state
        if errors:
            raise StorageError("no loadable coordinator state in " + self.state_dir + ": " + "; ".join(errors)
                               + " (move the directory away, or start over with --fresh)")
        return None

    def reset(self) -> int:
        """Remove every file of ours (chunks, checkpoints, coordinator state, temp files) for a fresh run;
        returns the count."""
        return sum(self.backend.unlink(posixpath.join(d, name)) for d, name, _ in list(self._our_files()))

    def remove_stale_temp_files(self, max_age: float) -> int:
        """Remove temp files untouched for ``max_age`` seconds: left by a writer killed mid-write (local
        disks only: an object store's writes leave no temp objects)."""
        cutoff, removed = time.time() - max_age, 0
        for directory, name, temp in list(self._our_files()):
            path = posixpath.join(directory, name)
            try:
                if temp and self.backend.mtime(path) < cutoff:
                    removed += self.backend.unlink(path)
            except FileNotFoundError:  # renamed into place meanwhile
                pass
        return removed

    def prune_checkpoints(self, keep: int) -> int:
        """Delete all but the newest ``keep`` policy and learner checkpoints; returns files removed."""
        removed = 0
        for directory, pattern, path_of in (
            (self.policy_dir, _POLICY_RE, self.policy_path),
            (self.learner_dir, _LEARNER_RE, self.learner_path),
        ):
            versions = self._versions(directory, pattern)
            for version in versions[: max(0, len(versions) - keep)]:
                removed += self.backend.unlink(path_of(version))
        return removed


class SharedDirLock:
    """An exclusive ``flock`` on ``<root>/run.lock``, held for a run's life. The kernel drops it when the
    process ends, however it ends, so a crashed run never leaves the directory locked."""

    def __init__(self, path: str, fd: Optional[int]):
        self.path, self._fd = path, fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor of the open file releases the flock
            self._fd = None


def lock_shared_dir(storage: "SharedStorage", holder: str) -> SharedDirLock:
    """Take ``storage``'s run lock for ``holder`` (e.g. "parallel-rl run"), or SharedDirInUseError naming the
    process that holds it. Fails at once: a second run must not wait to delete the first one's files.

    An ``flock`` holds on a local disk, and across hosts on NFS (Linux maps it to NFS byte-range locks);
    an object store or a filesystem without locks (some FUSE mounts) does not enforce it."""
    import fcntl
    import socket

    if storage.remote:  # no flock on an object store: nothing to hold
        logger.warning("storage: %s is an object store, which has no locks: make sure no other run uses it",
                       storage.root)
        return SharedDirLock(posixpath.join(storage.root, RUN_LOCK_NAME), None)
    path = os.path.join(storage.root, RUN_LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder_line = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process (it is starting)"
        os.close(fd)
        raise SharedDirInUseError(f"the shared directory {storage.root} is in use by {holder_line}; stop that "
                                  f"run first, or give this one another --shared-dir") from None
    except OSError as exc:
        os.close(fd)
        raise StorageError(f"cannot lock {path}: {exc}; the shared directory's filesystem must support flock "
                           f"(a local disk, NFS)") from exc
    line = (f"pid {os.getpid()} on {socket.gethostname()} ({holder}, since "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')})\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, line, 0)
    return SharedDirLock(path, fd)


def _torch_save_atomic(path: str, state: Mapping, backend=LocalBackend) -> None:
    import torch

    # checkpoints promise durability: fsynced on a local disk (an object PUT is durable when it returns)
    backend.write_atomic(path, lambda f: torch.save(dict(state), f), durable=True)


def _torch_load(path: str, backend=LocalBackend) -> Dict:
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
