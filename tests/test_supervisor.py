"""`parallel-rl run`'s supervisor, through the real CLI: what it restarts (deaths, counted in a window) and what it
leaves alone (collectors removed on purpose), the names it prints, and the token file its client commands read."""

import os
import re
import signal
import stat

import pytest

from tests.support import eventually, get, toy_cluster_config
from tests.test_cluster import alive, busy_collectors, start_run, toy_config  # noqa: F401 (a fixture)

TOKEN = {"PARALLEL_RL_TOKEN": "supervisor-test-token"}
# trains until the test stops it (the toy config's 90 s budget could end a run on a loaded box first)
ENDLESS = ("--set", "env.stop_value=1000", "--set", "parallel.commander.max_seconds=0")


def active_collectors(url) -> list:
    return sorted(
        w["worker_id"]
        for w in get(url, "/collectors")["collectors"]
        if w["state"] in ("connecting", "idle", "busy", "leaving")
    )


def test_removed_collectors_are_not_replaced_and_added_ones_are_kept(cli, tmp_path, toy_config):
    """Issue 40.1: a removed collector exits 0 ("coordinator let us go (removed)"); the supervisor took that for a
    crash, started a replacement under a new name and counted it against max_restarts, so removals beyond the
    budget failed the run ("collector kept dying")."""
    run = cli(
        "run",
        "run",
        "-c",
        toy_config,
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        *ENDLESS,
        "--set",
        "parallel.supervisor.max_restarts=1",
        "--collectors",
        "3",
        env=TOKEN,
    )
    url = run.wait_line(r"^REST API: (http://127\.0\.0\.1:\d+)/api/v1$").group(1)
    api = url + "/api/v1"
    eventually(lambda: busy_collectors(api, 3), timeout=90, message="three busy collectors")
    for victim in ("collector-1", "collector-2"):  # more removals than max_restarts
        pid = next(w["pid"] for w in get(api, "/collectors")["collectors"] if w["worker_id"] == victim)
        remove = cli(f"remove-{victim}", "collectors", "remove", victim, "--coordinator", url, env=TOKEN)
        assert remove.wait(30) == 0, remove.output()
        run.wait_line(rf"launcher: {victim} was removed \(exit code 0\): not replaced", timeout=60)
        assert not alive(pid)
    before = get(api, "/cluster")["train_iter"]
    output = run.output()
    assert "restarting a collector" not in output and "kept dying" not in output, output[-3000:]
    assert not re.search(r"launcher: started collector-", output), output[-3000:]
    assert active_collectors(api) == ["collector-3"]
    counts = get(api, "/cluster")["workers"]["collector"]
    assert counts["gone"] == 2 and counts["lost"] == 0 and counts["idle"] + counts["busy"] == 1, counts
    # `collectors add` raises the count, and the added collector is supervised like the others
    add = cli("add", "collectors", "add", "--json", "--coordinator", url, env=TOKEN)
    assert add.wait(30) == 0, add.output()
    assert '"worker_id": "collector-4"' in add.output()
    eventually(
        lambda: active_collectors(api) == ["collector-3", "collector-4"] and busy_collectors(api, 2),
        timeout=60,
        message="the added collector at work",
    )
    eventually(lambda: get(api, "/cluster")["train_iter"] > before + 10, timeout=60, message="training goes on")
    assert run.proc.poll() is None, run.output()[-3000:]
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) == 130


def test_restarts_are_counted_in_a_window_and_the_backoff_resets(cli, tmp_path, toy_config):
    """Issue 41.6: the restart budget was for the run's whole life (max_restarts deaths at any time, a week apart,
    failed the run) and the backoff only grew. Restarts now count within parallel.supervisor.restart_window, and
    a role without a restart in the window starts again at no wait."""
    run, api = start_run(
        cli,
        tmp_path,
        toy_config,
        *ENDLESS,
        "--collectors",
        "1",
        "--set",
        "parallel.supervisor.max_restarts=1",
        "--set",
        "parallel.supervisor.restart_window=0.01",
    )
    for n in range(1, 4):  # three deaths, each long after the one before (a replacement registered meanwhile)
        victim = eventually(lambda: busy_collectors(api, 1), timeout=90, message=f"collector-{n} at work")[0]
        assert victim["worker_id"] == f"collector-{n}"
        os.kill(victim["pid"], signal.SIGKILL)
        run.wait_line(
            rf"launcher: collector-{n} exited with code -9 .*; restarting a collector in 0\.0s "
            rf"\(restart 1 of 1 within 0\.01s\)",
            timeout=30,
        )
    eventually(lambda: busy_collectors(api, 1), timeout=90, message="collector-4 at work")
    assert "kept dying" not in run.output() and run.proc.poll() is None, run.output()[-3000:]
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) == 130


