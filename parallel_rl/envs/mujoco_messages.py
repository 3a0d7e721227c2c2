"""MuJoCo's messages through Python: its warnings become Python warnings (:class:`MuJoCoWarning`), the known
harmless ones filtered out by their message, and its log file (``MUJOCO_LOG.TXT`` in the working directory,
which MuJoCo appends every warning and error to) is never written.

Left to itself, MuJoCo's C library printed each warning on the console and into that file: gymnasium's v5
HalfCheetah and Hopper models use a compiler attribute MuJoCo 4.0 (installed here) deprecates, so every run printed it once per
env (7 lines for a serial SAC run) and left the file behind. An error still raises ``mujoco.FatalError``
with its message, as before."""

from __future__ import annotations

import logging
import threading
import warnings

logger = logging.getLogger(__name__)


class MuJoCoWarning(RuntimeWarning):
    """A warning of MuJoCo's C library (the message as MuJoCo wrote it, after ``MuJoCo: ``)."""


# known and harmless, by the start of MuJoCo's message: gymnasium's v5 models (half_cheetah.xml, hopper.xml, ...)
# set <compiler settotalmass=...>, which MuJoCo 4.0 deprecates; the masses come out as gymnasium means them
HARMLESS = ("compiler attribute 'settotalmass' is deprecated",)

_routed = False
_lock = threading.Lock()


def uses_mujoco(entry_point) -> bool:
    """Whether a gymnasium spec's entry point (a "module:Class" string or a callable) is one of MuJoCo's envs."""
    return (
        "mujoco"
        in (entry_point if isinstance(entry_point, str) else getattr(entry_point, "__module__", "") or "").lower()
    )


def _warn(message: str) -> None:
    warnings.warn(f"MuJoCo: {message.strip()}", MuJoCoWarning, stacklevel=2)


def route_mujoco_messages() -> None:
    """From now on, in this process (and processes it forks): MuJoCo's warnings are Python warnings, those in
    :data:`HARMLESS` silenced, and no ``MUJOCO_LOG.TXT``. Call before a MuJoCo model is made; once is enough."""
    global _routed
    with _lock:
        if _routed:
            return
        import mujoco

        for start in HARMLESS:
            warnings.filterwarnings("ignore", message=f"MuJoCo: {start}", category=MuJoCoWarning)
        mujoco.set_mju_user_warning(_warn)
        config = mujoco.MjLogConfig.get()
        config.logto_file = False  # errors raise FatalError with their message; warnings go through _warn
        config.set()
        _routed = True
        logger.debug("MuJoCo's warnings go through Python's warnings; its log file is off")
