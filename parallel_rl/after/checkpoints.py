"""Which checkpoint a command means, and the policy it holds.

Three places hold policies: a serial run's ``<exp_dir>/ckpt/*.pt`` (the learner's whole state under
``"policy"``), a cluster's shared store ``policy/policy_<version>.pt`` (the acting networks only; a
local path or an object-store URL) and a compose volume (a shared store on a local path). Every file
is read by :func:`parallel_rl.storage.torch_load` (``weights_only=True``) and loaded into the policy
the config builds, so a checkpoint of another algorithm or env is refused with one line.

Of a run, the best evaluated version is taken by default (a serial run's ``ckpt/ckpt_best.pt``, a cluster's
``policy/best.json``; both records say its eval return and env step), the newest when no evaluation kept
one; ``newest`` asks for the newest. :attr:`Checkpoint.why` says which was taken and why.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from easydict import EasyDict

from ..config import RUN_CONFIG_NAME, read_run_config
from ..errors import ConfigError, StorageError, StorageFaultError
from ..storage.checkpoints import SERIAL_BEST, load_best_record
from ..storage.names import BEST_RECORD

logger = logging.getLogger(__name__)


def find_run_config(path: str) -> Optional[str]:
    """The ``config.json`` of the run that holds ``path`` (it, its directory or a parent up to three levels)."""
    here = os.path.abspath(path if os.path.isdir(path) else os.path.dirname(path))
    for _ in range(4):
        candidate = os.path.join(here, RUN_CONFIG_NAME)
        if os.path.isfile(candidate):
            return candidate
        here = os.path.dirname(here)
    return None


def load_run_config(path: str) -> EasyDict:
    try:
        return read_run_config(path)
    except ConfigError as exc:
        raise ConfigError(f"{exc}; pass the config with -c") from None


@dataclass
class Checkpoint:
    """Where a policy came from (``source``: its file) and its state dict; ``why``: which of a run's checkpoints
    it is, and why it was taken (``best: version 1234, eval return 148.0 at env step 20480``)."""

    source: str
    state: Dict[str, Any]
    why: str = ""


# which of a run's checkpoints --checkpoint may name instead of a file (the first is the default)
CHOICES = ("best", "newest")


def _serial_checkpoints(directory: str) -> list:
    """A serial run's checkpoints under ``directory/ckpt`` (the learner's ``ckpt_dir``), newest last."""
    files = [f for f in glob.glob(os.path.join(directory, "ckpt", "*.pt")) if not os.path.basename(f).startswith(".")]
    return sorted(files, key=lambda f: (os.path.getmtime(f), f))


# what follows a refused checkpoint's reason
_PASS_A_CHECKPOINT = "pass a policy checkpoint written by parallel_rl (exports are named *.torchscript, *.onnx)"


@contextlib.contextmanager
def _checkpoint_load():
    """Around a checkpoint's ``torch.load`` (``weights_only=True``, which refuses a TorchScript archive): without
    torch's warning that it is "dispatching to torch.jit.load", which it does not do then (the refusal is the line
    users get)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="'torch.load' received a zip file that looks like a TorchScript")
        yield


def _store_checkpoint(root: str, storage_options: Optional[dict], which: str) -> Optional[Checkpoint]:
    """The best (``which="best"``; the newest when no evaluation kept one) or newest policy checkpoint of the
    shared store at ``root`` (read only: nothing is made there); None when it holds none. ConfigError naming the
    file when it does not load (a fault of the store: StorageFaultError)."""
    from ..storage import SharedStorage

    storage = SharedStorage(root, storage_options or {}, create=False)
    note = ""
    try:
        if which == "best":
            record = storage.policies.best_record()
            if record is not None:
                try:
                    return _store_load(storage, record.version, f"best: {record.describe()}")
                except FileNotFoundError:  # a new best replaced it meanwhile (its hold released, pruned)
                    note = f" (the best, version {record.version}, is gone)"
            else:
                note = " (no evaluation has kept a best version yet)"
        version = storage.policies.latest()
    except FileNotFoundError:
        return None
    except StorageFaultError:
        raise
    except StorageError as exc:
        raise ConfigError(f"{str(exc).splitlines()[0][:300]}") from None
    if version is None:
        return None
    return _store_load(storage, version, f"newest: version {version}{note}")


def _store_load(storage, version: int, why: str) -> Checkpoint:
    try:
        with _checkpoint_load():
            return Checkpoint(f"{storage.policies.path(version)}", storage.policies.load(version), why)
    except StorageFaultError:
        raise
    except StorageError as exc:
        raise ConfigError(f"{str(exc).splitlines()[0][:300]}...); {_PASS_A_CHECKPOINT}") from None


def _serial_checkpoint(directory: str, files: list, which: str) -> Checkpoint:
    """A serial run's best (``ckpt/ckpt_best.pt`` with the record beside it) or newest checkpoint."""
    best = os.path.join(directory, "ckpt", SERIAL_BEST)
    if which == "best" and os.path.isfile(best):
        checkpoint = read_checkpoint(best)
        try:
            record = load_best_record(os.path.join(directory, "ckpt", BEST_RECORD))
        except StorageError as exc:
            raise ConfigError(str(exc)) from None
        if record is not None:
            checkpoint.why = f"best: {record.describe()}"
        else:  # written before the record was
            checkpoint.why = f"best: version {_iteration(checkpoint)} (the evaluator's best, {SERIAL_BEST})"
        return checkpoint
    checkpoint = read_checkpoint(files[-1])
    note = " (no evaluation has kept a best version yet)" if which == "best" else ""
    checkpoint.why = f"newest: version {_iteration(checkpoint)}{note}"
    return checkpoint


