"""What every artifact family of the shared store shares: its directory under the root, the store's backend
and health, and (numbered families) the listing of its versions."""

from __future__ import annotations

import posixpath
from typing import List, Optional

from ..errors import StorageError
from .health import store_op
from .names import Numbered


class Family:
    """One kind of file on the shared store (chunks, checkpoints, snapshots, ...).

    The backend is looked up on the store at each use, never kept: replacing ``store.backend`` (a fault
    injector in the tests) changes every family at once."""

    noun = "file"  # what store_op's messages call one of these files

    def __init__(self, store, directory: str):
        self.store = store
        self.directory = posixpath.join(store.backend.base, directory)

    @property
    def backend(self):
        return self.store.backend


class NumberedFiles(Family):
    """A family of numbered files (:class:`.names.Numbered`): a version's path, the versions there are."""

    def __init__(self, store, series: Numbered, noun: str):
        super().__init__(store, series.directory)
        self.series, self.noun = series, noun

    def path(self, version: int) -> str:
        if int(version) < 0:
            raise StorageError(f"{self.noun} version must be >= 0, got {version}")
        return posixpath.join(self.directory, self.series.name(version))

    @store_op("listing {noun}s")
    def versions(self) -> List[int]:
        """The versions on the store, oldest first ([] when the directory is not there: the league's is made
        by its first snapshot)."""
        try:
            names = self.backend.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(v for v in map(self.series.version, names) if v is not None)

    def latest(self) -> Optional[int]:
        versions = self.versions()
        return versions[-1] if versions else None