def test_a_negative_restart_window_is_a_config_error_naming_it(tmp_path):
    from parallel_rl.errors import ConfigError

    with pytest.raises(ConfigError, match=r"supervisor\.restart_window=-1"):
        toy_cluster_config(tmp_path, supervisor={"restart_window": -1})


def test_a_collector_that_registers_again_is_printed_under_its_new_id(cli, tmp_path, toy_config):
    """Issue 40.10: a collector silent past its lease (stopped, starved of CPU) comes back under a new worker id;
    the launcher went on prefixing its lines with the old one, so [collector-1] and the REST id disagreed."""
    run, api = start_run(cli, tmp_path, toy_config, *ENDLESS, "--collectors", "1")
    victim = eventually(lambda: busy_collectors(api, 1), timeout=90, message="a busy collector")[0]
    os.kill(victim["pid"], signal.SIGSTOP)
    try:
        eventually(
            lambda: [
                w
                for w in get(api, "/collectors")["collectors"]
                if w["worker_id"] == victim["worker_id"] and w["state"] == "lost"
            ],
            timeout=30,
            message="the stopped collector lost",
        )
    finally:
        os.kill(victim["pid"], signal.SIGCONT)
    again = eventually(
        lambda: [
            w
            for w in get(api, "/collectors")["collectors"]
            if w["pid"] == victim["pid"] and w["state"] in ("idle", "busy")
        ],
        timeout=60,
        message="the collector registered again",
    )[0]
    assert again["worker_id"] != victim["worker_id"]
    new = re.escape(again["worker_id"])
    run.wait_line(rf"^\[{new}\] .*connected as {new} ", timeout=10)
    run.wait_line(rf"launcher: {re.escape(victim['worker_id'])} is now {new} ", timeout=10)
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) == 130


def test_a_run_without_an_exported_token_writes_it_to_a_private_file_the_client_commands_read(
    cli, tmp_path, toy_config
):
    """Issue 40.6: `run` made a token when PARALLEL_RL_TOKEN was unset and showed it nowhere, so `collectors
    add/remove` against it always got 401."""
    no_token = {"PARALLEL_RL_TOKEN": ""}
    run = cli(
        "run",
        "run",
        "-c",
        toy_config,
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        *ENDLESS,
        "--collectors",
        "1",
        env=no_token,
    )
    url = run.wait_line(r"^REST API: (http://127\.0\.0\.1:\d+)/api/v1$").group(1)
    path = run.wait_line(r"^token: in (\S+) \(").group(1)
    assert path == str(tmp_path / "exp" / "shared" / "run.token")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path) as f:
        token = f.read().strip()
    assert len(token) >= 16
    eventually(lambda: busy_collectors(url + "/api/v1", 1), timeout=90, message="a busy collector")
    refused = cli("refused", "collectors", "add", "--coordinator", url, env=no_token)
    assert refused.wait(30) != 0
    assert "--token-file" in refused.output(), refused.output()
    add = cli("add", "collectors", "add", "--json", "--token-file", path, "--coordinator", url, env=no_token)
    assert add.wait(30) == 0, add.output()
    assert '"worker_id": "collector-2"' in add.output()
    eventually(lambda: busy_collectors(url + "/api/v1", 2), timeout=60, message="the added collector at work")
    remove = cli(
        "remove", "--token-file", path, "collectors", "remove", "collector-1", "--coordinator", url, env=no_token
    )
    assert remove.wait(30) == 0, remove.output()
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) == 130
    assert token not in run.output()
