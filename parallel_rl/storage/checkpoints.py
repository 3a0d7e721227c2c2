"""Checkpoints on the shared store: policy weights (``policy/``, written by the learner, read by every
collector and evaluator), the learner's full state for resume (``learner/``) and the league's frozen
policies (``league/``, two-player self-play). Each is a ``torch.save`` of a state dict (:mod:`.formats`).

The run's best evaluated policy is a policy checkpoint like the others, named by ``policy/best.json`` (a
:class:`BestRecord`) and held: ``policy/held_<version>`` (an empty file) keeps a version from pruning while
it is evaluated and while it is the best. Holds are file names, so pruning sees them in the listing it makes
anyway: no read more per checkpoint, on a local disk and on an object store alike. A serial run keeps its
best as ``<exp_dir>/ckpt/ckpt_best.pt`` with the same record beside it (``ckpt/best.json``)."""

from __future__ import annotations

import json
import logging
import math
import os
import posixpath
from dataclasses import asdict, dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from ..errors import StorageError, StorageFaultError
from .backends import LocalBackend
from .family import NumberedFiles
from .formats import torch_load, torch_save_atomic
from .health import store_op
from .names import BEST_RECORD, POLICY_HOLD

# a serial run's best checkpoint (the serial evaluator saves it on every new best), its record beside it
SERIAL_BEST = "ckpt_best.pt"
# a serial run's full state in <exp_dir>/ckpt (the policy's learning state: model, optimizer; the counters; the best
# evaluation): what `serial --resume` continues from
SERIAL_STATE = "serial_state.pt"
SERIAL_CKPT_DIR = "ckpt"

logger = logging.getLogger(__name__)


class Checkpoints(NumberedFiles):
    """Numbered state dicts: written durably, loaded without unpickling arbitrary objects.

    Every one is read by :meth:`load` (:func:`.formats.torch_load`, then :meth:`check`): a state dict its readers
    can use, or StorageError naming the file."""

    @store_op("writing a {noun}", write=True)
    def save(self, version: int, state: Mapping) -> str:
        path = self.path(version)
        torch_save_atomic(path, state, self.backend)
        return path

    @store_op("looking for a {noun}")
    def exists(self, version: int) -> bool:
        return self.backend.isfile(self.path(version))

    @store_op("reading a {noun}")
    def load(self, version: int) -> Dict:
        """Version ``version``'s state dict (FileNotFoundError when it is not there; StorageError when it is
        damaged, or not of this family's shape)."""
        return torch_load(self.path(version), self.backend, check=self.check)

    def check(self, state: Dict) -> None:
        """ValueError unless ``state`` (a state dict: :func:`.formats.check_state`) has this family's shape; a
        policy's parts are the model's, which its loader checks (a checkpoint that does not fit is a ConfigError)."""

    def latest_good(self) -> Optional[tuple]:
        """``(version, state)`` of the newest one that loads, or None when none does.

        A corrupt newest one (a crash mid-write on a disk without fsync, bit rot) is logged and skipped:
        resuming from the one before loses ``save_state_every`` iterations, not the run."""
        for version in reversed(self.versions()):
            try:
                return version, self.load(version)
            except FileNotFoundError:  # pruned since it was listed
                continue
            except StorageFaultError:  # the store failing says nothing about the file
                raise
            except StorageError as exc:
                logger.error("storage: skipping %s %d: %s", self.noun, version, exc)
        return None

    def dir_stamp(self) -> int:
        """Changes when one is added or removed: the directory's mtime (ns) on a local disk; on an object
        store, the time its listing was last seen to change (listed at most every 0.25 s)."""
        return self.backend.dir_stamp(self.directory)

    @store_op("listing {noun}s")
    def changed_versions(self, seen: Optional[int]) -> Tuple[int, Optional[List[int]]]:
        """(:meth:`dir_stamp`, the versions there, oldest first), or (the stamp, None) when nothing changed since
        stamp ``seen``: a stat on a local disk, one LIST request on an object store (at most every 0.25 s)."""
        stamp, names = self.backend.changed_names(self.directory, seen)
        if names is None:
            return stamp, None
        return stamp, sorted(v for v in map(self.series.version, names) if v is not None)

    def prune(self, keep: int) -> int:
        """Delete all but the newest ``keep``; returns the files removed."""
        versions = self.versions()
        return sum(self.backend.unlink(self.path(v)) for v in versions[: max(0, len(versions) - keep)])


