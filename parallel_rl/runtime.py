"""Process set-up shared by every role: logging, torch threads, seeds; the defaults of the ``system`` section
that set-up reads."""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import random
import sys
import threading
from typing import Callable, List, Optional

import numpy as np
from easydict import EasyDict

from .config.section import Section, setting

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SystemSection(Section):
    """What every process's set-up (:func:`setup_process`) reads."""

    path = "system"
    title = "Every process (threads, logging, TensorBoard)"

    torch_num_threads: int = setting(
        1,
        lo=1,
        doc="""threads per process for torch; with torch's default, two busy
        processes on a 2-core machine each run 7-8x slower""",
    )
    log_level: str = setting("INFO", doc="the log level: DEBUG, INFO, WARNING, ERROR (any case)")
    tensorboard: bool = setting(
        True,
        doc="""TensorBoard event files: <exp_name>/tensorboard (serial), <shared
        dir>/tensorboard/<worker id> (cluster: learner-1, collector-1, ..., and evaluator; <exp_name>/tensorboard/<worker
        id> in each process's working directory when the shared dir is an object store). A fresh `run` removes the
        earlier run's""",
    )
    tensorboard_interval: float = setting(
        10.0,
        lo=0,
        doc="""cluster: the learner's and each collector's scalars at
        most once per tag every this many seconds (the newest value in between is written when the worker's task
        ends; 0: every point); evaluations: every one""",
    )
    tensorboard_max_mb: float = setting(
        64.0,
        lo=0,
        doc="""cluster: each TensorBoard directory's event files
        together, in MiB: a writer starts a new file at a quarter of it and the directory's oldest files are deleted
        past it (0: no cap)""",
    )


def system_default_config() -> EasyDict:
    """The ``system`` section's defaults (the seed name)."""
    return SystemSection.defaults()


def setup_logging(level: str = "INFO") -> None:
    root = logging.getLogger()
    if not any(getattr(h, "_parallel_rl", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
        )
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


def budget_used_up(run, env_steps: int, train_iter: int, elapsed: float) -> str:
    """Which of the run's budgets (``run.max_env_step``, ``max_train_iter``, ``max_seconds``; 0: none) is used up,
    as the run's reason, in the serial pipeline and the coordinator alike; "" while none is. One used up before
    any update says so: the run ends as asked, but nothing was trained (a budget within the collectors' head start,
    ``parallel.commander.warmup_env_steps``, or a learner that had not started yet)."""
    if run.max_env_step and env_steps >= run.max_env_step:
        reason = f"env step budget {run.max_env_step} used up"
    elif run.max_train_iter and train_iter >= run.max_train_iter:  # never before an update: the budget is >= 1
        reason = f"train iteration budget {run.max_train_iter} used up"
    elif run.max_seconds and elapsed >= run.max_seconds:
        reason = f"time budget {run.max_seconds:g}s used up"
    else:
        return ""
    return reason + (" before the first update: nothing was trained" if train_iter == 0 else "")


def outcome_exit_code(outcome: str, stop_value: float | None) -> int:
    """The CLI's exit code for how training ended ("solved", "stopped" on a budget, anything else a failure).

    A budget is the goal (exit 0) only when there is no stop value (the compiled ``run.stop_value`` is None:
    the user wrote None or inf); otherwise it ran out before the stop value (exit 3)."""
    if outcome == "solved":
        return 0
    if outcome == "stopped":
        return 0 if stop_value is None else 3
    return 1


def set_torch_threads(n: int) -> None:
    import torch

    torch.set_num_threads(max(1, int(n)))


# the pid of the process a worker dies with (set by `parallel-rl run`'s fork server, and a learner for its ranks)
PARENT_ENV = "PARALLEL_RL_PARENT_PID"


def die_with_parent(env_var: str = PARENT_ENV, signum: int | None = None) -> bool:
    """When started by ``parallel-rl run`` (or a lab's sweep): get ``signum`` (SIGTERM) if the launcher dies (Linux
    prctl); True when it is set. The kernel sends it when the *thread* that started this process ends: start such
    processes from a thread that lives as long as the process (the main thread). It can come more than once: the
    kernel hands an ending thread's children to another thread of its process and sends it again as that one
    ends (a launcher killed with SIGKILL ends thread by thread), so acting on it must be idempotent."""
    parent = os.environ.get(env_var)
    # this process's own pid: a launcher named itself for its children (its command run again in its process,
    # as the CLI's fuzzer does), not a parent to die with
    if not parent or not parent.isdigit() or int(parent) == os.getpid() or not sys.platform.startswith("linux"):
        return False
    import ctypes
    import signal

    signum = signal.SIGTERM if signum is None else signum
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signum)  # PR_SET_PDEATHSIG
    except OSError:
        return False
    if os.getppid() != int(parent):  # the launcher died before prctl took effect
        os.kill(os.getpid(), signum)
    return True


def silence_output() -> None:
    """Point this process's stdout and stderr at /dev/null: for when their reader is gone (a broken pipe), so that
    the lines still to come (a last message, the interpreter's flush at exit) cannot fail what is left to do."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


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


_signals_lock = threading.Lock()
_signals_heard: List[str] = []  # the stop signals this process heard, the first first
_signal_callbacks: List[Callable[[str], None]] = []
_watching = False


def on_signals(callback: Optional[Callable[[str], None]] = None) -> None:
    """Call ``callback(signal_name)`` each time SIGINT or SIGTERM arrives, for the rest of the process's life (a
    signal during the exit must not become a traceback or a kill), and at once for each one that arrived
    since the first call of this function (the signals are heard from then on: a process calls it first
    thing, without a callback, and its parts add theirs as they are made). Call it from the main thread.

    Nothing runs inside the signal handler: Python's C-level handler writes the signal number to a pipe
    (``signal.set_wakeup_fd``, async-signal-safe) and the Python-level handler does nothing. A watcher
    thread reads the pipe and calls the callbacks in ordinary thread context, where they may take locks and
    set events. (Setting an event from the handler itself deadlocks when the signal lands while the main
    thread holds that event's lock; starting a thread from it can deadlock the same way.) ``callback``
    must be idempotent: a user pressing Ctrl-C three times calls it three times."""
    global _watching
    with _signals_lock:
        if not _watching:
            _watch_signals()
            _watching = True
        if callback is None:
            return
        _signal_callbacks.append(callback)
        earlier = list(_signals_heard)
    for name in earlier:
        _call(callback, name)


def _watch_signals() -> None:
    import signal

    numbers = {int(signal.Signals[name]) for name in STOP_SIGNALS}
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
                name = signal.Signals(number).name
                with _signals_lock:
                    _signals_heard.append(name)
                    callbacks = list(_signal_callbacks)
                for callback in callbacks:
                    _call(callback, name)

    guarded_thread(
        watch, "signal-watcher", lambda reason: logging.getLogger(__name__).error("signals: %s", reason)
    ).start()


def _call(callback: Callable[[str], None], name: str) -> None:
    try:
        callback(name)
    except Exception:  # noqa: BLE001 - logged; the next signal must still be heard
        logging.getLogger(__name__).exception("signals: handling %s failed", name)


def _ignore_in_handler(signum, frame) -> None:
    """The Python-level handler of :func:`on_signals`: nothing (the watcher thread does the work)."""
