"""Operator paths around start-up, signals and arguments (issues 40 and 41): Ctrl-C or SIGTERM at any point of
`parallel-rl run`'s start-up ends it with 130/143, one line and no traceback, and leaves no process and no
temporary directory; arguments that cannot work fail first, as usage errors, before anything is touched."""

import os
import re
import signal
import socket
import subprocess
import tempfile

import pytest

from tests.support import CliProcess, eventually
from tests.test_cluster import TOY_CONFIG, alive, child_pids


@pytest.fixture
def toy_config(tmp_path):
    path = tmp_path / "toy.py"
    path.write_text(TOY_CONFIG)
    return str(path)


@pytest.fixture
def short_tmpdir():
    """A TMPDIR of the test's own, short enough for the fork server's socket: what multiprocessing leaves in it
    (pymp-* directories) is this test's."""
    path = tempfile.mkdtemp(prefix="prl-", dir="/tmp")
    yield path
    subprocess.run(["rm", "-rf", path], check=False)


def descendants(pid: int) -> set:
    """Every live process below ``pid`` (a /proc walk of parents)."""
    found, frontier = set(), [pid]
    while frontier:
        for child in child_pids(frontier.pop()):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def catches(pid: int, sig: signal.Signals) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (/proc/PID/status SigCgt): `run` handles SIGTERM once it
    hears signals itself, first thing in its command."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(mask & (1 << (int(sig) - 1)))


def fork_server(pid: int):
    for child in child_pids(pid):
        try:
            with open(f"/proc/{child}/cmdline") as f:
                if "multiprocessing.forkserver" in f.read():
                    return child
        except OSError:
            continue
    return None


def start_run(tmp_path, tmpdir, *extra, name="run"):
    return CliProcess(
        tmp_path,
        name,
        "run",
        "-c",
        str(tmp_path / "toy.py"),
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "env.stop_value=1000",
        *extra,
        env={"TMPDIR": tmpdir},
        new_session=True,
    )


def reach(run, moment: str, seen: set) -> None:
    """Wait for ``moment`` of the run's start-up (observable events, no sleeps), recording its processes."""

    def there():
        seen.update(descendants(run.pid))
        if run.proc.poll() is not None:
            raise AssertionError(f"run exited ({run.proc.returncode}) before {moment}:\n{run.output()[-3000:]}")
        if moment == "hearing signals":
            return catches(run.pid, signal.SIGTERM)
        if moment == "fork server up":
            return fork_server(run.pid)
        return re.search(r"registered learner-1 at", run.output())

    eventually(there, timeout=90, interval=0.01, message=moment)
    seen.update(descendants(run.pid))


def assert_nothing_left(run, seen: set, tmpdir: str) -> None:
    """When the command has returned: none of its processes (seen while it ran, or carrying its pid in their
    environment) is alive, and multiprocessing left no directory in TMPDIR."""
    from tests.test_hardening import descendants_of_run

    left = [pid for pid in seen if alive(pid)] + descendants_of_run(run.pid)
    assert not left, f"processes left: {left}\n{run.output()[-2000:]}"
    assert not os.listdir(tmpdir), f"left in TMPDIR: {os.listdir(tmpdir)}"


@pytest.mark.parametrize("moment", ["hearing signals", "fork server up", "worker registered"])
def test_ctrl_c_at_any_point_of_start_up_exits_130_with_one_line_and_leaves_nothing(
    tmp_path, toy_config, moment, short_tmpdir
):
    """Ctrl-C (SIGINT to the whole process group, the fork server's included) while `run` starts: it printed a
    KeyboardInterrupt traceback from the fork server's imports, or two ending in EOFError and exit 1 when the
    launcher forked through the dead fork server. Now: exit 130, no traceback, what to do next, nothing left."""
    run = start_run(tmp_path, short_tmpdir)
    seen: set = set()
    try:
        reach(run, moment, seen)
        os.killpg(run.pid, signal.SIGINT)  # Ctrl-C: the whole process group
        assert run.wait(60) == 130, run.output()[-3000:]
    finally:
        run.stop()
    out = run.output()
    assert "Traceback" not in out, out[-3000:]
    hint = re.search(
        r"^continue with: parallel-rl run --resume \S+|^interrupted \(SIGINT\) before the run started; "
        r"nothing to continue",
        out,
        re.M,
    )
    assert hint, out[-3000:]
    if moment == "worker registered":
        assert hint.group(0).startswith("continue with")
    assert_nothing_left(run, seen, short_tmpdir)


@pytest.mark.parametrize("moment", ["hearing signals", "fork server up", "worker registered"])
def test_sigterm_to_the_launcher_alone_stops_every_process_before_it_returns(
    tmp_path, toy_config, moment, short_tmpdir
):
    """SIGTERM to the launcher only: in its first seconds it died at once (exit -15), leaving the fork server
    importing and the resource tracker behind; later the learner and the resource tracker outlived it."""
    run = start_run(tmp_path, short_tmpdir)
    seen: set = set()
    try:
        reach(run, moment, seen)
        run.proc.send_signal(signal.SIGTERM)
        assert run.wait(60) == 143, run.output()[-3000:]
    finally:
        run.stop()
    assert "Traceback" not in run.output()
    assert re.search(r"^interrupted \(SIGTERM\)", run.output(), re.M), run.output()[-3000:]
    assert_nothing_left(run, seen, short_tmpdir)


