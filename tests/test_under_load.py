"""The suite's key end-to-end cases on a loaded machine (issue 40, "make it stay fixed"): beside 2 busy loops per
CPU (load 4 and more from them alone on the 2-core box, 6+ with the cluster's own processes), as on a shared
machine, `parallel-rl run` starts, registers its workers and solves the toy env; a removed collector is not
replaced and an added one joins; SIGTERM leaves no process behind.

The cluster runs with the shipped lease settings (`parallel.coordinator.heartbeat_ttl` 10 s, heartbeats every
1 s), not the toy config's 2 s lease that the fault tests use to see a death quickly. Every deadline is what the
code promises (a worker retries its first registration for 60 s; a stopping run gives its learner at most 60 s)
with room for a starved box, never a timing assert."""

import os
import re
import signal
import subprocess
import sys

import pytest

from tests.support import eventually, get
from tests.test_cluster import alive, busy_collectors, start_run, toy_config  # noqa: F401 (a fixture)
from tests.test_hardening import descendants_of_run
from tests.test_signals import descendants
from tests.test_supervisor import active_collectors

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.timeout(600)]

HOGS = 2 * (os.cpu_count() or 1)
# the shipped lease (parallel_rl/coordinator/defaults.py, slave/defaults.py), not the toy config's 2 s one
LEASE = ("--set", "parallel.coordinator.heartbeat_ttl=10", "--set", "parallel.worker.heartbeat_interval=1")
# trains until the test stops it
ENDLESS = ("--set", "env.stop_value=1000", "--set", "parallel.commander.max_seconds=0")
# a worker retries its first registration for 60 s (slave/link.py); the rest is room for the load
REGISTERED = 180
# a stopping run waits for its learner at most 60 s, for the others 5 s
STOPPED = 150


@pytest.fixture
def cpu_hog():
    """``HOGS`` processes spinning `while True: pass` for the whole test; each killed by its pid at the end. The
    test asserts they still spin when it is done (``hogs_spun``), so that what it saw happened under load."""
    hogs = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(HOGS)
    ]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait(30)


def hogs_spun(hogs) -> bool:
    return all(hog.poll() is None for hog in hogs)


def test_run_solves_the_toy_env_under_load(cli, tmp_path, toy_config, cpu_hog):
    run, url = start_run(cli, tmp_path, toy_config, *LEASE, "--set", "parallel.commander.max_seconds=0")
    seen = set()

    def ended():
        seen.update(descendants(run.pid))
        return run.proc.poll() is not None

    eventually(ended, timeout=REGISTERED + 120, interval=0.1, message="the run's end")
    assert run.wait(1) == 0, run.output()[-3000:]
    output = run.output()
    assert re.search(r"^solved: eval return", output, re.M), output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert not [pid for pid in seen if alive(pid)] and not descendants_of_run(run.pid)
    assert hogs_spun(cpu_hog)


def test_removed_collector_is_not_replaced_and_an_added_one_joins_under_load(cli, tmp_path, toy_config, cpu_hog):
    """With the token `run` made and wrote to a file (none exported): the client commands read it with
    --token-file."""
    no_token = {"PARALLEL_RL_TOKEN": ""}
    run = cli(
        "run",
        "run",
        "-c",
        toy_config,
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        *LEASE,
        *ENDLESS,
        "--collectors",
        "2",
        env=no_token,
    )
    url = run.wait_line(r"^REST API: (http://127\.0\.0\.1:\d+)/api/v1$", timeout=REGISTERED).group(1)
    token_file = run.wait_line(r"^token: in (\S+) ", timeout=10).group(1)
    api = url + "/api/v1"
    busy = eventually(lambda: busy_collectors(api, 2), timeout=REGISTERED, interval=0.1, message="two busy collectors")
    before = {w["worker_id"] for w in busy}
    victim = busy[0]

    remove = cli(
        "remove",
        "collectors",
        "remove",
        victim["worker_id"],
        "--token-file",
        token_file,
        "--coordinator",
        url,
        env=no_token,
    )
    assert remove.wait(60) == 0, remove.output()
    eventually(lambda: not alive(victim["pid"]), timeout=STOPPED, interval=0.1, message="the removed collector gone")
    run.wait_line(rf"launcher: {re.escape(victim['worker_id'])} was removed \(exit code 0\): not replaced", timeout=30)
    assert active_collectors(api) == sorted(before - {victim["worker_id"]}), get(api, "/collectors")

    add = cli("add", "collectors", "add", "--json", "--token-file", token_file, "--coordinator", url, env=no_token)
    assert add.wait(60) == 0, add.output()
    added = re.search(r'"worker_id": "(collector-\d+)"', add.output()).group(1)
    assert added not in before
    expected = sorted(before - {victim["worker_id"]} | {added})
    eventually(
        lambda: active_collectors(api) == expected and busy_collectors(api, 2),
        timeout=REGISTERED,
        interval=0.1,
        message=f"{added} at work beside the one left",
    )
    output = run.output()
    assert "restarting a collector" not in output and "kept dying" not in output, output[-3000:]
    assert run.proc.poll() is None, output[-3000:]
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(STOPPED) == 130, run.output()[-3000:]
    assert hogs_spun(cpu_hog)


def test_sigterm_to_run_leaves_no_process_under_load(cli, tmp_path, toy_config, cpu_hog):
    run, url = start_run(cli, tmp_path, toy_config, *LEASE, *ENDLESS, "--collectors", "2")
    seen = set()

    def training():
        seen.update(descendants(run.pid))
        assert run.proc.poll() is None, run.output()[-3000:]
        return busy_collectors(url, 2) and get(url, "/cluster")["train_iter"] > 0

    eventually(training, timeout=REGISTERED, interval=0.1, message="two busy collectors and a training learner")
    seen.update(descendants(run.pid))
    assert len(seen) >= 4, seen  # the fork server, the coordinator, the learner, the collectors
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait(STOPPED) == 143, run.output()[-3000:]
    assert "Traceback" not in run.output(), run.output()[-3000:]
    left = [pid for pid in seen if alive(pid)] + descendants_of_run(run.pid)
    assert not left, f"processes left: {left}\n{run.output()[-2000:]}"
    assert hogs_spun(cpu_hog)
