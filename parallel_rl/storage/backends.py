"""Where the shared store's bytes live: a local directory or an object store through fsspec.

A backend knows paths and bytes only (file formats are :mod:`.formats`'s, names :mod:`.names`'s):
:class:`LocalBackend` writes a temp file and ``os.replace``s it into place; :class:`FsspecBackend`
writes each object with one whole-object PUT. Either way a reader never sees half a file."""

from __future__ import annotations

import errno
import io
import os
import posixpath
import re
import stat
import threading
import time
from typing import (
    IO,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Protocol,
    Tuple,
    Type,
    Union,
    runtime_checkable,
)

from ..errors import PathOutsideRootError, StorageError, StorageUnavailableError
from .names import TEMP_PREFIX

# protocols whose writes replace a whole object at once (a reader sees the old object or the new one)
ATOMIC_PROTOCOLS = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory")
LOCAL_PROTOCOLS = ("", "file", "local")
# a remote store's policy listing is asked for at most this often by dir_stamp (one LIST request)
_REMOTE_POLL_S = 0.25
# a directory mtime this old cannot change without changing its value (far above timestamp ticks)
_SETTLED_NS = 50_000_000


def split_url(url: str) -> Tuple[str, str]:
    """(protocol, rest) of a shared-dir URL; a plain path has protocol ''."""
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", url or "")
    return (m.group(1).lower(), m.group(2)) if m else ("", url)


def is_remote(url: str) -> bool:
    return split_url(url)[0] not in LOCAL_PROTOCOLS


def atomic_write(path: str, write: Callable[[Any], None], durable: bool = False) -> None:
    """Write through ``write(fileobj)`` to a temp file beside ``path``, then rename.

    The temp name is the final name plus this process and thread (unique: names are unique per
    writer), created with O_EXCL; ``tempfile.mkstemp``'s random names cost a collector ~6% of its time."""
    directory, base = os.path.split(path)
    tmp = os.path.join(directory or ".", f"{TEMP_PREFIX}{os.getpid()}-{threading.get_ident()}-{base}")
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


class OpenedFile(NamedTuple):
    """A regular file of the store, opened for reading: what a server streams (``mtime``: None when unknown)."""

    file: IO[bytes]
    size: int
    mtime: Optional[float]


# what opening a name without following links says when the name is no regular file we may read: a link (ELOOP;
# EMLINK on the BSDs), a link or a file on the way down (ENOTDIR), a directory (EISDIR), a socket (ENXIO)
_NOT_REGULAR_ERRNOS = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR, errno.EISDIR, errno.ENXIO})


def _not_regular(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "no regular file there", path)