@dataclass(frozen=True)
class BestRecord:
    """The best evaluation of a run: the policy ``version`` evaluated (the learner's train iteration when it
    was saved), its mean ``eval_return``, and the run's ``env_steps`` and ``train_iter`` when the evaluation
    came in."""

    version: int
    eval_return: float
    env_steps: int
    train_iter: int

    def __post_init__(self):
        for name in ("version", "env_steps", "train_iter"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}={value!r} must be an integer >= 0")
        if (
            isinstance(self.eval_return, bool)
            or not isinstance(self.eval_return, (int, float))
            or not math.isfinite(self.eval_return)
        ):
            raise ValueError(f"eval_return={self.eval_return!r} must be a finite number")

    def describe(self) -> str:
        """``version 1234, eval return 148.0 at env step 20480``."""
        return f"version {self.version}, eval return {self.eval_return:.1f} at env step {self.env_steps}"

    def to_json(self) -> Dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping, source: str = "best record") -> "BestRecord":
        """The record in ``data``; StorageError naming ``source`` when it is not one."""
        try:
            return cls(**{name: data[name] for name in ("version", "eval_return", "env_steps", "train_iter")})
        except (KeyError, TypeError, ValueError) as exc:
            raise StorageError(
                f"{source}: not a best-policy record ({type(exc).__name__}: {exc}); delete it, or "
                f"pass --checkpoint newest or a checkpoint file"
            ) from None


def save_best_record(path: str, record: BestRecord, backend=LocalBackend) -> None:
    """Write ``record`` to ``path`` (JSON) in one atomic, durable write."""
    body = json.dumps(record.to_json()).encode()
    backend.write_atomic(path, lambda f: f.write(body), durable=True)


def load_best_record(path: str, backend=LocalBackend) -> Optional[BestRecord]:
    """The record at ``path``; None when there is none; StorageError naming the file when it is damaged."""
    try:
        raw = backend.read_bytes(path)
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise StorageError(
            f"{path}: not a best-policy record (not JSON: {exc}); delete it, or pass "
            f"--checkpoint newest or a checkpoint file"
        ) from None
    return BestRecord.from_json(data if isinstance(data, dict) else {}, path)


class PolicyCheckpoints(Checkpoints):
    """The policy checkpoints (``policy/``): numbered weights, the versions held from pruning, the best one."""

    def hold_path(self, version: int) -> str:
        return posixpath.join(self.directory, POLICY_HOLD.name(int(version)))

    @property
    def best_path(self) -> str:
        return posixpath.join(self.directory, BEST_RECORD)

    @store_op("holding a {noun}", write=True)
    def hold(self, version: int) -> None:
        """Keep version ``version`` from pruning (it is evaluated, or the best) until :meth:`release`."""
        self.backend.write_atomic(self.hold_path(version), lambda f: None)

    @store_op("releasing a {noun}", write=True)
    def release(self, version: int) -> bool:
        """Let ``version`` be pruned again (by the next prune that finds it among the old ones)."""
        return self.backend.unlink(self.hold_path(version))

    @store_op("reading the best {noun}'s record")
    def best_record(self) -> Optional[BestRecord]:
        """The run's best evaluated version (None before an evaluation kept one); StorageError when damaged."""
        return load_best_record(self.best_path, self.backend)

    @store_op("keeping the best {noun}", write=True)
    def keep_best(self, record: BestRecord) -> str:
        """Make ``record.version`` the run's best: held (never pruned), named by ``best.json``; the best before
        it is released. FileNotFoundError when that checkpoint is gone already (pruned before it was held).
        Returns the checkpoint's path."""
        previous = None
        try:
            previous = self.best_record()
        except StorageFaultError:
            raise
        except StorageError as exc:  # a damaged record is replaced
            logger.warning("storage: replacing a damaged best record: %s", exc)
        self.hold(record.version)
        if not self.backend.isfile(self.path(record.version)):
            self.release(record.version)
            raise FileNotFoundError(self.path(record.version))
        save_best_record(self.best_path, record, self.backend)
        if previous is not None and previous.version != record.version:
            self.release(previous.version)
        return self.path(record.version)

    @store_op("listing {noun}s")
    def _names(self) -> List[str]:
        try:
            return self.backend.listdir(self.directory)
        except FileNotFoundError:
            return []

    def prune(self, keep: int) -> int:
        """Delete all but the newest ``keep``, and the held ones; returns the files removed."""
        names = self._names()
        versions = sorted(v for v in map(self.series.version, names) if v is not None)
        held = {v for v in map(POLICY_HOLD.version, names) if v is not None}
        old = versions[: max(0, len(versions) - keep)]
        return sum(self.backend.unlink(self.path(v)) for v in old if v not in held)


