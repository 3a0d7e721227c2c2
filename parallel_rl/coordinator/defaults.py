"""The coordinator's sections of the run config: ``parallel.coordinator``, what
:class:`~parallel_rl.coordinator.coordinator.Coordinator` and its parts read (DI-engine's
``Coordinator.default_config()``, :mod:`parallel_rl.compat.ding_coordinator`, answers it as DI-engine's
``Coordinator.config``), and ``parallel.commander``, what its commander reads. A module
of its own, importing only the config's section type: the config's assembly reads these without loading the
coordinator (its transport, Flask)."""

from __future__ import annotations

import dataclasses

from easydict import EasyDict

from ..config.section import Section, setting

# one whole request head: the coordinator's server's max_request_header_size
MIN_READ_AHEAD_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True)
class CoordinatorSection(Section):
    """The coordinator's server, leases, connections and snapshots."""

    path = "parallel.coordinator"
    title = "Coordinator"

    host: str = setting("127.0.0.1", doc="the address the coordinator serves on")
    port: int = setting(0, lo=0, hi=65535, doc="its port (0: the OS picks one; the chosen address is printed)")
    advertise: str = setting("", doc="URL workers use to reach the coordinator (empty: the address it serves on)")
    heartbeat_ttl: float = setting(10.0, above=0, doc="a worker silent this long is marked lost and its task fails")
    auth_read: bool = setting(False, doc="read-only REST calls need the token too")
    max_body_bytes: int = setting(
        4 * 1024 * 1024,
        lo=1,
        doc="""request bodies larger than this get 413 (over twice
        this, the HTTP server refuses them unread)""",
    )
    request_threads: int = setting(
        16,
        lo=1,
        doc="""threads answering short calls (heartbeats, registration, REST);
        long-polls never take these""",
    )
    long_poll_slots: int = setting(
        256,
        lo=1,
        doc="""requests that may wait at once (throttled collectors, learners
        waiting for data); each holds a thread of its own. One more is answered at once with "retry_after" instead
        of waiting""",
    )
    max_connections: int = setting(
        1024,
        lo=1,
        doc="""idle keep-alive connections the coordinator keeps open at most;
        past it a connection closes after its answer""",
    )
    max_open_connections: int = setting(
        0,
        lo=0,
        doc="""connections the coordinator keeps open at most (0: three
        quarters of its open-file limit); past it a new connection closes the one idle longest, or is closed at once
        when every one is busy""",
    )
    read_ahead_bytes: int = setting(
        16 * 1024 * 1024,
        lo=MIN_READ_AHEAD_BYTES,
        doc="""bytes read ahead for
        connections that have not shown the cluster token (unfinished request heads), all together; past it the
        oldest heads are cut. Such a connection's body is never read (401/403). At least one whole request head
        (64 KiB)""",
    )
    max_connections_per_peer: int = setting(
        1024,
        lo=1,
        doc="""connections one address may hold open before they
        showed the cluster token; more are closed at once""",
    )
    worker_retention: float = setting(
        600.0,
        lo=0,
        doc="""a lost or gone worker stays listed (REST, dashboard) this
        long, then is forgotten; their connections close when they end""",
    )
    max_ended_workers: int = setting(1000, lo=0, doc="ended workers kept listed at most (the oldest go first)")
    final_report_timeout: float = setting(
        5.0,
        lo=0,
        doc="""when the coordinator stops (training over, SIGTERM) it
        lets the workers go and waits this long for their running tasks' final reports before it closes its
        server""",
    )
    chunk_grace_seconds: float = setting(
        10.0, lo=0, doc="chunk files no buffer row references are deleted after this delay"
    )
    orphan_chunk_max_age: float = setting(
        600.0,
        lo=0,
        doc="""chunk files the replay index does not know, untouched
        this long, are deleted (swept every minute): written by a collector killed before it announced them, or
        announced to a coordinator that died before its next snapshot. A live writer announces its chunk within
        seconds""",
    )
    snapshot_interval: float = setting(
        2.0,
        above=0,
        doc="""the coordinator's state (tasks, replay index, counters,
        workers, eval history) is saved to the shared directory this often and at shutdown; a crash loses at most
        this much""",
    )


@dataclasses.dataclass(frozen=True)
class CommanderSection(Section):
    """Which commander, its tasks' sizes, the collectors' allowance and the failures it tolerates."""

    path = "parallel.commander"
    title = "Commander (the coordinator's task policy)"

    type: str = setting(
        "solo",
        doc="""the commander: solo (one policy), league (two-player self-play: opponent
        pool, payoff table) or a registered one (COMMANDER_REGISTRY)""",
    )
    collector_task_env_steps: int = setting(
        4096, lo=1, doc="env steps per collector task; the next task follows at once"
    )
    max_env_steps_per_update: float = setting(
        16.0,
        lo=0,
        doc="""collectors may run at most warmup_env_steps +
        max_env_steps_per_update * train_iter env steps (0: no limit); beyond that they wait for the learner instead
        of taking its CPU""",
    )
    warmup_env_steps: int = setting(
        1000, lo=0, doc="the env steps collectors may run before the learner's first update"
    )
    allowance_grant: int = setting(
        256,
        lo=1,
        doc="""a throttled collector is woken once this many env steps are
        allowed again (waking it for every few steps would cost a round trip per tiny chunk; much more makes
        collection bursty)""",
    )
    rollout_queue_batches: int = setting(
        3,
        doc="""asynchronous on-policy flow (policy.flow="async"): collectors may
        collect at most this many learner batches (policy.collect.n_sample rows each) that the learner has not taken
        yet, IMPALA's bounded queue: they never wait for a policy version, only for room. 0: no limit (collectors
        that outpace the learner fill the rollout buffer and most of their rows age out unused); a whole number >= 0
        (the async flow checks it)""",
    )
    max_task_attempts: int = setting(
        3,
        lo=1,
        doc="""a failed task is replaced until it failed max_task_attempts
        times within task_failure_window seconds; then no replacement, and for the learner task the run fails""",
    )
    task_failure_window: float = setting(
        600.0,
        lo=0,
        doc="""the window max_task_attempts counts in (a learner killed
        three times in a day is not a crash loop; three times in ten minutes is); 0: the whole run""",
    )
    max_repeated_failures: int = setting(
        5,
        lo=0,
        doc="""the run fails when this many tasks of one role (collector,
        learner, evaluator) in a row fail with the same error, as their workers report it (numbers aside): a
        deterministic failure would otherwise be reissued for ever. 0: never""",
    )


def coordinator_default_config() -> EasyDict:
    """The ``parallel.coordinator`` section's defaults (the seed name)."""
    return CoordinatorSection.defaults()


def commander_default_config() -> EasyDict:
    """The ``parallel.commander`` section's defaults (the seed name)."""
    return CommanderSection.defaults()
