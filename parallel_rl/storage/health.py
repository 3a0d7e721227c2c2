"""Whether the shared store works: a process's own view (:class:`StorageHealth`), the check of another
process's report (:func:`check_health_report`), and :func:`store_op`, which turns the store's failures into
:class:`StorageFaultError` and keeps the health up to date."""

from __future__ import annotations

import errno
import functools
import logging
import threading
import time
from typing import Any, Dict, Mapping, Optional

from ..errors import StorageError, StorageFaultError

logger = logging.getLogger(__name__)


class StorageHealth:
    """Whether the shared store works for this process: unhealthy from a fault of the store (a read or write
    that failed, :class:`StorageFaultError`) until a write succeeds again.

    ``faults`` counts every fault ever (it orders reports: a report with fewer faults than already seen is
    stale); ``failures`` counts tasks failed on the store in a row, and sets the backoff before the next
    task (:meth:`back_off`: ``backoff * 2**(failures - 1)``, at most ``max_backoff``)."""

    def __init__(self, name: Optional[str] = "storage"):
        self.name = name  # the actor in log messages; None: the caller logs (the coordinator's view of a worker)
        self._lock = threading.Lock()
        self.error: Optional[str] = None
        self.since: Optional[float] = None  # epoch seconds of the first fault since the store last worked
        self.faults = 0
        self.failures = 0
        self.retry_at = 0.0  # monotonic: no task before this

    @property
    def healthy(self) -> bool:
        return self.error is None

    @property
    def ready(self) -> bool:
        """False while backing off after a task failed on the store."""
        return time.monotonic() >= self.retry_at

    def fault(self, error: str, faults: Optional[int] = None, since: Optional[float] = None) -> None:
        """The store failed an operation (``faults``/``since``: as another process reported them)."""
        with self._lock:
            first = self.error is None
            self.error = error
            self.since = since if since is not None else (self.since if not first else time.time())
            self.faults = self.faults + 1 if faults is None else max(self.faults, faults)
        if first and self.name:
            logger.error("%s: the shared store is failing: %s", self.name, error)

    def recovered(self) -> None:
        """A write succeeded: healthy again, backoff reset."""
        with self._lock:
            was, self.error, self.since = self.error, None, None
            self.failures, self.retry_at = 0, 0.0
        if was is not None and self.name:
            logger.info("%s: the shared store works again (it failed with: %s)", self.name, was)

    def back_off(self, backoff: float, max_backoff: float) -> float:
        """A task failed on the store: seconds before the next one (exponential in failures in a row, capped)."""
        with self._lock:
            self.failures += 1
            delay = min(float(max_backoff), float(backoff) * 2 ** (self.failures - 1))
            self.retry_at = time.monotonic() + delay
            return delay

    def to_dict(self) -> Dict[str, Any]:
        return {
            "healthy": self.error is None,
            "error": self.error,
            "since": self.since,
            "faults": self.faults,
            "failures": self.failures,
        }

    def update_from(self, report: Mapping[str, Any]) -> bool:
        """Take a process's own report (:meth:`to_dict`, checked by :func:`check_health_report`); a stale one
        (fewer faults than seen) changes nothing. True when the report was taken."""
        if report["faults"] < self.faults:
            return False
        if report["healthy"]:
            self.faults = report["faults"]
            if self.error is not None:
                self.recovered()
        else:
            self.fault(report["error"] or "unknown storage error", faults=report["faults"], since=report["since"])
        return True


def check_health_report(report: Any) -> Dict[str, Any]:
    """A storage health report from another process (:meth:`StorageHealth.to_dict`), checked; ValueError
    naming what is wrong."""
    if not isinstance(report, dict):
        raise ValueError(f"'storage' must be an object, got {report!r:.80}")
    healthy, error, since, faults = (report.get(k) for k in ("healthy", "error", "since", "faults"))
    if not isinstance(healthy, bool):
        raise ValueError(f"'storage.healthy' must be true or false, got {healthy!r:.40}")
    if error is not None and not isinstance(error, str):
        raise ValueError(f"'storage.error' must be a string or null, got {error!r:.40}")
    if since is not None and (isinstance(since, bool) or not isinstance(since, (int, float)) or not 0 <= since < 1e11):
        raise ValueError(f"'storage.since' must be epoch seconds or null, got {since!r:.40}")
    if isinstance(faults, bool) or not isinstance(faults, int) or not 0 <= faults < 2**53:
        raise ValueError(f"'storage.faults' must be a count, got {faults!r:.40}")
    return {
        "healthy": healthy,
        "error": None if error is None else error[:500],
        "since": None if since is None else float(since),
        "faults": faults,
    }


def store_op(what: str, write: bool = False):
    """Decorates a method of an artifact family (:class:`.family.Family`, whose ``store`` is the
    :class:`SharedStorage`): a fault of the store (the backend's ``faults``, except FileNotFoundError, which
    means "not there") becomes :class:`StorageFaultError` naming ``what`` (``{noun}`` is the family's noun),
    the cause and the root, and makes the store's ``health`` unhealthy; a write that succeeds makes it healthy
    again."""

    def decorate(method):
        @functools.wraps(method)
        def op(self, *args, **kwargs):
            store = self.store
            try:
                result = method(self, *args, **kwargs)
            except (FileNotFoundError, StorageError):
                raise
            except store.backend.faults as exc:
                code = errno.errorcode.get(getattr(exc, "errno", None) or -1)
                cause = f"{type(exc).__name__}: {' '.join(str(exc).split()) or type(exc).__name__}"
                message = (
                    f"{what.format(noun=self.noun)} failed on the shared store {store.root}: {cause}"
                    f"{f' ({code})' if code else ''}; free space or repair the store (workers back off and "
                    f"try again)"
                )
                store.health.fault(message)
                raise StorageFaultError(message) from exc
            if write and store.health.error is not None:
                store.health.recovered()
            return result

        return op

    return decorate