class LearnerStates(Checkpoints):
    """The learner's whole state for resume: ``{"policy": the policy's state dict, "train_iter": int >= 0}``."""

    def check(self, state: Dict) -> None:
        iteration = state.get("train_iter")
        if not isinstance(state.get("policy"), dict) or type(iteration) is not int or not 0 <= iteration <= 2**53:
            raise ValueError(
                f"a learner state is {{'policy': a state dict, 'train_iter': int >= 0}}, got "
                f"policy={type(state.get('policy')).__name__}, train_iter={iteration!r:.40}"
            )


class LeagueSnapshots(Checkpoints):
    """Policy versions frozen into the self-play opponent pool: copies of policy checkpoints, so pruning
    those never removes a snapshot. The directory is made by the first snapshot (self-play runs only)."""

    @store_op("writing a {noun}", write=True)
    def freeze(self, version: int) -> str:
        """Freeze policy checkpoint ``version`` into the league (a byte copy: no torch needed, the
        coordinator never imports it). Raises FileNotFoundError when the checkpoint is gone."""
        path = self.path(version)
        raw = self.backend.read_bytes(self.store.policies.path(version))
        self.backend.makedirs(self.directory)
        self.backend.write_atomic(path, lambda dst: dst.write(raw), durable=True)
        return path

    def remove(self, version: int) -> bool:
        return self.backend.unlink(self.path(version))


def copy_serial_state(source_dir: str, target_dir: str, backend=LocalBackend) -> List[str]:
    """Population-based training's exploit: the saved state of the serial run in experiment directory
    ``source_dir`` (:data:`SERIAL_STATE`, its best checkpoint and that one's record) copied over ``target_dir``'s,
    so that ``serial --resume target_dir`` continues from the source's weights, optimizer and counters. Each file
    is a byte copy (no torch: the resumed run's loader checks it) written atomically and durably; the state goes
    last, so a copy cut short leaves the target's own state. A best file the source lacks is removed from the
    target. Returns the paths written; FileNotFoundError when the source saved no state."""
    source, target = os.path.join(source_dir, SERIAL_CKPT_DIR), os.path.join(target_dir, SERIAL_CKPT_DIR)
    state = backend.read_bytes(os.path.join(source, SERIAL_STATE))
    backend.makedirs(target)
    written = []
    for name in (SERIAL_BEST, BEST_RECORD):
        path = os.path.join(target, name)
        try:
            raw = backend.read_bytes(os.path.join(source, name))
        except FileNotFoundError:
            backend.unlink(path)
            continue
        backend.write_atomic(path, lambda f: f.write(raw), durable=True)
        written.append(path)
    path = os.path.join(target, SERIAL_STATE)
    backend.write_atomic(path, lambda f: f.write(state), durable=True)
    return written + [path]
