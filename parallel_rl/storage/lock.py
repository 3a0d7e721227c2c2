"""The run lock: one run (or coordinator) at a time uses a shared directory (``run.lock``, see docs/storage.md)."""

from __future__ import annotations

import logging
import os
import posixpath
import time
from typing import TYPE_CHECKING, Optional

from ..errors import SharedDirInUseError, StorageError
from .names import RUN_LOCK_NAME

if TYPE_CHECKING:
    from .shared import SharedStorage

logger = logging.getLogger(__name__)


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
    if storage.remote:  # no flock on an object store: nothing to hold
        logger.warning(
            "storage: %s is an object store, which has no locks: make sure no other run uses it", storage.root
        )
        return SharedDirLock(posixpath.join(storage.root, RUN_LOCK_NAME), None)
    return lock_directory(
        storage.root,
        holder,
        RUN_LOCK_NAME,
        f"the shared directory {storage.root}",
        "stop that run first, or give this one another --shared-dir",
        "the shared directory's filesystem must support flock (a local disk, NFS)",
    )


def lock_directory(
    directory: str, holder: str, name: str, label: str, in_use_hint: str, no_flock_hint: str
) -> SharedDirLock:
    """An exclusive ``flock`` on ``directory/name`` for ``holder``, who is written into it (a run's shared
    directory, a service's directory); SharedDirInUseError naming ``label`` and the process that holds it, at
    once."""
    import fcntl
    import socket

    path = os.path.join(directory, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder_line = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process (it is starting)"
        os.close(fd)
        raise SharedDirInUseError(f"{label} is in use by {holder_line}; {in_use_hint}") from None
    except OSError as exc:
        os.close(fd)
        raise StorageError(f"cannot lock {path}: {exc}; {no_flock_hint}") from exc
    line = (
        f"pid {os.getpid()} on {socket.gethostname()} ({holder}, since {time.strftime('%Y-%m-%d %H:%M:%S')})\n"
    ).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, line, 0)
    return SharedDirLock(path, fd)