def _iteration(checkpoint: Checkpoint) -> Any:
    state = checkpoint.state
    return state.get("train_iter", "?") if isinstance(state, dict) else "?"


def read_checkpoint(path: str) -> Checkpoint:
    """One checkpoint file (``weights_only=True``); ConfigError naming it when it is missing or unreadable."""
    from ..storage import torch_load

    if not os.path.isfile(path):
        raise ConfigError(
            f"checkpoint {path!r} not found; pass --checkpoint with a .pt file of a run "
            f"(<exp_dir>/ckpt/*.pt, <shared>/policy/policy_*.pt)"
        )
    try:
        with _checkpoint_load():
            return Checkpoint(path, torch_load(path))
    except StorageError as exc:  # torch's reasons run over many lines: the first says enough
        raise ConfigError(f"{str(exc).splitlines()[0][:300]}...); {_PASS_A_CHECKPOINT}") from None
    except OSError as exc:  # torch's zip reader fails a truncated file with EINVAL, as if the disk had
        raise ConfigError(
            f"{path}: not a loadable checkpoint ({type(exc).__name__}: {exc}; truncated or damaged?); "
            f"{_PASS_A_CHECKPOINT}"
        ) from None


def find_checkpoint(cfg: EasyDict, checkpoint: Optional[str] = None, run: Optional[str] = None) -> Checkpoint:
    """``checkpoint``: a file, or which of a run's checkpoints (:data:`CHOICES`: ``best``, the default, else the
    newest when no evaluation kept a best; ``newest``), of ``run`` (a serial experiment directory, a shared
    store path or URL), else of the config's own run (its ``exp_name`` directory, then its shared store)."""
    if checkpoint and checkpoint not in CHOICES:
        return read_checkpoint(checkpoint)
    which = checkpoint or CHOICES[0]
    from ..runtime import experiment_dir, shared_root

    places = [run] if run else [experiment_dir(cfg), shared_root(cfg)]
    for place in places:
        found = None
        if "://" not in place:
            serial = _serial_checkpoints(place)
            if serial:
                found = _serial_checkpoint(place, serial, which)
            for root in (place, os.path.join(place, "shared")):
                if found is None and os.path.isdir(os.path.join(root, "policy")):
                    found = _store_checkpoint(root, cfg.parallel.get("storage_options"), which)
        else:
            found = _store_checkpoint(place, cfg.parallel.get("storage_options"), which)
        if found is not None:
            if checkpoint == "best" and not found.why.startswith("best"):
                raise ConfigError(
                    f"no best checkpoint in {place} ({found.why}); pass --checkpoint newest or a checkpoint file"
                )
            return found
    raise ConfigError(
        f"no policy checkpoint in {' or '.join(places)}; train first (parallel-rl serial/run -c "
        f"CONFIG), or pass --checkpoint FILE or --run DIR"
    )


def policy_state(checkpoint: Checkpoint) -> Tuple[Dict[str, Any], bool]:
    """(state, whole): a serial checkpoint's learner state (``whole``: the policy's ``state_dict``), else the
    acting networks a cluster checkpoint holds (``model_state_dict``)."""
    from ..policy.base import checkpoint_parts

    return checkpoint_parts(checkpoint.state, checkpoint.source)


def spaces_env(cfg: EasyDict, num_envs: int = 1, seed: Optional[int] = None, evaluating: bool = False):
    """``num_envs`` copies of the config's env (a two-player game's env manager for one): what tells a policy
    its observation and action spaces. ``evaluating``: made as the evaluator makes it (``env.eval_env_kwargs``)."""
    from ..envs.env_manager import EnvManager
    from ..envs.multiagent import BattleEnvManager, is_battle_env

    seed = cfg.seed if seed is None else seed
    if is_battle_env(cfg.env):
        return BattleEnvManager.from_cfg(cfg.env, num_envs, seed=seed)
    return EnvManager.from_cfg(cfg.env, num_envs, seed=seed, evaluating=evaluating)


def build_policy(cfg: EasyDict, checkpoint: Checkpoint, env=None):
    """The config's policy (on the CPU) with the checkpoint's weights; ConfigError in one line when the checkpoint
    was trained with another algorithm or env. ``env``: an EnvManager of the config's env (made when None, to
    read the spaces)."""
    from ..policy import create_policy
    from ..policy.base import load_checkpoint

    own_env = env is None
    if own_env:
        env = spaces_env(cfg)
    try:
        policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=cfg.seed, device="cpu")
    finally:
        if own_env:
            env.close()
    state, whole = policy_state(checkpoint)
    fits = f"policy.type={cfg.policy.type!r} on env {cfg.env.env_id!r}"
    load_checkpoint(policy, state, whole, checkpoint.source, fits, "pass the config the run was trained with")
    return policy
