"""`parallel-rl run`'s supervisor, through the real CLI: what it restarts (deaths, counted in a window) and what it
leaves alone (collectors removed on purpose), the names it prints, and the token file its client commands read."""
import os
import re
import signal
import stat

from tests.support import eventually, get
from tests.test_cluster import alive, busy_collectors, start_run, toy_config  # noqa: F401 (a fixture)

TOKEN = {"PARALLEL_RL_TOKEN": "supervisor-test-token"}


def active_collectors(url) -> list:
    return sorted(w["worker_id"] for w in get(url, "/collectors")["collectors"]
                  if w["state"] in ("connecting", "idle", "busy", "leaving"))


def test_a_run_without_an_exported_token_writes_it_to_a_private_file_the_client_commands_read(cli, tmp_path,
                                                                                              toy_config):
    """Issue 40.6: `run` made a token when PARALLEL_RL_TOKEN was unset and showed it nowhere, so `collectors
    add/remove` against it always got 401."""
    no_token = {"PARALLEL_RL_TOKEN": ""}
    run = cli("run", "run", "-c", toy_config, "--set", f"exp_name={tmp_path / 'exp'}", "--set", "env.stop_value=1000",
              "--collectors", "1", env=no_token)
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
    remove = cli("remove", "--token-file", path, "collectors", "remove", "collector-1", "--coordinator", url,
                 env=no_token)
    assert remove.wait(30) == 0, remove.output()
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) == 130
    assert token not in run.output()
