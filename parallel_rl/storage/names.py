"""Every name on the shared store, in one place: each artifact family's directory, file names and pattern.

Nothing else spells a file name or a directory of the store (see docs/storage.md for the layout)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from ..errors import PathOutsideRootError

# every pattern here is applied with fullmatch: with match, "$" lets a trailing newline through ("name\n")
# names that come from messages (chunk names): one plain file name, never a path
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
# what a writer's temp file starts with (local disks only): "<TEMP_PREFIX><pid>-<thread>-<final name>"
TEMP_PREFIX = ".tmp-"
# the lock file of the run that uses a shared directory (see lock.lock_shared_dir)
RUN_LOCK_NAME = "run.lock"

CHUNK_DIR = "data"  # step-data chunks: <chunk name>.npz, the name chosen by the collector
CHUNK_SUFFIX = ".npz"
CHUNK_RE = re.compile(r"^.+\.npz$")


def chunk_name(writer: str, seq: int) -> str:
    """A collector's ``seq``-th chunk: ``<writer>-<seq, 7 digits or more>`` (on-policy learners follow a
    collector's envs through its consecutive chunks by these names: :func:`parse_chunk_name`)."""
    return f"{writer}-{int(seq):07d}"


def parse_chunk_name(name: str):
    """(writer, seq) of a :func:`chunk_name`, None for a chunk named otherwise."""
    writer, _, seq = name.rpartition("-")
    return (writer, int(seq)) if writer and seq.isdigit() else None


@dataclass(frozen=True)
class Numbered:
    """A family of numbered files: ``<directory>/<prefix><version, 9 digits or more><suffix>``."""

    directory: str
    prefix: str
    suffix: str
    pattern: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        pattern = re.compile(rf"^{re.escape(self.prefix)}(\d{{9,}}){re.escape(self.suffix)}$")
        object.__setattr__(self, "pattern", pattern)

    def name(self, version: int) -> str:
        return f"{self.prefix}{int(version):09d}{self.suffix}"

    def version(self, filename: str) -> Optional[int]:
        """The version in ``filename``, None when it is not one of this family's names."""
        m = self.pattern.fullmatch(filename)
        return int(m.group(1)) if m else None


POLICY = Numbered("policy", "policy_", ".pt")  # model weights, written by the learner
# an empty file naming a policy version the coordinator holds (under evaluation, or the best): never pruned
POLICY_HOLD = Numbered("policy", "held_", "")
# the run's best evaluated policy (JSON: version, eval return, env steps, train iterations), beside the policies
BEST_RECORD = "best.json"
BEST_RECORD_RE = re.compile(re.escape(BEST_RECORD))
LEARNER = Numbered("learner", "learner_", ".pt")  # full learner state for resume
STATE_JSON = Numbered("coordinator", "state_", ".json")  # a coordinator snapshot (written last: the commit point)
STATE_ARRAYS = Numbered("coordinator", "state_", ".npz")  # its replay index arrays
LEAGUE = Numbered("league", "snapshot_", ".pt")  # self-play: policy versions frozen into the opponent pool
VIDEO = Numbered("videos", "video_", ".mp4")  # an evaluator's recorded episode of that policy version

# TensorBoard's event files of a local root: <TENSORBOARD_DIR>/<worker id>/events.out.tfevents.* (SharedStorage.local_dir)
TENSORBOARD_DIR = "tensorboard"
TENSORBOARD_EVENTS_RE = re.compile(r"^events\.out\.tfevents\..+$")

# the patterns of our files in each directory (what a fresh run removes; and the event files of every directory
# under TENSORBOARD_DIR)
OURS = {
    CHUNK_DIR: (CHUNK_RE,),
    POLICY.directory: (POLICY.pattern, POLICY_HOLD.pattern, BEST_RECORD_RE),
    LEARNER.directory: (LEARNER.pattern,),
    STATE_JSON.directory: (STATE_JSON.pattern, STATE_ARRAYS.pattern),
    LEAGUE.directory: (LEAGUE.pattern,),
    VIDEO.directory: (VIDEO.pattern,),
}


def check_name(name: str) -> str:
    """``name`` when it is a plain file name (a chunk's, from a message), else PathOutsideRootError."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or ".." in name:
        raise PathOutsideRootError(f"invalid file name {name!r}: use letters, digits, '_', '-', '.' (max 128, no '..')")
    return name