def _unlink(path: str) -> bool:
    """Remove ``path``; False when it was already gone."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


class LocalBackend:
    """A POSIX directory: temp file + ``os.replace``; the directory's mtime tells of new checkpoints."""

    remote = False
    # what the store failing looks like (FileNotFoundError excepted): ENOSPC, EIO, ESTALE, EROFS, EACCES, ...
    faults: Tuple[Type[BaseException], ...] = (OSError,)

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

    def prepare(self, directories: Iterable[str]) -> None:
        try:
            for d in directories:
                os.makedirs(d, exist_ok=True)
        except OSError as exc:
            # the store cannot be used at all: a usage error, as for an object store's missing bucket (exit 2)
            raise StorageUnavailableError(
                f"cannot create the shared directory {self.base!r}: {exc}; pass a "
                f"--shared-dir (or parallel.shared_dir) this user can create and "
                f"write"
            ) from exc

    unlink = staticmethod(_unlink)
    listdir = staticmethod(os.listdir)
    isfile = staticmethod(os.path.isfile)
    write_atomic = staticmethod(atomic_write)

    @staticmethod
    def makedirs(directory: str) -> None:
        os.makedirs(directory, exist_ok=True)

    @staticmethod
    def read_bytes(path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    @staticmethod
    def readable(path: str) -> str:
        """What numpy, torch and zipfile open: the path itself on a local disk."""
        return path

    @staticmethod
    def dir_stamp(directory: str) -> int:
        return os.stat(directory).st_mtime_ns

    def changed_names(self, directory: str, seen: Optional[int]) -> Tuple[int, Optional[List[str]]]:
        """(the directory's mtime, its names), or (its mtime, None) when that is ``seen`` and old enough to trust:
        one ``stat`` while nothing changed. A recent mtime is listed again (two changes within one timestamp
        tick share an mtime)."""
        stamp = self.dir_stamp(directory)
        if stamp == seen and time.time_ns() - stamp > _SETTLED_NS:
            return stamp, None
        return stamp, self.listdir(directory)

    @staticmethod
    def mtime(path: str) -> float:
        return os.stat(path).st_mtime

    def _parent_fd(self, path: str) -> Tuple[int, str]:
        """(fd of the directory holding ``path``, its last name): walked down from the root without following a
        symbolic link at any level (a link to a directory outside the root is not entered). The caller closes it."""
        rel = os.path.relpath(path, self.base)
        parts = rel.split(os.sep)
        if any(p in ("", os.curdir, os.pardir) for p in parts):  # not below the root
            raise _not_regular(path)
        fd = os.open(self.base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts[:-1]:
                below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = below
        except OSError as exc:
            os.close(fd)
            raise _not_regular(path) if exc.errno in _NOT_REGULAR_ERRNOS else exc
        return fd, parts[-1]

    def regular_mtime(self, path: str) -> float:
        """The mtime of the regular file at ``path`` inside the root; FileNotFoundError when there is none there
        (absent, or a link, directory, FIFO, socket or device, or below a link)."""
        dir_fd, name = self._parent_fd(path)
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        finally:
            os.close(dir_fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path)
        return st.st_mtime

    def open_regular(self, path: str) -> OpenedFile:
        """The regular file at ``path`` inside the root, opened for reading; FileNotFoundError when there is none
        there. No link is followed at any level below the root (``O_NOFOLLOW``), and what is not a regular file is
        never opened (a FIFO would block the reader for good, a device may act on an open): checked before the open,
        opened ``O_NONBLOCK``, checked again on the descriptor (``fstat``), since the name may change between."""
        dir_fd, name = self._parent_fd(path)
        try:
            if not stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                raise _not_regular(path)
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            raise _not_regular(path) if exc.errno in _NOT_REGULAR_ERRNOS else exc
        finally:
            os.close(dir_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _not_regular(path)
            return OpenedFile(os.fdopen(fd, "rb"), st.st_size, st.st_mtime)
        except BaseException:
            os.close(fd)
            raise


def _remote_faults() -> Tuple[Type[BaseException], ...]:
    """What an object store failing looks like: fsspec and s3fs raise OSError (5xx, timeouts, throttling); a
    connection the client cannot make raises botocore's or aiohttp's own errors."""
    faults: List[Type[BaseException]] = [OSError]
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

    def __init__(self, url: str, options: Optional[Mapping[str, Any]] = None):
        protocol, rest = split_url(url)
        if protocol not in ATOMIC_PROTOCOLS:
            raise StorageUnavailableError(
                f"shared store {url}: unsupported protocol {protocol!r} (its writes are not atomic whole-object "
                f"writes); use a local path, file://, or one of {', '.join(p + '://' for p in ATOMIC_PROTOCOLS)}"
            )
        import fsspec

        kwargs = dict(options or {})
        if protocol in ("s3", "s3a"):
            kwargs.setdefault("use_listings_cache", False)
            # fail in seconds, not minutes, when the endpoint is down; a few retries for transient errors
            kwargs.setdefault(
                "config_kwargs",
                {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 3, "mode": "standard"}},
            )
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
        self.protocol = protocol
        # s3fs asks an object's size (a HEAD) before each GET, to fetch large ones in concurrent ranges: one GET
        # per object instead (ours are a few MB at most; the HEAD doubled every read's requests and latency)
        self._read_kw: Dict[str, Any] = {"max_concurrency": 1} if protocol in ("s3", "s3a") else {}
        self._stamps: Dict[str, Tuple[float, List[str], int]] = {}  # directory -> (listed at, names, stamp)

    def resolve(self, relpath: str) -> str:
        full = posixpath.normpath(posixpath.join(self.base, relpath))
        if not full.startswith(self.base + "/"):
            raise PathOutsideRootError(f"path {relpath!r} points outside the shared root {self.url!r}")
        return full

    def size(self, relpath: str) -> int:
        return int(self.fs.size(self.resolve(relpath)))  # FileNotFoundError when absent

    def prepare(self, directories: Iterable[str]) -> None:
        """Object stores have no directories: check that we can write and delete an object instead, so a
        wrong bucket, wrong credentials or an unreachable endpoint fail here, before anything starts."""
        probe = f"{self.base}/.probe-{os.getpid()}-{threading.get_ident()}"
        try:
            self._check_bucket()
            self.fs.pipe_file(probe, b"")
            self.fs.rm_file(probe)
        except StorageUnavailableError:
            raise
        except Exception as exc:  # botocore, aiohttp and fsspec raise many types; all mean "unusable"
            cause = " ".join(str(exc).split()) or type(exc).__name__
            raise StorageUnavailableError(
                f"shared store {self.url}: cannot write there ({type(exc).__name__}: {cause}); check the bucket, "
                f"the endpoint (AWS_ENDPOINT_URL) and the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                f"AWS_PROFILE or parallel.storage_options)"
            ) from None

    def _check_bucket(self) -> None:
        """S3: the bucket must exist before anything is written. A store may create a missing bucket on the first
        PUT (SeaweedFS does for an admin identity, ``-s3.autoCreateBucket``), which would make a misspelt bucket
        a new, empty one and start the run there; one LIST of at most one key asks instead (a wrong key or an
        unreachable endpoint fails it with its own cause)."""
        if self.protocol not in ("s3", "s3a"):
            return
        bucket = self.base.split("/", 1)[0]
        try:
            self.fs.call_s3("list_objects_v2", Bucket=bucket, MaxKeys=1)
        except FileNotFoundError:
            raise StorageUnavailableError(
                f"shared store {self.url}: bucket does not exist: {bucket}; create it first (e.g. `aws s3 mb "
                f"s3://{bucket}`) or name an existing one in --shared-dir (or parallel.shared_dir)"
            ) from None

    def write_atomic(self, path: str, write: Callable[[Any], None], durable: bool = False) -> None:
        """One PUT: atomic, and durable once it returns (``durable`` asks nothing more of an object store)."""
        buffer = io.BytesIO()
        write(buffer)
        self.fs.pipe_file(path, buffer.getvalue())

    def makedirs(self, directory: str) -> None:
        """Object stores have no directories: nothing to make."""

    def read_bytes(self, path: str) -> bytes:
        return bytes(self.fs.cat_file(path, **self._read_kw))  # FileNotFoundError when absent

    def readable(self, path: str) -> io.BytesIO:
        return io.BytesIO(self.fs.cat_file(path, **self._read_kw))  # FileNotFoundError when absent

    def read_many(self, paths: List[str]) -> Dict[str, Optional[bytes]]:
        """Every path's bytes (None when absent), fetched concurrently: one round of requests, not n. A fault
        of the store raises it; any other error is a StorageError naming the path."""
        out: Dict[str, Optional[bytes]] = {}
        for path, data in self.fs.cat(list(paths), on_error="return", **self._read_kw).items():
            if isinstance(data, FileNotFoundError):
                out[path] = None
                continue
            if isinstance(data, self.faults):  # the store failing (SharedStorage makes it a StorageFaultError)
                raise data
            if isinstance(data, BaseException):
                raise StorageError(f"{path}: cannot read ({type(data).__name__}: {data})") from data
            out[path] = data
        return out

    def unlink(self, path: str) -> bool:
        try:
            self.fs.rm_file(path)
            return True
        except FileNotFoundError:
            return False

    def listdir(self, directory: str) -> List[str]:
        """The names under ``directory`` (objects and "subdirectories": prefixes of others). A store whose keys
        live in a real file tree (SeaweedFS's filer) keeps a directory that its last object left and lists it as
        an empty object named ``directory/``: that is the directory itself, not a name in it."""
        directory = directory.rstrip("/")
        try:
            paths = [p.rstrip("/") for p in self.fs.ls(directory, detail=False)]
        except FileNotFoundError:  # no object under that prefix yet
            return []
        return [posixpath.basename(p) for p in paths if p != directory]

    def isfile(self, path: str) -> bool:
        """Whether an object is at ``path``; a store that fails raises (fsspec's ``isfile`` answers False to every
        error: an unreachable store said "no such checkpoint", and a policy announced during an outage was
        refused as a lie instead of kept and sent again)."""
        try:
            return bool(self.fs.info(path)["type"] == "file")
        except FileNotFoundError:
            return False

    def dir_stamp(self, directory: str) -> int:
        """The local time (ns) at which the listing last changed; listed at most every ``_REMOTE_POLL_S``."""
        return self._listing(directory)[2]

    def changed_names(self, directory: str, seen: Optional[int]) -> Tuple[int, Optional[List[str]]]:
        """(the stamp, the names) of the listing that made it, or (the stamp, None) when that is ``seen``: one LIST
        request at most every ``_REMOTE_POLL_S``, and no second one for the names."""
        _, names, stamp = self._listing(directory)
        return stamp, None if stamp == seen else list(names)

    def _listing(self, directory: str) -> Tuple[float, List[str], int]:
        now = time.monotonic()
        known = self._stamps.get(directory)
        if known is not None and now - known[0] < _REMOTE_POLL_S:
            return known
        current = sorted(self.listdir(directory))
        stamp = known[2] if known is not None and known[1] == current else time.time_ns()
        self._stamps[directory] = (now, current, stamp)
        return self._stamps[directory]

    def mtime(self, path: str) -> float:
        return float(self.fs.modified(path).timestamp())

    def regular_mtime(self, path: str) -> float:
        """The object's mtime; FileNotFoundError when no object has that name (a "directory": a prefix of others)."""
        if not self.fs.isfile(path):
            raise _not_regular(path)
        return self.mtime(path)

    def open_regular(self, path: str) -> OpenedFile:
        """The object's bytes (FileNotFoundError when no object has that name)."""
        try:
            data = self.fs.cat_file(path, **self._read_kw)
        except (IsADirectoryError, NotADirectoryError):
            raise _not_regular(path) from None
        return OpenedFile(io.BytesIO(data), len(data), None)


@runtime_checkable
class Backend(Protocol):
    """Where the shared store's bytes live: what :class:`~parallel_rl.storage.SharedStorage` and its families ask
    of :class:`LocalBackend` and :class:`FsspecBackend` (a new store is one more class with these members; the
    storage tests check each backend against it). Paths are full paths inside the root (``resolve``'s), except
    ``size``'s, which is relative to it. A remote backend also has ``read_many`` (the families ask it only when
    ``remote``)."""

    remote: bool  # an object store: no temp files, no directories, one PUT per file
    faults: Tuple[Type[BaseException], ...]  # what the store failing raises (FileNotFoundError is not a fault)
    base: str  # the root as this backend names it (a directory; a store's bucket/prefix)
    url: str  # the root as other processes are told to open it

    def resolve(self, relpath: str) -> str:
        """The full path of ``relpath`` inside the root; PathOutsideRootError when it escapes."""
        ...

    def size(self, relpath: str) -> int: ...

    def prepare(self, directories: Iterable[str]) -> None:
        """Make the store usable (its directories; a store: a probe object): StorageUnavailableError if not."""
        ...

    def write_atomic(self, path: str, write: Callable[[Any], None], durable: bool = False) -> None:
        """Write through ``write(fileobj)`` so that a reader sees the old file or the whole new one."""
        ...

    def makedirs(self, directory: str) -> None: ...

    def read_bytes(self, path: str) -> bytes: ...

    def readable(self, path: str) -> Union[str, IO[bytes]]:
        """What numpy, torch and zipfile open: a local path, or the object's bytes."""
        ...

    def unlink(self, path: str) -> bool:
        """Remove ``path``; False when it was already gone."""
        ...

    def listdir(self, directory: str) -> List[str]: ...

    def isfile(self, path: str) -> bool: ...

    def dir_stamp(self, directory: str) -> int:
        """A number that changes when the directory's listing changes (new checkpoints)."""
        ...

    def changed_names(self, directory: str, seen: Optional[int]) -> Tuple[int, Optional[List[str]]]:
        """(``dir_stamp``, the names in the directory), or (``dir_stamp``, None) when the listing has not changed
        since ``seen`` (a stamp this returned before): what a poller of new checkpoints asks, in one request."""
        ...

    def mtime(self, path: str) -> float: ...

    def regular_mtime(self, path: str) -> float:
        """The mtime of the regular file at ``path``; FileNotFoundError for anything else (a link, a FIFO, ...)."""
        ...

    def open_regular(self, path: str) -> OpenedFile:
        """The regular file at ``path``, opened for reading; FileNotFoundError for anything else."""
        ...
