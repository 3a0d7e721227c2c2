"""Default config of the cluster (the ``parallel`` section)."""
from __future__ import annotations

from easydict import EasyDict


def parallel_default_config() -> EasyDict:
    return EasyDict(
        # shared filesystem root: a local path or file:// URL, or an object store (s3://bucket/prefix, gs://, az://);
        # empty: <exp_name>/shared
        shared_dir="",
        # options of the object store's fsspec filesystem, e.g. dict(endpoint_url=..., profile=...) for s3fs
        # (credentials are better left to AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile: every worker
        # receives this config)
        storage_options={},
        coordinator=dict(
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
        ),
        commander=dict(
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
        ),
        collector=dict(
            # transitions per chunk file, at most (a chunk also ends after flush_interval, at a new
            # policy or when the allowance runs out). Every file costs its writer ~0.4 ms
            chunk_size=1024,
            # a partial chunk is flushed after this many seconds
            flush_interval=0.05,
        ),
        learner=dict(
            # under `parallel-rl run` with >= 2 CPUs, once training runs: the learner gets the last CPU to
            # itself, the coordinator and collectors share the others, while the collectors wait for the
            # learner (sharing cores with them costs it ~15% of its updates on a 2-core machine); busy
            # collectors may use every CPU (parallel_rl/entry/placement.py)
            dedicated_cpu=True,
            # publish a policy checkpoint every N iterations. Each one costs a save here, a load in every
            # collector and a cut in every collector's chunk; on CartPole 50 (~0.1 s) trains ~10% faster
            # than 20 and solves as fast
            publish_every=50,
            # batches requested per round trip (pipelined; each round trip costs the learner's core ~1 ms)
            prefetch_batches=16,
            # chunk files kept in memory (at least prefetch_batches * batch_size of them; each slot holds
            # chunk_size rows, so memory is chunk_cache_size * chunk_size rows)
            chunk_cache_size=512,
            # save the full learner state (optimizer included, for resume) every N iterations
            save_state_every=200,
            # policy/learner checkpoints kept on disk
            keep_checkpoints=20,
            # wait for this many transitions in the buffer before training
            min_buffer_size=256,
            # at most this many updates per transition collected (0: unlimited)
            max_updates_per_transition=0.0,
            # data-parallel learner ranks (torch.distributed: gloo on the CPU, NCCL for CUDA gradients). With
            # N > 1 the learner worker is a LearnerAggregator: rank 0, which samples each batch, tells every
            # rank its share, trains on its own, publishes checkpoints and talks to the coordinator; the
            # gradients are averaged over the ranks. Off-policy algorithms only (DQN, SAC)
            world_size=1,
            # rank 0 hosts the rendezvous (a TCPStore) here; the other ranks get MASTER_ADDR/MASTER_PORT.
            # Port 0: the OS picks one (ranks spawned by the aggregator); fix it for ranks on other hosts
            master_addr="127.0.0.1",
            master_port=0,
            # the aggregator starts ranks 1..N-1 as local processes; false: they are started elsewhere
            # (`parallel-rl learner-rank` with MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) and join
            spawn_ranks=True,
            # seconds a collective (or the rendezvous) may wait for a rank before it fails: a dead rank
            # never hangs the others
            collective_timeout=60.0,
            # a lost rank restarts the whole group from the last learner state, at most this many times per
            # task; one more loss fails the learner task (the coordinator issues a new one)
            max_rank_restarts=3,
        ),
        supervisor=dict(
            # `parallel-rl run` restarts a child that dies, at most this many times per role (learner,
            # collector); one more death of that role fails the run
            max_restarts=5,
            # seconds before the first restart of a role; doubled for each further one, up to max_backoff
            backoff=0.25,
            max_backoff=10.0,
        ),
        worker=dict(
            heartbeat_interval=1.0,
            request_timeout=5.0,
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
        ),
    )
