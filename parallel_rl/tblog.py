"""TensorBoard event files through the ``tensorboard`` package's own writer (numpy only, no torch)."""
from __future__ import annotations

import logging
import threading
from typing import Optional

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

    def flush(self) -> None:
        if self._writer is not None:
            with self._lock:
                self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            with self._lock:
                self._writer.close()
                self._writer = None