def test_a_launcher_killed_while_its_fork_server_imports_leaves_no_process_or_directory(
    tmp_path, toy_config, short_tmpdir
):
    """The launcher SIGKILLed in its first seconds: the fork server went on importing for 10-12 s, and every
    killed run left a pymp-* directory in the temp dir. Now it dies with the launcher and removes it."""
    run = start_run(tmp_path, short_tmpdir)
    seen: set = set()
    try:
        reach(run, "fork server up", seen)
        run.proc.send_signal(signal.SIGKILL)
        run.wait(30)
    finally:
        run.stop()
    eventually(lambda: not [pid for pid in seen if alive(pid)], timeout=30, message="the run's processes gone")
    eventually(lambda: not os.listdir(short_tmpdir), timeout=10, message="the fork server's directory removed")


def test_an_argument_error_after_the_fork_server_started_leaves_no_process(tmp_path, toy_config, short_tmpdir):
    """An error found once the fork server runs (here an unknown config key) ends the command with it gone."""
    run = start_run(tmp_path, short_tmpdir, "--set", "policy.no_such_key=1")
    seen: set = set()
    run.wait(60)
    assert run.proc.returncode == 2, run.output()[-3000:]
    assert "no_such_key" in run.output() and "Traceback" not in run.output()
    assert_nothing_left(run, seen, short_tmpdir)


@pytest.mark.parametrize("role", ["run", "coordinator", "collector"])
def test_a_port_out_of_range_is_a_usage_error(cli, tmp_path, toy_config, role):
    """`--port 99999` printed a 42-line OverflowError traceback in run, coordinator and collector."""
    args = {
        "run": ["run", "-c", toy_config, "--set", f"exp_name={tmp_path / 'exp'}"],
        "coordinator": ["coordinator", "-c", toy_config, "--set", f"exp_name={tmp_path / 'exp'}"],
        "collector": ["collector", "--insecure-no-token"],
    }[role]
    proc = cli(role, *args, "--port", "99999", env={"PARALLEL_RL_TOKEN": "t"})
    assert proc.wait(60) == 2, proc.output()[-3000:]
    assert "Traceback" not in proc.output()
    assert "argument --port: 99999 is out of range: a port is 0-65535" in proc.output()


def test_a_port_in_use_fails_before_the_earlier_run_s_files_are_deleted(cli, tmp_path, toy_config):
    """`run --port <in use>` deleted the previous run's files (326, a `run --resume` could have continued) and
    then failed on the port; `coordinator --fresh` alike. Now the port is bound before the store is touched."""
    import torch

    from parallel_rl.storage import SharedStorage

    shared = tmp_path / "shared"
    storage = SharedStorage(str(shared))
    storage.learner_states.save(100, {"train_iter": 100, "policy": {"w": torch.ones(2)}})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for name, args in (("run", ["run"]), ("coordinator", ["coordinator", "--fresh"])):
            proc = cli(
                name,
                *args,
                "-c",
                toy_config,
                "--set",
                f"exp_name={tmp_path / 'exp'}",
                "--shared-dir",
                str(shared),
                "--port",
                port,
                env={"PARALLEL_RL_TOKEN": "t"},
            )
            assert proc.wait(60) == 2, proc.output()[-3000:]
            assert f"cannot listen on 127.0.0.1:{port}" in proc.output() and "Traceback" not in proc.output()
            assert storage.learner_states.latest_good()[0] == 100, f"{name} deleted the earlier run's files"


def test_a_collector_s_port_in_use_is_reported_before_torch_is_imported(cli, tmp_path):
    """`collector --port <in use>` reported it after its imports (12 s on a busy box)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        proc = cli(
            "collector", "collector", "--insecure-no-token", "--port", port, env={"PYTHONPROFILEIMPORTTIME": "1"}
        )  # every import on stderr: which came before the error
        assert proc.wait(60) == 2, proc.output()[-3000:]
    assert f"cannot listen on 127.0.0.1:{port}" in proc.output()
    assert not re.search(r"\|\s+torch$", proc.output(), re.M), "torch was imported before the port was checked"


def test_a_coordinator_url_without_a_scheme_is_a_usage_error(cli):
    proc = cli("collector", "collector", "--coordinator", "localhost:8000")
    assert proc.wait(60) == 2, proc.output()[-3000:]
    assert "'localhost:8000' has no scheme: use http://HOST:PORT" in proc.output()
    assert "Traceback" not in proc.output() and "LocationValueError" not in proc.output()


def test_coordinator_and_collector_exit_130_on_ctrl_c(cli, tmp_path, toy_config):
    """The README's exit codes: 130 interrupted (Ctrl-C); both exited 0. SIGTERM stays a service's stop (0)."""
    env = {"PARALLEL_RL_TOKEN": "signals-test-token"}
    coordinator = cli(
        "coordinator",
        "coordinator",
        "-c",
        toy_config,
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "env.stop_value=1000",
        "--port",
        "0",
        env=env,
    )
    url = coordinator.wait_line(r"^REST API: (http://127\.0\.0\.1:\d+)/api/v1$").group(1)
    collector = cli("collector", "collector", "--coordinator", url, "-c", toy_config, env=env)
    collector.wait_line(r"connected as collector", timeout=90)
    collector.proc.send_signal(signal.SIGINT)
    assert collector.wait(30) == 130, collector.output()[-3000:]
    coordinator.proc.send_signal(signal.SIGINT)
    assert coordinator.wait(30) == 130, coordinator.output()[-3000:]
    assert "Traceback" not in coordinator.output() + collector.output()
