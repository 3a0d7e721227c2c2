"""``parallel.learner.init_from``: the checkpoint a cluster learner starts from instead of a fresh model (a warm
start, a fine-tune, population-based training's next step from a member's last run).

The path is a checkpoint file, read by the storage's validating loader (:func:`~parallel_rl.storage.torch_load`,
``weights_only=True``), or a run's directory or shared store (a local path or an object-store URL), whose newest
good learner state is taken (:meth:`~parallel_rl.storage.checkpoints.Checkpoints.latest_good`). Its state goes into
the policy through the policy's own fit check (:func:`~parallel_rl.policy.base.load_checkpoint`). Anything wrong
(missing, damaged, another algorithm or env) is one :class:`~parallel_rl.errors.ConfigError` line naming the
setting; the learner task fails with it (the run fails once ``parallel.commander.max_repeated_failures`` tasks
did)."""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Mapping, Optional, Tuple

from easydict import EasyDict

from ..errors import ConfigError, StorageError, StorageFaultError

logger = logging.getLogger(__name__)

KEY = "parallel.learner.init_from"
WHAT = (
    "pass a learner checkpoint file (<shared>/learner/learner_*.pt, a serial run's <exp_dir>/ckpt/*.pt, "
    "<shared>/policy/policy_*.pt) or a run's directory"
)


def read_init_from(path: str, storage_options: Optional[Mapping] = None) -> Tuple[Dict[str, Any], str]:
    """(the checkpoint's contents, the file they came from) for ``init_from=path``; ConfigError in one line."""
    if "://" in path or os.path.isdir(path):
        return _newest_learner_state(path, storage_options)
    from ..storage import torch_load

    if not os.path.isfile(path):
        raise ConfigError(f"{KEY}={path!r}: not found; {WHAT}")
    try:
        return torch_load(path), path
    except StorageError as exc:  # the loader's one line names the file and the damage
        raise ConfigError(f"{KEY}={path!r}: {str(exc).splitlines()[0][:300]}; {WHAT}") from None
    except OSError as exc:  # torch's zip reader fails a truncated file with EINVAL, as if the disk had
        raise ConfigError(f"{KEY}={path!r}: not a loadable checkpoint ({type(exc).__name__}: {exc}); {WHAT}") from None


def _newest_learner_state(place: str, storage_options: Optional[Mapping]) -> Tuple[Dict[str, Any], str]:
    """The newest good learner state of the shared store at ``place`` (or at ``place/shared``: a run's directory)."""
    from ..storage import SharedStorage

    roots = [place] if "://" in place else [place, os.path.join(place, "shared")]
    for root in roots:
        if "://" not in root and not os.path.isdir(os.path.join(root, "learner")):
            continue
        storage = SharedStorage(root, storage_options or {}, create=False)
        try:
            found = storage.learner_states.latest_good()
        except StorageFaultError:
            raise
        except (StorageError, FileNotFoundError):
            found = None
        if found is not None:
            version, state = found
            return state, storage.learner_states.path(version)
    raise ConfigError(f"{KEY}={place!r}: no learner state there (learner/learner_*.pt, none loads); {WHAT}")


def warm_start(policy, cfg: EasyDict) -> Optional[str]:
    """Load ``cfg``'s ``init_from`` into ``policy`` (before the first update); the file loaded, None when the setting
    is off."""
    from ..policy.base import checkpoint_parts, load_checkpoint

    path = cfg.parallel.learner.get("init_from")
    if not path:
        return None
    contents, source = read_init_from(str(path), cfg.parallel.get("storage_options"))
    state, whole = checkpoint_parts(contents, source)
    fits = f"policy.type={cfg.policy.type!r} on env {cfg.env.env_id!r}"
    load_checkpoint(policy, state, whole, source, fits, f"set {KEY} to a checkpoint of this algorithm and env")
    return source
