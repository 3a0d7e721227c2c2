"""Workers forked from a fork server that imported torch, gymnasium and the roles once.

``parallel-rl run`` starts the fork server first thing (:func:`start`), so its
imports (~2 s of CPU, mostly torch) run on one core while the launcher boots
the coordinator on the other; every learner and collector, the first ones, a
supervised restart and one added with ``parallel-rl collectors add`` alike, is
then a fork of it: milliseconds, not three processes importing torch at once.
It is multiprocessing's ``forkserver`` with :mod:`.preload` preloaded, which
only imports: forking a process that runs threads (torch's intra-op pool, a
logging thread) is unsafe, so nothing in it starts one (numpy's OpenBLAS pool,
started by its import, is shut down around each fork by OpenBLAS itself), and
each worker sets its own torch threads (``setup_process``).

A worker is a child of the fork server, not of the launcher. It gets SIGTERM
when the fork server dies (``PR_SET_PDEATHSIG``, :func:`die_with_parent`), and
the fork server gets SIGTERM when the launcher dies, even in the middle of
its imports (:func:`become_fork_server`), so killing either leaves no orphan; the launcher then sees its workers exit (code 255: the fork server was
not there to report theirs) and restarts them, and a new fork server is started
for the first of them (paying the imports once more). Ctrl-C on a terminal
signals the whole process group: the fork server ignores SIGINT from its first
instruction on (it is stopped by the launcher, never by the keyboard), so it
neither prints a traceback nor leaves a launcher forking through a dead server.
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import multiprocessing
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Dict, List, Optional

from multiprocessing import reduction

from ..runtime import PARENT_ENV

logger = logging.getLogger(__name__)

# imported in the fork server before it forks anything; this module first, so that _SERVER_PID is the fork
# server's even where a preload fails (multiprocessing then goes on without it, and workers import it themselves)
PRELOAD = [__name__, "parallel_rl.entry.preload"]
# in the fork server and the workers it forks: the fork server's pid
_SERVER_PID = os.getpid()
_context: Optional[multiprocessing.context.ForkServerContext] = None
# multiprocessing's temporary directory in the launcher, which holds the fork server's socket
SOCKET_DIR_ENV = "PARALLEL_RL_FORKSERVER_DIR"


def _forkserver() -> multiprocessing.context.ForkServerContext:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def start() -> None:
    """Start the fork server now, without waiting for its imports (the first fork waits for them)."""
    # the fork server and the workers it forks show the launcher's pid in their environment
    # (/proc/PID/environ): how to find every process of a run; the fork server dies with the process it names
    from multiprocessing import util

    os.environ[PARENT_ENV] = str(os.getpid())
    _forkserver()
    _short_socket_dir()
    os.environ[SOCKET_DIR_ENV] = util.get_temp_dir()  # where its socket will be: see leave_fork_server
    _ensure_running()


def _ensure_running() -> None:
    """multiprocessing's ``ensure_running`` (a no-op while the fork server lives) with SIGINT and SIGTERM blocked
    in this thread: the fork server is born with them blocked, until :func:`become_fork_server` ignores them.
    Blocked, not ignored, here: one for the launcher meanwhile waits, or goes to another of its threads. The
    resource tracker first: starting it unblocks them (it is born with them blocked and ignores them)."""
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _RUN_SIGNALS)
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


# what Ctrl-C (the whole process group) or `kill -TERM -PGID` send to every process of a run: the launcher
# hears them and stops the run; the fork server ignores them (a Ctrl-C in the ~2 s of its imports printed a
# KeyboardInterrupt traceback and killed it, and the launcher's next fork failed with EOFError)
_RUN_SIGNALS = {signal.SIGINT, signal.SIGTERM}
# the fork server's own signal to leave: from the launcher's stop(), and from the kernel when the launcher dies
STOP_SIGNAL = signal.SIGUSR1


def become_fork_server() -> None:
    """In the fork server, first thing (:mod:`.preload`): ignore SIGINT and SIGTERM (blocked until now, see
    :func:`_ensure_running`: the launcher stops it, with :data:`STOP_SIGNAL`); die with the launcher, even in
    the middle of the imports (it finished them first, 10-12 s on a busy box, before it saw the launcher
    gone); and on the way out, if the launcher is gone (killed outright), remove multiprocessing's temporary
    directory, which holds its socket (the launcher removes it otherwise; one was left by every killed run)."""
    from ..runtime import die_with_parent

    for number in _RUN_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _RUN_SIGNALS)
    signal.signal(STOP_SIGNAL, _exit_on_signal)
    atexit.register(leave_fork_server)  # preload registers it again after its imports, to run before theirs
    die_with_parent(signum=STOP_SIGNAL)


def _exit_on_signal(signum, frame) -> None:
    """Leave at once, not by raising SystemExit: the signal may land in Python code that torch's import runs
    from C++ (pybind11), where an exception becomes a C++ one and the process aborts, printing "terminate
    called after throwing an instance of 'pybind11::error_already_set'" and a stack to the launcher's
    stderr (seen once in CI, under a CLI that refused its arguments while the fork server imported torch)."""
    leave_fork_server()


def leave_fork_server() -> None:
    """The fork server's last act: remove its socket's directory if the launcher that would have is gone, then
    leave without the interpreter's teardown (0.4-1.1 s once torch is imported; it holds the launcher's stdout
    open until then)."""
    directory = os.environ.get(SOCKET_DIR_ENV, "")
    if os.getppid() != int(os.environ.get(PARENT_ENV) or 0) and os.path.basename(directory).startswith("pymp-"):
        shutil.rmtree(directory, ignore_errors=True)
    os._exit(0)


# an AF_UNIX socket path (the fork server's listener) holds at most 107 bytes on Linux
SUN_PATH_MAX = 107


def _short_socket_dir() -> None:
    """multiprocessing puts the fork server's socket in its temp dir under ``TMPDIR``; a long ``TMPDIR`` (a
    test's own, a job's scratch) made ``run`` fail with "AF_UNIX path too long". Python 3.12 falls back to
    /tmp then; on 3.11 do the same: create multiprocessing's temp dir (removed at exit as usual) under the
    first short writable system dir."""
    from multiprocessing import util

    # pymp-XXXXXXXX/listener-XXXXXXXX after the base: 41 bytes
    if len(tempfile.gettempdir()) + 41 <= SUN_PATH_MAX:
        return
    saved = tempfile.tempdir
    try:
        tempfile.tempdir = next(
            (d for d in ("/tmp", "/var/tmp", "/usr/tmp") if os.path.isdir(d) and os.access(d, os.W_OK)), saved
        )
        util.get_temp_dir()
    finally:
        tempfile.tempdir = saved


def stop(timeout: float = 5.0) -> None:
    """After the workers exited: stop the fork server and multiprocessing's resource tracker, wait for them
    (``timeout`` at most) and remove multiprocessing's temporary directory, so that ``run`` leaves neither a
    process nor a file behind. The fork server is told at once (:data:`STOP_SIGNAL`): it may still be importing (a run stopped while
    it starts), and a stray grandchild may hold the pipe it waits on. The CLI leaves through ``os._exit``,
    which skips multiprocessing's own clean-up at exit: this is that clean-up, through multiprocessing's
    ``_stop`` (the one its tests use) and ``_exit_function`` (its atexit hook). Idempotent; a no-op before
    :func:`start`."""
    from multiprocessing import forkserver, resource_tracker, util

    if forkserver._forkserver._forkserver_pid is not None:
        try:
            os.kill(forkserver._forkserver._forkserver_pid, STOP_SIGNAL)
        except ProcessLookupError:  # killed already (its zombie is reaped by _stop)
            pass

    def clean_up() -> None:
        for server in (forkserver._forkserver, resource_tracker._resource_tracker):
            server._stop()
        util._exit_function()

    worker = threading.Thread(target=clean_up, name="forkserver-stop", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        logger.warning("fork server: still running %.0fs after its workers exited; it exits with this process", timeout)


class _ChildFd:
    """A file descriptor the fork server hands to the forked worker (as the worker's stdout and stderr)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        return _ChildFd._rebuild, (reduction.DupFd(self.fd),)

    @staticmethod
    def _rebuild(dup) -> int:
        return dup.detach()


class ForkedProcess:
    """A worker forked by the fork server, running ``parallel-rl ARGV`` with environment ``env``; the
    ``subprocess.Popen`` methods the launcher uses (``pid``, ``poll``, ``wait``, ``terminate``, ``kill``;
    ``stdout`` carries its stdout and stderr). Blocks until the fork server has done its imports."""

    def __init__(self, argv: List[str], env: Dict[str, str]):
        _ensure_running()  # a new fork server where the last one died, born with SIGINT blocked as the first
        read_fd, write_fd = os.pipe()
        self._process = _forkserver().Process(
            target=_worker_main, args=(argv, env, _ChildFd(write_fd)), name=" ".join(argv[:1]), daemon=False
        )
        try:
            self._process.start()
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self.args = argv
        self.pid: int = self._process.pid
        self.stdout = os.fdopen(read_fd, "rb")
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()


def _worker_main(argv: List[str], env: Dict[str, str], out: int) -> None:
    """In the forked worker: its output to the launcher's pipe, its own environment and command line, then
    the CLI as ``python -m parallel_rl ARGV`` would run it."""
    for number in (*_RUN_SIGNALS, STOP_SIGNAL):  # what become_fork_server changed is not a worker's
        signal.signal(number, signal.SIG_DFL)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    _let_go_of_the_fork_server()
    os.environ.clear()
    # die_with_parent: the parent to die with is the fork server (exit at once where it died already)
    os.environ.update(env, **{PARENT_ENV: str(_SERVER_PID)})
    set_command_line([sys.executable, "-m", "parallel_rl", *argv])
    # what `python -m parallel_rl ARGV` runs (the console script's entry: it leaves through os._exit, without
    # the interpreter's teardown); by name, as the interpreter would: the CLI is the top floor, this is below it
    sys.argv = [sys.argv[0], *argv]
    runpy.run_module("parallel_rl", run_name="__main__", alter_sys=True)
    os._exit(0)  # not reached: the entry exits with the command's code


def _let_go_of_the_fork_server() -> None:
    """Close the worker's copy of the pipe whose end tells the fork server that the launcher is gone
    (multiprocessing hands it to every child so that a child can fork through the server too; ours never
    do): held here, a launcher killed outright (SIGKILL) would leave the fork server, and so its workers,
    running until the workers gave up on the coordinator."""
    from multiprocessing import forkserver

    fd = forkserver._forkserver._forkserver_alive_fd
    if fd is not None:
        os.close(fd)
        forkserver._forkserver._forkserver_alive_fd = None


def set_command_line(argv: List[str]) -> bool:
    """Show ``argv`` as this process's command line (``ps``, ``/proc/PID/cmdline``): a forked worker has the
    fork server's. Overwrites the argv area the kernel reports (what ``setproctitle`` does), cut to its size.
    Linux only; False where it could not."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (stat fields 48 and 49)
    except (OSError, IndexError, ValueError):
        return False
    size = end - start
    text = "\0".join(argv).encode()[: size - 1]
    ctypes.memmove(start, text + b"\0" * (size - len(text)), size)
    return True
