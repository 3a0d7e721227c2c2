"""The shared filesystem: every path is built here, inside one root.

Layout under the root (see docs/storage.md)::

    data/<chunk_name>.npz          step-data chunks (columns; loaded with allow_pickle=False)
    policy/policy_000001234.pt     policy checkpoints (torch.save of a state dict; weights_only=True)
    learner/learner_000001234.pt   full learner state (model, target network, optimizer) for resume
    coordinator/state_000000042.npz + .json   coordinator snapshots (replay index arrays; the rest as JSON)
    run.lock                       the lock of the run using the directory (lock_shared_dir)
    league/snapshot_000001234.pt   two-player self-play: policy versions frozen into the opponent pool
                                   (copies of policy checkpoints, so pruning those never removes them)

Every file is written to a temporary name in its directory and moved into
place with ``os.replace``, so a reader never sees half a file. Names that
come from messages are validated and resolved; anything pointing outside the
root raises :class:`PathOutsideRootError`.
"""
from __future__ import annotations

import io
import json
import logging
import os
import re
import threading
import time
import zipfile
from typing import Any, Callable, Dict, List, Mapping, Optional

import numpy as np

from .errors import PathOutsideRootError, SharedDirInUseError, StateFormatError, StorageError

logger = logging.getLogger(__name__)

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_POLICY_RE = re.compile(r"^policy_(\d{9,})\.pt$")
_LEARNER_RE = re.compile(r"^learner_(\d{9,})\.pt$")
_CHUNK_RE = re.compile(r"^.+\.npz$")
_STATE_RE = re.compile(r"^state_(\d{9,})\.(json|npz)$")
_STATE_JSON_RE = re.compile(r"^state_(\d{9,})\.json$")
_SNAPSHOT_RE = re.compile(r"^snapshot_(\d{9,})\.pt$")

# the coordinator state format this code writes and reads; a file with another one is refused
COORDINATOR_STATE_FORMAT = 1
# coordinator snapshots kept: the newest, and the one before as a fallback when the newest is damaged
KEEP_COORDINATOR_STATES = 2
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


def atomic_save_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Save columns as an uncompressed ``.npz`` atomically (object arrays are refused)."""
    for name, arr in arrays.items():
        if np.asarray(arr).dtype == object:
            raise StorageError(f"column {name!r} has dtype object; only plain numeric/bool/str arrays are stored")
    buffer = io.BytesIO()  # zipfile writes member by member with seeks; the disk gets one write
    np.savez(buffer, **arrays)
    _atomic_write(path, lambda f: f.write(buffer.getbuffer()))


def load_npz(path: str) -> Dict[str, np.ndarray]:
    """Load every array of an ``.npz`` without ever unpickling."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except FileNotFoundError:
        raise
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise StorageError(f"{path}: not a valid step-data chunk ({exc})") from exc


