"""TensorBoard event files through the ``tensorboard`` package's own writer (numpy only, no torch)."""
from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Mapping, Optional

import numpy as np

logger = logging.getLogger(__name__)

# tensorboard's file layer imports the AWS SDK when it is installed (it is: s3fs and moto bring it), for s3://
# logdirs, which no writer here has (event files always go to a local directory, ``storage.local_dir``). Kept
# out of that import, the SDK cost ~0.1 s of every process's start (0.3 s on a loaded box), the fork server's
# included; an s3:// logdir would still work, through fsspec's s3fs.
AWS_SDK = ("botocore", "boto3")


def writer_class():
    """``tensorboard.summary.Writer``, imported without the AWS SDK (:data:`AWS_SDK`); a later ``import boto3``
    works as usual, and where the SDK is imported already nothing changes."""
    blocked = [name for name in AWS_SDK if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # `import name` raises ImportError: tensorboard's gfile leaves S3 off
    try:
        from tensorboard.summary import Writer
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return Writer


class TensorBoardLogger:
    """Scalars to ``logdir``; thread-safe; a no-op when ``logdir`` is None."""

    def __init__(self, logdir: Optional[str]):
        self.logdir = logdir
        self._writer = None
        self._lock = threading.Lock()
        if logdir:
            self._writer = writer_class()(logdir)

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
