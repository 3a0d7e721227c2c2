"""The shared store: every file the processes of a run share, behind :class:`SharedStorage`.

- :mod:`.backends`: where the bytes live (a local directory, or an object store through fsspec);
- :mod:`.formats`: ``.npz`` columns and ``torch.save`` checkpoints;
- :mod:`.names`: every directory, file name and pattern of the store;
- the artifact families, one object each: :mod:`.chunks`, :mod:`.checkpoints` (policy, learner state,
  league), :mod:`.states` (coordinator snapshots), :mod:`.videos` (recorded evaluation episodes);
- :mod:`.health`: whether the store works (:class:`StorageHealth`), and how its failures are raised;
- :mod:`.lock`: one run at a time per shared directory.
"""

from .backends import ATOMIC_PROTOCOLS, LOCAL_PROTOCOLS, Backend, FsspecBackend, LocalBackend, is_remote, split_url
from .formats import NOT_A_FILE_ERRNOS, NPY_MAX_HEADER, atomic_save_npz, load_npz, torch_load, torch_save_atomic
from .health import StorageHealth, check_health_report
from .lock import SharedDirLock, lock_directory, lock_shared_dir
from .names import RUN_LOCK_NAME
from .shared import SharedStorage, newest_state
from .states import COORDINATOR_STATE_FORMAT, KEEP_COORDINATOR_STATES
from .videos import KEEP_VIDEOS

__all__ = [
    "ATOMIC_PROTOCOLS",
    "COORDINATOR_STATE_FORMAT",
    "KEEP_COORDINATOR_STATES",
    "KEEP_VIDEOS",
    "LOCAL_PROTOCOLS",
    "NOT_A_FILE_ERRNOS",
    "NPY_MAX_HEADER",
    "RUN_LOCK_NAME",
    "Backend",
    "FsspecBackend",
    "LocalBackend",
    "SharedDirLock",
    "SharedStorage",
    "StorageHealth",
    "atomic_save_npz",
    "check_health_report",
    "is_remote",
    "load_npz",
    "lock_directory",
    "lock_shared_dir",
    "newest_state",
    "split_url",
    "torch_load",
    "torch_save_atomic",
]
