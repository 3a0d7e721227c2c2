"""A slave's set-up (its envs and model, built from the coordinator's config) as a part of its own: it runs in a
thread after the connect call answered, so that connecting never waits for it (a heavy env on a loaded box took
longer than the connect call's timeout, and every restart of the worker did the same). Heartbeats report it:
``ready``, or ``setup_error`` once it failed or ran past ``parallel.worker.setup_timeout``."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Optional

from easydict import EasyDict

logger = logging.getLogger(__name__)


class Readiness:
    """Whether a slave's envs and model are built for its current adoption. ``build(cfg)`` is the slave's set-up;
    ``problem(reason)`` hears a failure once, ``wake()`` that there is news for the coordinator."""

    def __init__(
        self, name: str, build: Callable[[EasyDict], None], problem: Callable[[str], None], wake: Callable[[], None]
    ):
        self.name = name
        self._build, self._problem, self._wake = build, problem, wake
        self.ready = threading.Event()  # tasks are taken only once set
        self.error: Optional[str] = None  # why the set-up failed (one line)
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._timeout = 0.0
        self._deadline = 0.0  # monotonic: a set-up still running then has failed

    def start(self, cfg: EasyDict) -> None:
        """Build for a new adoption in the background. A set-up still under way (the coordinator forgot us and
        adopted us again meanwhile) counts for this adoption too."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self.ready.clear()
            self.error = None
            self._timeout = float(cfg.parallel.worker.setup_timeout)
            self._deadline = time.monotonic() + self._timeout
            self._thread = threading.Thread(target=self._run, args=(cfg,), name=f"{self.name}-setup", daemon=True)
            self._thread.start()

    def _run(self, cfg: EasyDict) -> None:
        started = time.monotonic()
        try:
            self._build(cfg)
        except Exception as exc:  # any set-up failure is reported with its reason, not swallowed
            logger.exception("%s: set-up failed", self.name)
            self.fail(f"{self.name} set-up failed: {type(exc).__name__}: {exc}")
            return
        with self._lock:
            if self.error is None:  # not past its deadline meanwhile
                self.ready.set()
        logger.info("%s: set up in %.1fs", self.name, time.monotonic() - started)
        self._wake()

    def fail(self, reason: str) -> None:
        """The set-up failed (the first reason counts)."""
        with self._lock:
            if self.error is not None or self.ready.is_set():
                return
            self.error = reason
        self._problem(reason)
        self._wake()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a set-up under way to end; whether none runs now."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return thread is None or not thread.is_alive()

    def report(self) -> Dict[str, Any]:
        """What a heartbeat says: ``ready``, and ``setup_error`` once the set-up failed (a set-up past its
        deadline has)."""
        if (
            self._thread is not None
            and not self.ready.is_set()
            and self.error is None
            and time.monotonic() > self._deadline
        ):
            self.fail(f"{self.name} set-up did not finish within {self._timeout:g}s (parallel.worker.setup_timeout)")
        return {"ready": self.ready.is_set(), "setup_error": self.error}
