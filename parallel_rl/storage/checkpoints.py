"""Checkpoints on the shared store: policy weights (``policy/``, written by the learner, read by every
collector and evaluator), the learner's full state for resume (``learner/``) and the league's frozen
policies (``league/``, two-player self-play). Each is a ``torch.save`` of a state dict (:mod:`.formats`)."""
from __future__ import annotations

import logging
from typing import Dict, Mapping, Optional

from ..errors import StorageError, StorageFaultError
from .family import NumberedFiles
from .formats import torch_load, torch_save_atomic
from .health import store_op

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

    def prune(self, keep: int) -> int:
        """Delete all but the newest ``keep``; returns the files removed."""
        versions = self.versions()
        return sum(self.backend.unlink(self.path(v)) for v in versions[: max(0, len(versions) - keep)])


class LearnerStates(Checkpoints):
    """The learner's whole state for resume: ``{"policy": the policy's state dict, "train_iter": int >= 0}``."""

    def check(self, state: Dict) -> None:
        iteration = state.get("train_iter")
        if not isinstance(state.get("policy"), dict) or type(iteration) is not int or not 0 <= iteration <= 2**53:
            raise ValueError(f"a learner state is {{'policy': a state dict, 'train_iter': int >= 0}}, got "
                             f"policy={type(state.get('policy')).__name__}, train_iter={iteration!r:.40}")


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
