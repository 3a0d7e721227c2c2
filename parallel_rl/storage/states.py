"""Coordinator snapshots on the shared store: ``coordinator/state_<seq>.npz`` (the replay index arrays),
then ``state_<seq>.json`` (everything else, and the name of its arrays: written last, the commit point).
The newest two are kept: a damaged newest snapshot falls back to the one before."""

from __future__ import annotations

import json
import logging
import os
import posixpath
from typing import Any, List, Mapping, Optional

import numpy as np

from ..errors import StateFormatError, StorageError, StorageFaultError
from ..transport.codec import loads
from .family import Family, NumberedFiles
from .formats import read_npz, save_npz
from .health import store_op
from .names import STATE_ARRAYS, STATE_JSON

logger = logging.getLogger(__name__)

# the coordinator state format this code writes and reads; a file with another one is refused
COORDINATOR_STATE_FORMAT = 1
# coordinator snapshots kept: the newest, and the one before as a fallback when the newest is damaged
KEEP_COORDINATOR_STATES = 2


# a snapshot's JSON (tasks, workers, histories: the replay index is in its arrays) past this is not one
MAX_STATE_JSON_BYTES = 256 * 1024 * 1024
# each section of a snapshot (Snapshots.state_dict) and the JSON type it has; counters are integers or numbers
SECTIONS = {
    "seq": int,
    "arrays": str,
    "tasks": dict,
    "workers": list,
    "counters": dict,
    "learn_info": dict,
    "eval_history": list,
    "throughput_history": list,
    "commander": dict,
    "tasks_forgotten": int,
    "outcome": dict,
}
INT_COUNTERS = ("env_steps", "episodes", "train_iter", "policy_version")
NUMBER_COUNTERS = ("uptime", "started_at", "last_eval_return", "best_eval_return")


def check_meta(meta: Mapping[str, Any], seq: int, arrays: str) -> None:
    """ValueError naming the section unless ``meta`` (snapshot ``seq``'s JSON, of the current format) has each
    section it has of its type, the sequence number of its name, the name of its arrays ``arrays``, integer counters and
    numbers (or null) where the counters hold numbers. Deeper (a task's fields, a worker's) is the restoring part's:
    what it cannot restore is refused there, naming the file."""
    for name, kind in SECTIONS.items():
        value = meta.get(name)
        if value is None and name not in ("seq", "arrays"):  # a section left out: its reader says what it misses
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"{name!r} is {type(value).__name__}, not {kind.__name__}")
    if meta["seq"] != seq or meta["arrays"] != arrays:
        raise ValueError(f"it says it is snapshot {meta['seq']!r:.20} with arrays {meta['arrays']!r:.60}")
    counters = meta.get("counters") or {}
    for name in INT_COUNTERS:
        if name in counters and (type(counters[name]) is not int or abs(counters[name]) > 2**53):
            raise ValueError(f"counter {name!r} is {counters.get(name)!r:.40}, not an integer")
    for name in NUMBER_COUNTERS:
        value = counters.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or abs(value) > 1e300):
            raise ValueError(f"counter {name!r} is {value!r:.40}, not a number")


class CoordinatorStates(Family):
    noun = "coordinator state"

    def __init__(self, store):
        super().__init__(store, STATE_JSON.directory)
        self._complete = NumberedFiles(store, STATE_JSON, self.noun)  # a snapshot is complete once its JSON is

    def paths(self, seq: int) -> tuple:
        """(json, npz) paths of snapshot ``seq``."""
        return (
            posixpath.join(self.directory, STATE_JSON.name(seq)),
            posixpath.join(self.directory, STATE_ARRAYS.name(seq)),
        )

    def seqs(self) -> List[int]:
        """Sequence numbers of the complete snapshots (their JSON, written last, exists), oldest first."""
        return self._complete.versions()

    @store_op("writing the coordinator state", write=True)
    def save(self, seq: int, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> str:
        """Write snapshot ``seq``: the arrays (``.npz``), then the JSON that names them (the commit point); prune
        all but the newest :data:`KEEP_COORDINATOR_STATES`. Returns the JSON path."""
        json_path, npz_path = self.paths(seq)
        save_npz(self.backend, npz_path, arrays)
        body = json.dumps(
            {"format": COORDINATOR_STATE_FORMAT, "seq": int(seq), "arrays": os.path.basename(npz_path), **meta}
        ).encode()
        self.backend.write_atomic(json_path, lambda f: f.write(body))
        for old in self.seqs()[:-KEEP_COORDINATOR_STATES]:
            for path in self.paths(old):
                self.backend.unlink(path)
        return json_path

    def load(self, seq: int) -> tuple:
        """(meta, arrays) of snapshot ``seq``: the one door a coordinator state comes in by. StorageError naming the
        file when it is damaged (:func:`check_meta`; its arrays: :func:`.formats.load_npz`), StateFormatError when
        it is of another format."""
        json_path, npz_path = self.paths(seq)
        try:
            source = self.backend.readable(json_path)
            with open(source, "rb") if isinstance(source, str) else source as f:
                size = os.fstat(f.fileno()).st_size if isinstance(source, str) else source.getbuffer().nbytes
                if size > MAX_STATE_JSON_BYTES:
                    raise ValueError(f"{size} bytes, over {MAX_STATE_JSON_BYTES}")
                raw = f.read()
            meta = loads(raw)  # strict: NaN, infinities and nesting too deep are damage
        except (OSError, ValueError) as exc:
            raise StorageError(f"{json_path}: not a readable coordinator state ({exc})") from exc
        fmt = meta.get("format") if isinstance(meta, dict) else None
        if isinstance(meta, dict) and "format" not in meta:
            raise StorageError(f"{json_path}: not a readable coordinator state (no format)")
        if fmt != COORDINATOR_STATE_FORMAT:
            raise StateFormatError(
                f"{json_path}: coordinator state format {fmt!r}, this parallel_rl reads format "
                f"{COORDINATOR_STATE_FORMAT} only; run the parallel_rl version that wrote it, or "
                f"start over with --fresh"
            )
        try:
            check_meta(meta, seq, posixpath.basename(npz_path))
        except ValueError as exc:
            raise StorageError(f"{json_path}: not a readable coordinator state ({exc})") from None
        try:
            arrays = read_npz(self.backend, npz_path)
        except FileNotFoundError as exc:
            raise StorageError(f"{npz_path}: missing (its snapshot {json_path} names it)") from exc
        return meta, arrays

    def latest(self) -> Optional[tuple]:
        """(meta, arrays) of the newest loadable snapshot, None when there is none.

        A damaged newest snapshot falls back to the one before (logged, naming the file); when every snapshot
        is damaged, StorageError names them: we never start empty over existing state."""
        errors = []
        for seq in reversed(self.seqs()):
            try:
                state = self.load(seq)
            except (StateFormatError, StorageFaultError):
                raise  # another version's snapshot (falling back would lose its work), or the store failing
            except StorageError as exc:
                errors.append(str(exc))
                continue
            for error in errors:  # when none loads, the error below names them all (one line)
                logger.warning("storage: %s; falling back to the snapshot before it", error)
            return state
        if errors:
            raise StorageError(
                "no loadable coordinator state in "
                + self.directory
                + ": "
                + "; ".join(errors)
                + " (move the directory away, or start over with --fresh)"
            )
        return None
