"""Where the shared store's bytes live: a local directory or an object store through fsspec.

A backend knows paths and bytes only (file formats are :mod:`.formats`'s, names :mod:`.names`'s):
:class:`LocalBackend` writes a temp file and ``os.replace``s it into place; :class:`FsspecBackend`
writes each object with one whole-object PUT. Either way a reader never sees half a file."""
from __future__ import annotations

import io
import os
import posixpath
import re
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

from ..errors import PathOutsideRootError, StorageError, StorageUnavailableError
from .names import TEMP_PREFIX

# protocols whose writes replace a whole object at once (a reader sees the old object or the new one)
ATOMIC_PROTOCOLS = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "memory")
LOCAL_PROTOCOLS = ("", "file", "local")
# a remote store's policy listing is asked for at most this often by dir_stamp (one LIST request)
_REMOTE_POLL_S = 0.25


def split_url(url: str) -> tuple:
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
    def readable(path: str):
        """What numpy, torch and zipfile open: the path itself on a local disk."""
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

    def makedirs(self, directory: str) -> None:
        """Object stores have no directories: nothing to make."""

    def read_bytes(self, path: str) -> bytes:
        return self.fs.cat_file(path)  # FileNotFoundError when absent

    def readable(self, path: str) -> io.BytesIO:
        return io.BytesIO(self.fs.cat_file(path))  # FileNotFoundError when absent

    def read_many(self, paths: List[str]) -> Dict[str, Optional[bytes]]:
        """Every path's bytes (None when absent), fetched concurrently: one round of requests, not n. A fault
        of the store raises it; any other error is a StorageError naming the path."""
        out: Dict[str, Optional[bytes]] = {}
        for path, data in self.fs.cat(list(paths), on_error="return").items():
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
