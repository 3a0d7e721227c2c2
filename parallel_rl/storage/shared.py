"""The shared filesystem: every path is built here, inside one root.

The root is a local directory (a plain path or ``file://``: the default and the fastest) or an
object-store URL through fsspec (``s3://bucket/prefix`` via s3fs, ``gs://``, ``az://``, ``memory://``):
any store whose whole-object writes are atomic. :class:`SharedStorage` has one API for both; the
difference lives in two small backends (:mod:`.backends`).

Layout under the root (names in :mod:`.names`, see docs/storage.md)::

    data/<chunk_name>.npz          step-data chunks (columns; loaded with allow_pickle=False)     storage.chunks
    policy/policy_000001234.pt     policy checkpoints (torch.save of a state dict; weights_only=True) .policies
    policy/best.json               the best evaluated version (its record); policy/held_000001234: a
                                   version held from pruning (under evaluation, or the best)
    learner/learner_000001234.pt   full learner state (model, target network, optimizer) for resume .learner_states
    coordinator/state_000000042.npz + .json   coordinator snapshots (replay index arrays; the rest as JSON) .states
    run.lock                       the lock of the run using the directory (lock.lock_shared_dir)
    league/snapshot_000001234.pt   two-player self-play: policy versions frozen into the opponent pool  .league
                                   (copies of policy checkpoints, so pruning those never removes them)
    videos/video_000001234.mp4     an evaluator's recorded episode of that policy version             .videos
                                   (record_every; made by the first video; the newest KEEP_VIDEOS kept)

Every local file is written to a temporary name in its directory and moved into
place with ``os.replace``; an object is written with one whole-object PUT. Either
way a reader never sees half a file. Names that
come from messages are validated and resolved; anything pointing outside the
root raises :class:`PathOutsideRootError`.
"""

from __future__ import annotations

import os
import posixpath
import time
from typing import Mapping, Optional

from ..errors import PathOutsideRootError
from .backends import Backend, FsspecBackend, LocalBackend, is_remote
from .checkpoints import LeagueSnapshots, LearnerStates, PolicyCheckpoints
from .chunks import ChunkFiles
from .defaults import storage_default_config  # noqa: F401 (the section this module reads, by its seed name)
from .health import StorageHealth
from .names import LEAGUE, LEARNER, OURS, POLICY, TEMP_PREFIX, TENSORBOARD_DIR, TENSORBOARD_EVENTS_RE, VIDEO
from .states import CoordinatorStates
from .videos import Videos


