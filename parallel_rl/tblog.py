"""TensorBoard event files through the ``tensorboard`` package's own writer (numpy only, no torch)."""
from __future__ import annotations

import logging
import threading
from typing import Any, Mapping, Optional

import numpy as np

logger = logging.getLogger(__name__)


class TensorBoardLogger:
    """Scalars to ``logdir``; thread-safe; a no-op when ``logdir`` is None."""

    def __init__(self, logdir: Optional[str]):
        self.logdir = logdir
        self._writer = None
        self._lock = threading.Lock()
        if logdir:
            from tensorboard.summary import Writer

            self._writer = Writer(logdir)

    def scalars(self, step: int, prefix: str = "", **values: float) -> None:
        if self._writer is None:
            return
        with self._lock:
            for name, value in values.items():
                if value is None:
                    continue
                try:
                    self._writer.add_scalar(f"{prefix}{name}", float(value), int(step))
                except (TypeError, ValueError) as exc:
                    logger.debug("tensorboard: skipping %s=%r: %s", name, value, exc)

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        """One scalar under its full tag: a torch ``SummaryWriter``'s call, so this logger can be handed to code
        written for one (DI-engine's ``tb_logger``)."""
        self.scalars(step, "", **{tag: value})

    def flush(self) -> None:
        if self._writer is not None:
            with self._lock:
                self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            with self._lock:
                self._writer.close()
                self._writer = None


def add_scalars(writer: Any, prefix: str, step: int, values: Mapping[str, Any]) -> None:
    """Write the numeric ``values`` as ``<prefix><name>`` at ``step`` through ``writer.add_scalar(tag, value,
    step)`` (a :class:`TensorBoardLogger` or a torch ``SummaryWriter``: DI-engine's ``tb_logger``); None writes
    nothing."""
    if writer is None:
        return
    for name, value in values.items():
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
            writer.add_scalar(f"{prefix}{name}", float(value), int(step))
