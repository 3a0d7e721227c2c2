"""Process set-up shared by every role: logging, torch threads, seeds; the defaults of the ``system`` and
``parallel`` sections every role reads."""
from __future__ import annotations

import gc
import logging
import os
import random
import sys
import threading
from typing import Callable

import numpy as np
from easydict import EasyDict

logger = logging.getLogger(__name__)


def system_default_config() -> dict:
    """The ``system`` section of the config: what every process's set-up (:func:`setup_process`) reads."""
    return dict(
        # Threads per process for torch; with torch's default, two busy
        # processes on a 2-core machine each run 7-8x slower.
        torch_num_threads=1,
        log_level="INFO",
        # TensorBoard event files: <exp_name>/tensorboard (serial), <shared dir>/tensorboard/<role> (cluster;
        # <exp_name>/tensorboard/<role> in each process's working directory when the shared dir is an object store)
        tensorboard=True,
    )


def parallel_default_config() -> EasyDict:
    """The ``parallel`` section of the config: the cluster (its shared store, coordinator, commander, collectors,
    learner, supervisor and workers). Here, below every role, so that each role's ``default_config()`` (DI-engine's
    name: ``Coordinator``, the parallel collectors) answers its own part of it."""
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


def setup_logging(level: str = "INFO") -> None:
    root = logging.getLogger()
    if not any(getattr(h, "_parallel_rl", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
                                               "%H:%M:%S"))
        handler._parallel_rl = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(getattr(logging, str(level).upper(), logging.INFO))
    # the S3 client says at INFO where it found credentials, in every process
    for name in ("aiobotocore.credentials", "botocore.credentials"):
        logging.getLogger(name).setLevel(logging.WARNING)


def setup_process(cfg, seed: int | None = None, need_torch: bool = True) -> None:
    """Call first in every process: logs, torch threads (1 by default), seeds."""
    setup_logging(cfg.system.log_level)
    seed = cfg.seed if seed is None else seed
    random.seed(seed)
    np.random.seed(seed % (2**32))
    if need_torch:
        import torch

        torch.set_num_threads(max(1, int(cfg.system.torch_num_threads)))
        torch.manual_seed(seed)


def freeze_startup_objects() -> None:
    """Put what start-up made (modules, classes, the app, a resumed state) out of the garbage collector's way.

    A full collection walks every object the collector tracks, and holds the GIL while it does. In the
    coordinator most of them are start-up's, and with 256 collectors calling, a full collection stopped every
    request for up to ~360 ms: the REST p99. Frozen (``gc.freeze``), they are skipped, and a full collection
    walks what was made since. For a long-lived process's own entry point, once it runs: frozen objects are
    never collected."""
    gc.collect()
    gc.freeze()
    logger.info("%d start-up objects frozen out of the garbage collector's way (gc.freeze)", gc.get_freeze_count())


def experiment_dir(cfg) -> str:
    return os.path.abspath(cfg.exp_name)


def shared_root(cfg, override: str | None = None) -> str:
    """The shared filesystem root: ``--shared-dir``, else ``parallel.shared_dir``, else <exp_name>/shared."""
    return override or cfg.parallel.shared_dir or os.path.join(experiment_dir(cfg), "shared")


def run_storage(cfg, override: str | None = None):
    """The run's :class:`~parallel_rl.storage.SharedStorage`: at :func:`shared_root`, with the config's options."""
    from .storage import SharedStorage

    return SharedStorage(shared_root(cfg, override), cfg.parallel.storage_options)


def outcome_exit_code(outcome: str, stop_value: float) -> int:
    """The CLI's exit code for how training ended ("solved", "stopped" on a budget, anything else a failure).

    A budget is the goal (exit 0) only when there is no stop value (``env.stop_value = inf``); otherwise it
    ran out before the stop value (exit 3)."""
    if outcome == "solved":
        return 0
    if outcome == "stopped":
        return 0 if stop_value == float("inf") else 3
    return 1


def set_torch_threads(n: int) -> None:
    import torch

    torch.set_num_threads(max(1, int(n)))


# the pid of the process a worker dies with (set by `parallel-rl run`'s fork server, and a learner for its ranks)
PARENT_ENV = "PARALLEL_RL_PARENT_PID"


def die_with_parent(env_var: str = PARENT_ENV) -> None:
    """When started by ``parallel-rl run``: get SIGTERM if the launcher dies (Linux prctl)."""
    parent = os.environ.get(env_var)
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() != int(parent):  # the launcher died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def pin_process(pid: int, cpus: set) -> bool:
    """Pin every thread of process ``pid`` to ``cpus`` (threads it starts later inherit it); False if gone."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return False
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError):
            pass
    return True


def guarded_thread(target: Callable[[], None], name: str, on_death: Callable[[str], None]) -> threading.Thread:
    """A daemon thread running ``target`` that never dies silently: an exception escaping ``target`` is logged
    with its traceback and handed to ``on_death`` (as one line), which reports it and fails what depended
    on the thread."""

    def run() -> None:
        try:
            target()
        except Exception as exc:  # noqa: BLE001 - reported, never swallowed
            logging.getLogger(__name__).exception("%s: thread died", name)
            on_death(f"{name} thread died: {type(exc).__name__}: {exc}")

    return threading.Thread(target=run, name=name, daemon=True)


STOP_SIGNALS = ("SIGINT", "SIGTERM")


def signal_exit_code(name: str) -> int:
    """The shell's exit code for a run ended by signal ``name``: 128 + its number (SIGINT 130, SIGTERM 143)."""
    import signal

    return 128 + int(signal.Signals[name])


def on_signals(callback: Callable[[str], None], names=STOP_SIGNALS) -> None:
    """Call ``callback(signal_name)`` on a thread of its own each time one of ``names`` arrives, for the rest
    of the process's life (a signal during the exit must not become a traceback or a kill). Call once per
    process, from the main thread.

    Nothing runs inside the signal handler: Python's C-level handler writes the signal number to a pipe
    (``signal.set_wakeup_fd``, async-signal-safe) and the Python-level handler does nothing. A watcher
    thread reads the pipe and calls ``callback`` in ordinary thread context, where it may take locks and
    set events. (Setting an event from the handler itself deadlocks when the signal lands while the main
    thread holds that event's lock; starting a thread from it can deadlock the same way.) ``callback``
    must be idempotent: a user pressing Ctrl-C three times calls it three times."""
    import signal

    numbers = {int(signal.Signals[name]) for name in names}
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    for number in numbers:
        signal.signal(number, _ignore_in_handler)

    def watch() -> None:
        while True:
            for number in os.read(read_fd, 64):  # blocks until a signal arrives
                if number not in numbers:
                    continue
                try:
                    callback(signal.Signals(number).name)
                except Exception:  # noqa: BLE001 - logged; the next signal must still be heard
                    logging.getLogger(__name__).exception("signals: handling %s failed",
                                                          signal.Signals(number).name)

    guarded_thread(watch, "signal-watcher",
                   lambda reason: logging.getLogger(__name__).error("signals: %s", reason)).start()


def _ignore_in_handler(signum, frame) -> None:
    """The Python-level handler of :func:`on_signals`: nothing (the watcher thread does the work)."""