class SharedStorage:
    """Paths and file operations on the shared filesystem root (a local directory or an object-store URL).

    ``root`` is what other processes are told to open: the absolute local path, or the store's URL.
    ``options`` go to the fsspec filesystem of a remote root (``parallel.storage_options``). ``create=False`` opens
    it for reading only (``plot``, ``eval``): no directory is made and no probe object written.

    Each artifact family is an object of its own, called directly: ``chunks``, ``policies``, ``learner_states``,
    ``league``, ``states``, ``videos`` (``storage.chunks.write(name, columns)``, ``storage.policies.latest()``)."""

    def __init__(self, root: str, options: Optional[Mapping] = None, create: bool = True):
        self.backend: Backend = FsspecBackend(root, options) if is_remote(root) else LocalBackend(root)
        self.root = self.backend.url
        # what it was opened with: a process handed the same again keeps this one (each opening of an object
        # store makes a client and three requests: the bucket check and a probe object written and deleted)
        self.opened_as = (root, dict(options or {}))
        self.remote = self.backend.remote
        self.health = StorageHealth()
        self.chunks = ChunkFiles(self)
        self.policies = PolicyCheckpoints(self, POLICY, "policy checkpoint")
        self.learner_states = LearnerStates(self, LEARNER, "learner state")
        self.league = LeagueSnapshots(self, LEAGUE, "league snapshot")  # its directory: made by its first snapshot
        self.states = CoordinatorStates(self)
        self.videos = Videos(self, VIDEO, "video")  # its directory: made by the first recorded episode
        self.data_dir, self.policy_dir = self.chunks.directory, self.policies.directory
        self.learner_dir, self.league_dir = self.learner_states.directory, self.league.directory
        self.state_dir = self.states.directory
        if create:
            self.backend.prepare((self.data_dir, self.policy_dir, self.learner_dir, self.state_dir))

    def __repr__(self) -> str:
        return f"SharedStorage({self.root!r})"

    # ---- containment -------------------------------------------------------------
    def resolve(self, relpath: str) -> str:
        """Full path of ``relpath`` inside the root; refuses anything that escapes it."""
        if not isinstance(relpath, str) or not relpath or "\x00" in relpath:
            raise PathOutsideRootError(f"invalid path {relpath!r}")
        return self.backend.resolve(relpath)

    def local_dir(self, *parts: str, fallback: str) -> Optional[str]:
        """A directory for files that need a local filesystem (TensorBoard's event files): under the root
        when it is local, else under ``fallback`` (the process's experiment directory)."""
        return os.path.join(fallback if self.remote else self.root, *parts)

    # ---- the whole store --------------------------------------------------------------
    def prune_checkpoints(self, keep: int, states: bool = True) -> int:
        """Delete all but the newest ``keep`` policy and learner checkpoints (and the held policy versions: the
        best, those under evaluation); returns files removed. ``states=False``: the policy checkpoints only (no
        learner state was saved since the last prune: nothing to remove there, and a listing less, one request
        on an object store)."""
        return self.policies.prune(keep) + (self.learner_states.prune(keep) if states else 0)

    def _our_files(self):
        """(directory, name, is_temp) of every file of ours on the shared store: the families' and TensorBoard's
        event files (a directory per writer: a fresh run must not leave the last run's scalars to ``plot``)."""
        places = list(OURS.items())
        tensorboard = posixpath.join(self.backend.base, TENSORBOARD_DIR)
        places += [
            (posixpath.join(TENSORBOARD_DIR, writer), (TENSORBOARD_EVENTS_RE,)) for writer in self._listdir(tensorboard)
        ]
        for relative, patterns in places:
            directory = posixpath.join(self.backend.base, relative)
            for name in self._listdir(directory):
                temp = name.startswith(TEMP_PREFIX)
                if temp or any(p.fullmatch(name) for p in patterns):
                    yield directory, name, temp

    def _listdir(self, directory: str) -> list:
        try:
            return self.backend.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):  # the league's is made by its first snapshot, ...
            return []

    def reset(self) -> int:
        """Remove every file of ours (chunks, checkpoints, coordinator state, temp files) for a fresh run;
        returns the count."""
        return sum(self.backend.unlink(posixpath.join(d, name)) for d, name, _ in list(self._our_files()))

    def remove_stale_temp_files(self, max_age: float) -> int:
        """Remove temp files untouched for ``max_age`` seconds: left by a writer killed mid-write (local
        disks only: an object store's writes leave no temp objects, and its 7 listings found none)."""
        if self.remote:
            return 0
        cutoff, removed = time.time() - max_age, 0
        for directory, name, temp in list(self._our_files()):
            path = posixpath.join(directory, name)
            try:
                if temp and self.backend.mtime(path) < cutoff:
                    removed += self.backend.unlink(path)
            except FileNotFoundError:  # renamed into place meanwhile
                pass
        return removed


def newest_state(root: str) -> Optional[dict]:
    """The newest coordinator state saved in the local store at ``root``, read only (nothing is made there): None
    when it holds none; StorageError when every state there is damaged. What `plot`, `compare` and the service read
    a run's curve from."""
    if not os.path.isdir(os.path.join(root, "coordinator")):
        return None
    found = SharedStorage(root, create=False).states.latest()
    return None if found is None else found[0]
