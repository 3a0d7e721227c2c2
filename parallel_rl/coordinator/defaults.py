"""The coordinator's sections of the run config with their defaults: ``parallel.coordinator``, what
:class:`~parallel_rl.coordinator.coordinator.Coordinator` and its parts read (``Coordinator.default_config()``
answers it, as DI-engine's ``Coordinator.config``), and ``parallel.commander``, what its commander reads. A
module of its own, importing nothing: the config's assembly reads these without loading the coordinator (its
transport, Flask), and the coordinator's module is near its size bar."""
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
        # bytes read ahead for connections that have not shown the cluster token (unfinished request heads), all
        # together; past it the oldest heads are cut. Such a connection's body is never read (401/403)
        read_ahead_bytes=16 * 1024 * 1024,
        # connections one address may hold open before they showed the cluster token; more are closed at once
        max_connections_per_peer=1024,
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


def commander_default_config() -> EasyDict:
    """The commander's own section of the run config, ``parallel.commander``: which commander, its tasks' sizes,
    evaluations, the collectors' allowance, failures it tolerates and the run's budgets."""
    return EasyDict(
        type="solo",
        # env steps per collector task; the next task follows at once
        collector_task_env_steps=4096,
        # evaluate every N learner iterations (on the newest policy)
        eval_freq=200,
        # collectors may run at most warmup_env_steps + max_env_steps_per_update * train_iter
        # env steps (0: no limit); beyond that they wait for the learner instead of taking its CPU
        max_env_steps_per_update=16.0,
        warmup_env_steps=1000,
        # a throttled collector is woken once this many env steps are allowed again (waking it for
        # every few steps would cost a round trip per tiny chunk; much more makes collection bursty)
        allowance_grant=256,
        # asynchronous on-policy flow (policy.flow="async"): collectors may collect at most this many learner
        # batches (policy.collect.n_sample rows each) that the learner has not taken yet, IMPALA's bounded
        # queue: they never wait for a policy version, only for room. With the learner taking the oldest
        # rows first, a row waits about this many updates (plus ~3 in the pipeline), within max_staleness
        # (8), so nearly nothing is dropped. 3 keeps a batch ready while 16 collectors refill the queue in
        # small shares (APPO, CartPole, 16 latency-bound collectors: with 2 the learner waited for data 16 %
        # of the time, with 3 or 4 0.1 %; 4 left the least margin to max_staleness). 0: no limit (collectors
        # that outpace the learner fill the rollout buffer and most of their rows age out unused)
        rollout_queue_batches=3,
        # a failed task is replaced until it failed max_task_attempts times within task_failure_window seconds
        # (a learner killed three times in a day is not a crash loop; three times in ten minutes is); then no
        # replacement, and for the learner task the run fails. A window of 0 counts over the whole run
        max_task_attempts=3,
        task_failure_window=600.0,
        # the run fails when this many tasks of one role (collector, learner, evaluator) in a row fail with the
        # same error, as their workers report it (numbers aside): a deterministic failure (a checkpoint that
        # does not fit the model, a broken env) would otherwise be reissued for ever. 0: never
        max_repeated_failures=5,
        # budgets (0: none): stop after this many env steps / train iterations / seconds
        max_env_step=0,
        max_train_iter=0,
        max_seconds=0.0,
    )
