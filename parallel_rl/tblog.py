"""TensorBoard event files through the ``tensorboard`` package's own writer (numpy only, no torch)."""

from __future__ import annotations

import logging
import math
import os
import secrets
import sys
import threading
import time
from typing import Any, Dict, Mapping, Optional, Tuple

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


# a writer starts a new event file once its file holds this part of its cap (so at least 3/4 of the cap's
# newest points stay when the oldest file goes)
ROTATE_PARTS = 4
EVENTS_PREFIX = "events.out.tfevents."  # TensorBoard's event files: <prefix><time>.<host>.<pid>.<n><suffix>


def open_writer(logdir: str, suffix: str):
    """A ``tensorboard.summary.Writer`` whose new event file in ``logdir`` ends with ``suffix``. TensorBoard names
    it by time (s), host name and pid only: two processes on two hosts (containers, network namespaces) that
    share a host name and a pid (1, in a PID namespace of their own) and a directory (every collector writes
    ``tensorboard/evaluator``) opened the same file in the same second, each truncating the other's."""
    Writer = writer_class()
    from tensorboard.summary import DirectoryOutput
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    class SuffixedOutput(DirectoryOutput):
        def __init__(self, path: str):  # DirectoryOutput's, with the suffix EventFileWriter takes
            self._ev_writer = EventFileWriter(path, filename_suffix=suffix)

    return Writer(SuffixedOutput(logdir))


class TensorBoardLogger:
    """Scalars to ``logdir``; thread-safe; a no-op when ``logdir`` is None.

    ``interval`` (s): at most one point per tag that often; the newest value in between is kept and written
    when the logger closes (0: every point). ``max_bytes``: the event files in ``logdir`` together stay about
    under it: this writer starts a new file once its own holds ``max_bytes / ROTATE_PARTS``, and the oldest files
    of the directory are deleted past the cap (0: no cap). A writer whose file was deleted (by another writer of
    the same directory) starts a new one."""

    def __init__(self, logdir: Optional[str], interval: float = 0.0, max_bytes: int = 0):
        self.logdir = logdir
        self.interval = float(interval)
        self.max_bytes = int(max_bytes)
        self._writer = None
        self._file: Optional[str] = None
        self._lock = threading.Lock()
        self._last: Dict[str, float] = {}  # tag -> monotonic time of its last point
        self._pending: Dict[str, Tuple[float, int]] = {}  # tag -> (value, step) held back by the interval
        if logdir:
            self._open()

    def _open(self) -> None:
        suffix = f".{secrets.token_hex(6)}"  # this writer's file, whoever else writes the directory
        self._writer = open_writer(self.logdir, suffix)
        made = sorted(n for n in _event_files(self.logdir) if n.endswith(suffix))
        self._file = os.path.join(self.logdir, made[-1]) if made else None

    def scalars(self, step: int, prefix: str = "", **values: float) -> None:
        if self._writer is None:
            return
        now = time.monotonic()
        with self._lock:
            wrote = False
            for name, value in values.items():
                if value is None:
                    continue
                tag = f"{prefix}{name}"
                if self.interval and now - self._last.get(tag, -math.inf) < self.interval:
                    self._pending[tag] = (value, int(step))
                    continue
                self._pending.pop(tag, None)
                wrote |= self._write(tag, value, int(step))
                self._last[tag] = now
            if wrote and self.max_bytes:
                self._keep_under_cap()

    def _write(self, tag: str, value: Any, step: int) -> bool:
        try:
            self._writer.add_scalar(tag, float(value), step)
            return True
        except (TypeError, ValueError) as exc:
            logger.debug("tensorboard: skipping %s=%r: %s", tag, value, exc)
            return False

    def _keep_under_cap(self) -> None:
        """Start a new file once this writer's holds its part of the cap (or is gone), then delete the
        directory's oldest event files while they hold more than the cap."""
        self._writer.flush()
        try:  # (a file it could not tell from the others, None: never rotated)
            full = self._file is not None and os.path.getsize(self._file) >= self.max_bytes / ROTATE_PARTS
        except FileNotFoundError:  # deleted by another writer of this directory
            full = True
        if full:
            self._writer.close()
            self._open()
        files = []
        for name in sorted(_event_files(self.logdir)):  # by name: by the time each was made
            path = os.path.join(self.logdir, name)
            try:
                files.append((path, os.path.getsize(path)))
            except FileNotFoundError:
                continue
        total = sum(size for _, size in files)
        for path, size in files:
            if total <= self.max_bytes:
                break
            if path == self._file:
                continue
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            total -= size
            logger.debug(
                "tensorboard: removed %s (the directory's event files are capped at %d bytes)", path, self.max_bytes
            )

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        """One scalar under its full tag: a torch ``SummaryWriter``'s call, so this logger can be handed to code
        written for one (DI-engine's ``tb_logger``)."""
        self.scalars(step, "", **{tag: value})

    def flush(self) -> None:
        if self._writer is not None:
            with self._lock:
                self._writer.flush()

    def close(self) -> None:
        """Write the points the interval held back, then close the file."""
        if self._writer is not None:
            with self._lock:
                for tag, (value, step) in self._pending.items():
                    self._write(tag, value, step)
                self._pending.clear()
                self._writer.close()
                self._writer = None


def worker_logger(system: Mapping[str, Any], logdir: Optional[str], every_point: bool = False) -> TensorBoardLogger:
    """The logger of a cluster worker's directory (``system``: the config's section): off unless
    ``system.tensorboard``; at most one point per tag every ``system.tensorboard_interval`` s (``every_point``:
    all of them, an evaluator's); the directory capped at ``system.tensorboard_max_mb``."""
    return TensorBoardLogger(
        logdir if system["tensorboard"] else None,
        interval=0.0 if every_point else float(system["tensorboard_interval"]),
        max_bytes=int(float(system["tensorboard_max_mb"]) * 2**20),
    )


def _event_files(logdir: str) -> list:
    try:
        return [n for n in os.listdir(logdir) if n.startswith(EVENTS_PREFIX)]
    except FileNotFoundError:
        return []


def add_scalars(writer: Any, prefix: str, step: int, values: Mapping[str, Any]) -> None:
    """Write the numeric ``values`` as ``<prefix><name>`` at ``step`` through ``writer.add_scalar(tag, value,
    step)`` (a :class:`TensorBoardLogger` or a torch ``SummaryWriter``: DI-engine's ``tb_logger``); None writes
    nothing."""
    if writer is None:
        return
    for name, value in values.items():
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
            writer.add_scalar(f"{prefix}{name}", float(value), int(step))
