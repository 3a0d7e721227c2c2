"""Recorded evaluation episodes (``videos/video_<version>.mp4``): written by an evaluator every
``record_every`` evaluations, listed by ``GET /api/v1/videos`` and played by the dashboard. The directory is
made by the first video; the newest :data:`KEEP_VIDEOS` are kept.

Anyone may read them (the API serves them without a token), so only regular files inside the store are listed or
served: a link, a FIFO, a directory or a device at a video's name (or a link in place of ``videos/``) is no video."""

from __future__ import annotations

import posixpath
from typing import Any, Dict, List

from .backends import OpenedFile
from .family import NumberedFiles
from .health import store_op
from .names import check_name

# recorded evaluation episodes kept in videos/ (the dashboard plays the newest)
KEEP_VIDEOS = 20


class Videos(NumberedFiles):
    """MP4 bytes, numbered by the policy version that played the episode."""

    def name(self, version: int) -> str:
        return self.series.name(version)

    @store_op("writing a {noun}", write=True)
    def save(self, version: int, data: bytes) -> str:
        """Store the MP4 of an evaluation episode of policy ``version``; keep the newest KEEP_VIDEOS."""
        self.backend.makedirs(self.directory)
        path = self.path(version)
        self.backend.write_atomic(path, lambda f: f.write(data))
        for old in self.versions()[:-KEEP_VIDEOS]:
            self.backend.unlink(self.path(old))
        return path

    @store_op("listing {noun}s")
    def listing(self) -> List[Dict[str, Any]]:
        """The recorded episodes, newest first: ``name``, ``policy_version``, ``created`` (seconds since the epoch)."""
        out = []
        for version in reversed(self.versions()):
            try:
                created = self.backend.regular_mtime(self.path(version))
            except FileNotFoundError:  # pruned since it was listed, or no regular file
                continue
            out.append({"name": self.name(version), "policy_version": version, "created": created})
        return out

    @store_op("reading a {noun}")
    def source(self, name: str) -> OpenedFile:
        """Video ``name`` opened for reading, with its size and mtime (FileNotFoundError when absent or not a video:
        not one of our names, or no regular file inside the store)."""
        if self.series.version(check_name(name)) is None:
            raise FileNotFoundError(name)
        return self.backend.open_regular(posixpath.join(self.directory, name))
