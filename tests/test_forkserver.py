"""`parallel-rl run`'s workers are forks of one fork server that imported torch and the roles once: the first
ones, supervised restarts and collectors added to the running run alike; killing it leaves no orphan."""

import os
import re
import signal

from tests.support import eventually
from tests.test_cluster import (
    alive,
    busy_collectors,
    child_pids,
    get,
    role_of,
    start_run,
    toy_config,  # noqa: F401
    worker_pids,
)


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def fork_server_of(run_pid: int) -> int:
    """The run's fork server: its child whose command line is multiprocessing's fork server."""
    for pid in child_pids(run_pid):
        with open(f"/proc/{pid}/cmdline") as f:
            if "multiprocessing.forkserver" in f.read():
                return pid
    raise AssertionError(f"run {run_pid} has no fork server among its children {child_pids(run_pid)}")


def test_workers_and_their_restarts_are_forks_of_the_fork_server(cli, tmp_path, toy_config):
    run, url = start_run(cli, tmp_path, toy_config, "--set", "env.stop_value=1000", "--collectors", "2")
    busy = eventually(lambda: busy_collectors(url, 2), timeout=60, message="two busy collectors")
    server = fork_server_of(run.pid)
    workers = worker_pids(run.pid)
    assert sorted(role_of(pid) for pid in workers) == ["collector", "collector", "learner"]
    assert {parent_of(pid) for pid in workers} == {server}  # none of them imported torch itself
    os.kill(busy[0]["pid"], signal.SIGKILL)
    again = eventually(
        lambda: [
            w for w in get(url, "/collectors")["collectors"] if w["worker_id"] == "collector-3" and w["state"] == "busy"
        ],
        timeout=60,
        message="the restarted collector at work",
    )[0]
    assert parent_of(again["pid"]) == server and role_of(again["pid"]) == "collector"
    started = re.search(r"launcher: started collector-3 \(pid (\d+)\)", run.output())
    assert started and int(started.group(1)) == again["pid"]
    everything = worker_pids(run.pid) + [server]
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) == 130
    assert eventually(lambda: not [pid for pid in everything if alive(pid)], timeout=10, message="no process left")


def test_killing_the_fork_server_ends_its_workers_and_a_new_one_forks_their_replacements(cli, tmp_path, toy_config):
    run, url = start_run(cli, tmp_path, toy_config, "--set", "env.stop_value=1000", "--collectors", "1")
    eventually(lambda: busy_collectors(url, 1), timeout=60, message="a busy collector")
    server = fork_server_of(run.pid)
    workers = worker_pids(run.pid)
    assert len(workers) == 2
    os.kill(server, signal.SIGKILL)
    # they get SIGTERM with their parent gone (no orphan), and the supervisor restarts them from a new fork server
    eventually(lambda: not [pid for pid in workers if alive(pid)], timeout=15, message="the orphans gone")
    eventually(
        lambda: [
            w for w in get(url, "/collectors")["collectors"] if w["worker_id"] == "collector-2" and w["state"] == "busy"
        ],
        timeout=90,
        message="a collector forked by the new fork server at work",
    )
    new_server = fork_server_of(run.pid)
    assert new_server != server and {parent_of(pid) for pid in worker_pids(run.pid)} == {new_server}
    assert "restarting a collector" in run.output() and "restarting a learner" in run.output()
    everything = worker_pids(run.pid) + [new_server]
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) == 130
    assert eventually(lambda: not [pid for pid in everything if alive(pid)], timeout=10, message="no process left")


def test_a_collector_added_to_a_running_run_is_a_fork_of_its_fork_server(cli, tmp_path, toy_config):
    env = {"PARALLEL_RL_TOKEN": "fork-server-test-token"}
    run = cli(
        "run",
        "run",
        "-c",
        toy_config,
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "env.stop_value=1000",
        "--collectors",
        "1",
        env=env,
    )
    url = run.wait_line(r"^REST API: (http://127\.0\.0\.1:\d+)/api/v1$").group(1)
    eventually(lambda: busy_collectors(url + "/api/v1", 1), timeout=60, message="a busy collector")
    add = cli("add", "collectors", "add", "--json", "--coordinator", url, env=env)  # no URL: run starts one
    assert add.wait(30) == 0, add.output()
    assert '"worker_id": "collector-2"' in add.output() and '"state": "starting"' in add.output()
    added = eventually(
        lambda: [
            w
            for w in get(url + "/api/v1", "/collectors")["collectors"]
            if w["worker_id"] == "collector-2" and w["state"] == "busy"
        ],
        timeout=30,
        message="the added collector at work",
    )[0]
    assert parent_of(added["pid"]) == fork_server_of(run.pid) and role_of(added["pid"]) == "collector"
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) == 130


def test_a_launcher_killed_outright_leaves_no_worker_behind(cli, tmp_path, toy_config):
    run, url = start_run(cli, tmp_path, toy_config, "--set", "env.stop_value=1000", "--collectors", "1")
    eventually(lambda: busy_collectors(url, 1), timeout=60, message="a busy collector")
    everything = worker_pids(run.pid) + [fork_server_of(run.pid)]
    run.proc.send_signal(signal.SIGKILL)
    run.wait(10)
    # the fork server sees the launcher gone and exits; its workers get SIGTERM with it (PR_SET_PDEATHSIG)
    assert eventually(lambda: not [pid for pid in everything if alive(pid)], timeout=20, message="no process left")


def test_a_long_tmpdir_does_not_stop_the_fork_server(cli, tmp_path, toy_config):
    """multiprocessing puts the fork server's socket under TMPDIR, and an AF_UNIX path holds 107 bytes: with a
    long TMPDIR (a job's scratch dir) `run` failed with "AF_UNIX path too long" before it started a worker."""
    long_tmp = tmp_path / ("t" * 100)
    long_tmp.mkdir()
    run = cli("run", "run", "-c", toy_config, "--set", f"exp_name={tmp_path / 'exp'}", env={"TMPDIR": str(long_tmp)})
    assert run.wait(120) == 0, run.output()[-3000:]
    assert re.search(r"^solved: eval return", run.output(), re.M)


def test_workers_lines_reach_the_launchers_output_whole():
    """Two workers' output forwarded at once: every line arrives whole, with its own prefix (print() wrote a line
    and its newline in two calls, and two forwarding threads ran lines together)."""
    import threading
    import time

    from parallel_rl.entry.launcher import forward_lines

    class SlowOut:
        """A text stream whose every write lets another thread run (a terminal or a pipe that blocks)."""

        def __init__(self):
            self.parts = []

        def write(self, text):
            self.parts.append(text)
            time.sleep(0.0002)

        def flush(self):
            pass

    out = SlowOut()
    readers = []
    for name in ("collector-1", "collector-2"):
        read_fd, write_fd = os.pipe()
        with os.fdopen(write_fd, "wb") as w:
            w.write(b"".join(b"%s line %d\n" % (name.encode(), i) for i in range(200)))
        readers.append(threading.Thread(target=forward_lines, args=(name, os.fdopen(read_fd, "rb"), out)))
    for t in readers:
        t.start()
    for t in readers:
        t.join(30)
    lines = "".join(out.parts).splitlines()
    assert len(lines) == 400
    for line in lines:
        assert re.fullmatch(r"\[(collector-\d)\] \1 line \d+", line), line