class SharedStorage:
    """Paths and file operations on the shared filesystem root."""

    def __init__(self, root: str):
        self.root = os.path.realpath(os.path.abspath(root))
        self.data_dir = os.path.join(self.root, "data")
        self.policy_dir = os.path.join(self.root, "policy")
        self.learner_dir = os.path.join(self.root, "learner")
        self.state_dir = os.path.join(self.root, "coordinator")
        self.league_dir = os.path.join(self.root, "league")
        try:
            for d in (self.data_dir, self.policy_dir, self.learner_dir, self.state_dir):
                os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the shared directory {self.root!r}: {exc}; pass --shared-dir") from exc

    def __repr__(self) -> str:
        return f"SharedStorage({self.root!r})"

    # ---- containment -------------------------------------------------------------
    def resolve(self, relpath: str) -> str:
        """Absolute path of ``relpath`` inside the root; refuses anything that escapes it."""
        if not isinstance(relpath, str) or not relpath or "\x00" in relpath:
            raise PathOutsideRootError(f"invalid path {relpath!r}")
        full = os.path.realpath(os.path.join(self.root, relpath))
        if os.path.commonpath([full, self.root]) != self.root or full == self.root:
            raise PathOutsideRootError(f"path {relpath!r} points outside the shared root {self.root!r}")
        return full

    @staticmethod
    def check_name(name: str) -> str:
        if not isinstance(name, str) or not _NAME_RE.match(name) or ".." in name:
            raise PathOutsideRootError(
                f"invalid file name {name!r}: use letters, digits, '_', '-', '.' (max 128, no '..')"
            )
        return name

    # ---- step data ---------------------------------------------------------------
    def chunk_path(self, name: str) -> str:
        return self.resolve(os.path.join("data", self.check_name(name) + ".npz"))

    def write_chunk(self, name: str, columns: Mapping[str, np.ndarray]) -> str:
        path = self.chunk_path(name)
        atomic_save_npz(path, columns)
        return path

    def read_chunk(self, name: str) -> Dict[str, np.ndarray]:
        return load_npz(self.chunk_path(name))

    def chunk_rows(self, name: str) -> int:
        """The number of rows of chunk ``name``, read from its column headers (no data is read).

        Raises FileNotFoundError when it is not there, StorageError when it is not a chunk whose
        columns all have the same length."""
        path = self.chunk_path(name)
        lengths = set()
        try:
            with zipfile.ZipFile(path) as archive:
                for member in archive.namelist():
                    with archive.open(member) as f:
                        version = np.lib.format.read_magic(f)
                        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                       else np.lib.format.read_array_header_2_0)
                        shape, _, _ = read_header(f)  # the header only, never the data
                    lengths.add(shape[0] if shape else -1)
        except FileNotFoundError:
            raise
        except (ValueError, OSError, zipfile.BadZipFile) as exc:
            raise StorageError(f"{path}: not a valid step-data chunk ({exc})") from exc
        if len(lengths) != 1 or min(lengths) < 0:
            raise StorageError(f"{path}: columns of different or no lengths {sorted(lengths)}; not a chunk")
        return lengths.pop()

    def delete_chunk(self, name: str) -> bool:
        return _unlink(self.chunk_path(name))

    def list_chunks(self) -> List[str]:
        return sorted(f[:-4] for f in os.listdir(self.data_dir) if f.endswith(".npz") and not f.startswith("."))

    # ---- checkpoints ---------------------------------------------------------------
    def policy_path(self, version: int) -> str:
        if int(version) < 0:
            raise StorageError(f"policy version must be >= 0, got {version}")
        return os.path.join(self.policy_dir, f"policy_{int(version):09d}.pt")

    def learner_path(self, version: int) -> str:
        return os.path.join(self.learner_dir, f"learner_{int(version):09d}.pt")

    def save_policy(self, version: int, state_dict: Mapping) -> str:
        path = self.policy_path(version)
        _torch_save_atomic(path, state_dict)
        return path

    def load_policy(self, version: int) -> Dict:
        return _torch_load(self.policy_path(version))

    def save_learner_state(self, version: int, state: Mapping) -> str:
        path = self.learner_path(version)
        _torch_save_atomic(path, state)
        return path

    def load_learner_state(self, version: int) -> Dict:
        return _torch_load(self.learner_path(version))

    def latest_good_learner_state(self) -> Optional[tuple]:
        """``(version, state)`` of the newest learner state that loads, or None when none does.

        A corrupt newest one (a crash mid-write on a disk without fsync, bit rot) is logged and skipped:
        resuming from the one before loses ``save_state_every`` iterations, not the run."""
        for version in reversed(self._versions(self.learner_dir, _LEARNER_RE)):
            try:
                return version, self.load_learner_state(version)
            except FileNotFoundError:  # pruned since it was listed
                continue
            except StorageError as exc:
                logger.error("storage: skipping learner state %d: %s", version, exc)
        return None

    # ---- league snapshots (two-player self-play) ------------------------------------------
    def league_snapshot_path(self, version: int) -> str:
        if int(version) < 0:
            raise StorageError(f"snapshot version must be >= 0, got {version}")
        return os.path.join(self.league_dir, f"snapshot_{int(version):09d}.pt")

    def snapshot_policy(self, version: int) -> str:
        """Freeze policy checkpoint ``version`` into the league (a byte copy: no torch needed, the
        coordinator never imports it). Raises FileNotFoundError when the checkpoint is gone."""
        import shutil

        path = self.league_snapshot_path(version)
        os.makedirs(self.league_dir, exist_ok=True)  # made by the first snapshot: only self-play runs have one
        with open(self.policy_path(version), "rb") as src:
            _atomic_write(path, lambda dst: shutil.copyfileobj(src, dst), durable=True)
        return path

    def load_league_snapshot(self, version: int) -> Dict:
        """A frozen snapshot's state dict (FileNotFoundError when it left the league)."""
        return _torch_load(self.league_snapshot_path(version))

    def remove_league_snapshot(self, version: int) -> bool:
        return _unlink(self.league_snapshot_path(version))

    def league_snapshot_versions(self) -> List[int]:
        return self._versions(self.league_dir, _SNAPSHOT_RE) if os.path.isdir(self.league_dir) else []

    @staticmethod
    def _versions(directory: str, pattern: re.Pattern) -> List[int]:
        out = []
        for name in os.listdir(directory):
            m = pattern.match(name)
            if m:
                out.append(int(m.group(1)))
        return sorted(out)

    def policy_versions(self) -> List[int]:
        return self._versions(self.policy_dir, _POLICY_RE)

    def policy_dir_stamp(self) -> int:
        """Changes when a checkpoint is added or removed (the policy directory's mtime)."""
        return os.stat(self.policy_dir).st_mtime_ns

    def latest_policy_version(self) -> Optional[int]:
        versions = self.policy_versions()
        return versions[-1] if versions else None

    def latest_learner_version(self) -> Optional[int]:
        versions = self._versions(self.learner_dir, _LEARNER_RE)
        return versions[-1] if versions else None

    def _our_files(self):
        """(directory, name, is_temp) of every file of ours on the shared disk."""
        for directory, pattern in ((self.data_dir, _CHUNK_RE), (self.policy_dir, _POLICY_RE),
                                   (self.learner_dir, _LEARNER_RE), (self.state_dir, _STATE_RE),
                                   (self.league_dir, _SNAPSHOT_RE)):
            if not os.path.isdir(directory):  # the league's is made by the first snapshot
                continue
            for name in os.listdir(directory):
                if name.startswith(".tmp-") or pattern.match(name):
                    yield directory, name, name.startswith(".tmp-")

    # ---- coordinator state ------------------------------------------------------------
    def state_paths(self, seq: int) -> tuple:
        """(json, npz) paths of coordinator snapshot ``seq``."""
        base = os.path.join(self.state_dir, f"state_{int(seq):09d}")
        return base + ".json", base + ".npz"

    def coordinator_states(self) -> List[int]:
        """Sequence numbers of the complete coordinator snapshots (their JSON, written last, exists), oldest first."""
        return self._versions(self.state_dir, _STATE_JSON_RE)

    def save_coordinator_state(self, seq: int, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> str:
        """Write snapshot ``seq``: the arrays (``.npz``), then the JSON that names them (the commit point); prune
        all but the newest :data:`KEEP_COORDINATOR_STATES`. Returns the JSON path."""
        json_path, npz_path = self.state_paths(seq)
        atomic_save_npz(npz_path, arrays)
        body = json.dumps({"format": COORDINATOR_STATE_FORMAT, "seq": int(seq), "arrays": os.path.basename(npz_path),
                           **meta}).encode()
        _atomic_write(json_path, lambda f: f.write(body))
        for old in self.coordinator_states()[:-KEEP_COORDINATOR_STATES]:
            for path in self.state_paths(old):
                _unlink(path)
        return json_path

    def load_coordinator_state(self, seq: int) -> tuple:
        """(meta, arrays) of snapshot ``seq``; StorageError naming the file when it is damaged or of another format."""
        json_path, npz_path = self.state_paths(seq)
        try:
            with open(json_path, "rb") as f:
                meta = json.loads(f.read())
        except (OSError, ValueError) as exc:
            raise StorageError(f"{json_path}: not a readable coordinator state ({exc})") from exc
        fmt = meta.get("format") if isinstance(meta, dict) else None
        if fmt != COORDINATOR_STATE_FORMAT:
            raise StateFormatError(f"{json_path}: coordinator state format {fmt!r}, this parallel_rl reads format "
                               f"{COORDINATOR_STATE_FORMAT} only; run the parallel_rl version that wrote it, or "
                               f"start over with --fresh")
        try:
            arrays = load_npz(npz_path)
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
            except StateFormatError:
                raise  # written by another version: falling back to an older snapshot would lose its work
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
        return sum(_unlink(os.path.join(d, name)) for d, name, _ in list(self._our_files()))

    def remove_stale_temp_files(self, max_age: float) -> int:
        """Remove temp files untouched for ``max_age`` seconds: left by a writer killed mid-write."""
        cutoff, removed = time.time() - max_age, 0
        for directory, name, temp in list(self._our_files()):
            path = os.path.join(directory, name)
            try:
                if temp and os.stat(path).st_mtime < cutoff:
                    removed += _unlink(path)
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
                removed += _unlink(path_of(version))
        return removed


class SharedDirLock:
    """An exclusive ``flock`` on ``<root>/run.lock``, held for a run's life. The kernel drops it when the
    process ends, however it ends, so a crashed run never leaves the directory locked."""

    def __init__(self, path: str, fd: int):
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


def _torch_save_atomic(path: str, state: Mapping) -> None:
    import torch

    _atomic_write(path, lambda f: torch.save(dict(state), f), durable=True)  # checkpoints promise durability


def _torch_load(path: str) -> Dict:
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as exc:  # torch raises many types for corrupt or unsafe files
        raise StorageError(f"{path}: not a loadable checkpoint ({type(exc).__name__}: {exc})") from exc
