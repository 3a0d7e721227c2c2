"""Recorded evaluation episodes (``videos/video_<version>.mp4``): written by an evaluator every
``record_every`` evaluations, listed by ``GET /api/v1/videos`` and played by the dashboard. The directory is
made by the first video; the newest :data:`KEEP_VIDEOS` are kept."""
from __future__ import annotations

import posixpath
from typing import Any, Dict, List

from .family import NumberedFiles
from .health import store_op
from .names import VIDEO, check_name

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

    def listing(self) -> List[Dict[str, Any]]:
        """The recorded episodes, newest first: ``name``, ``policy_version``, ``created`` (seconds since the epoch)."""
        out = []
        for version in reversed(self.versions()):
            try:
                created = self.backend.mtime(self.path(version))
            except FileNotFoundError:  # pruned since it was listed
                continue
            out.append({"name": self.name(version), "policy_version": version, "created": created})
        return out

    def source(self, name: str):
        """A local path or an in-memory file of video ``name`` (FileNotFoundError when absent or not a video)."""
        if self.series.version(check_name(name)) is None:
            raise FileNotFoundError(name)
        return self.backend.readable(posixpath.join(self.directory, name))
