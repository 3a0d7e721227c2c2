"""The coordinator's own section of the run config, ``parallel.coordinator``, with its defaults: what
:class:`~parallel_rl.coordinator.coordinator.Coordinator` and its parts read (``Coordinator.default_config()``
answers it, as DI-engine's ``Coordinator.config``). A module of its own: the coordinator's module is near its
size bar."""
from __future__ import annotations

from easydict import EasyDict


def coordinator_default_config() -> EasyDict:
    """The ``parallel.coordinator`` section: the coordinator's server, leases, connections, snapshots."""
    return EasyDict(
        host="127.0.0.1",
        port=0,
        # URL workers use to reach the coordinator (empty: the address it serves on)
        advertise="",
        # a worker silent this long is marked lost and its task fails
        heartbeat_ttl=10.0,
        # read-only REST calls need the token too
        auth_read=False,
        # request bodies larger than this get 413 (over twice this, the HTTP server refuses them unread)
        max_body_bytes=4 * 1024 * 1024,
        # threads answering short calls (heartbeats, registration, REST); long-polls never take these
        request_threads=16,
        # requests that may wait at once (throttled collectors, learners waiting for data); each holds a
        # thread of its own. One more is answered at once with "retry_after" instead of waiting
        long_poll_slots=256,
        # idle keep-alive connections the coordinator keeps open at most; past it a connection closes after its answer
        max_connections=1024,
        # connections the coordinator keeps open at most (0: three quarters of its open-file limit); past it
        # a new connection closes the one idle longest, or is closed at once when every one is busy
        max_open_connections=0,
        # a lost or gone worker stays listed (REST, dashboard) this long, then is forgotten; at most
        # max_ended_workers of them are kept (the oldest go first). Their connections close when they end
        worker_retention=600.0,
        max_ended_workers=1000,
        # when the coordinator stops (training over, SIGTERM) it lets the workers go and waits this long
        # for their running tasks' final reports before it closes its server
        final_report_timeout=5.0,
        # chunk files no buffer row references are deleted after this delay
        chunk_grace_seconds=10.0,
        # chunk files the replay index does not know, untouched this long, are deleted (swept every minute):
        # written by a collector killed before it announced them, or announced to a coordinator that
        # died before its next snapshot. A live writer announces its chunk within seconds
        orphan_chunk_max_age=600.0,
        # the coordinator's state (tasks, replay index, counters, workers, eval history) is saved to
        # the shared directory this often and at shutdown; a crash loses at most this much
        snapshot_interval=2.0,
    )
