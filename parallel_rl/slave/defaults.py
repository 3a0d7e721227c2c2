"""Every worker's section of the run config, ``parallel.worker``, with its defaults (what :mod:`.link` reads). A
module of its own, importing nothing: the config's assembly reads it without loading the transport."""
from __future__ import annotations

from easydict import EasyDict


def worker_default_config() -> EasyDict:
    """Every worker's section of the run config, ``parallel.worker``: its heartbeats and requests to the coordinator,
    and the pauses after its failed tasks (which the coordinator keeps too: it gives the worker no task meanwhile)."""
    return EasyDict(
        heartbeat_interval=1.0,
        request_timeout=5.0,
        # seconds a worker may take to build its envs and model after the coordinator connected it (it answers the
        # connect call at once and builds afterwards, heartbeating meanwhile); past it the set-up counts as failed
        setup_timeout=600.0,
        max_retries=3,
        # a task that failed on the shared store (disk full, I/O error, object store down) is followed by a
        # pause before the worker's next task: storage_backoff seconds, doubled for each further failure in
        # a row, up to storage_max_backoff. The worker waits it out and the coordinator gives it no task
        storage_backoff=0.5,
        storage_max_backoff=30.0,
        # a worker that reports a task failed (its own error, not the store's) gets no task for
        # failure_backoff seconds, doubled for each further failure in a row, up to failure_max_backoff
        failure_backoff=0.5,
        failure_max_backoff=30.0,
    )
