"""Runs as a resource of the service and one pool of workers (issue 44, items 1, 2 and 7), through the real CLI
(`parallel-rl serve`, `parallel-rl runs ...`, `parallel-rl collectors ...`) and the real REST API: every run a
real coordinator with real worker processes forked from the service's fork server, small budgets.

The runs train the toy Counting env (tests/test_cluster.py's TOY_CONFIG): a run with ``env.stop_value=100``
never solves (an episode returns at most 5), so it runs until it is stopped or its budget ends; one with the
config's stop value 4 solves within seconds.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parallel_rl.service.share import Claim, fair_share
from tests.support import CliProcess, eventually
from tests.test_cluster import TOY_CONFIG

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "test-service-token"
ENV = {"PARALLEL_RL_TOKEN": TOKEN, "PYTHONPATH": ROOT}
AUTH = {"Authorization": f"Bearer {TOKEN}"}
UNENDING = ["env.stop_value=100", "parallel.commander.max_seconds=300"]  # stopped by the test, not by itself
START = 120.0  # a service up (the fork server imports torch) or a run started with its workers, on a loaded box


def serve(tmp_path, service_dir, *args: str, name: str = "serve") -> tuple:
    proc = CliProcess(tmp_path, name, "serve", "--dir", str(service_dir), "--port", "0", *args, env=ENV)
    url = proc.wait_line(r"^REST API: (http://\S+)/api/v1$", timeout=START).group(1)
    return proc, url


def runs_cli(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "parallel_rl", "runs", *args, "--service", url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **ENV},
    )


def run_of(url: str, run_id: str) -> dict:
    return requests.get(f"{url}/api/v1/runs/{run_id}", timeout=10).json()


def submit(url: str, config: str, overrides=(), **body) -> dict:
    answer = requests.post(
        f"{url}/api/v1/runs", json={"config": config, "overrides": list(overrides), **body}, headers=AUTH, timeout=60
    )
    assert answer.status_code == 201, answer.text
    return answer.json()


@pytest.fixture
def toy_config(tmp_path):
    path = tmp_path / "toy.py"
    path.write_text(TOY_CONFIG)
    return str(path)


def test_the_fair_share_gives_each_run_its_minimum_then_shares_the_rest_by_weight():
    a, b, c = Claim("a", 1.0, True), Claim("b", 2.0, False), Claim("c", 1.0, False)
    assert fair_share([a], learners=1, collectors=3) == {"a": 3}  # no slot idle while a run wants it
    assert fair_share([a, b], learners=1, collectors=3) == {"a": 3}  # b waits for a learner
    assert fair_share([a, b], learners=2, collectors=3) == {"a": 1, "b": 2}  # 1 each, the rest 1:2
    assert fair_share([a, b, c], learners=3, collectors=6) == {"a": 2, "b": 2, "c": 2}  # rest 3 as 0.75/1.5/0.75
    assert fair_share([a, b, c], learners=3, collectors=2) == {"a": 1, "b": 1}  # c waits for a collector
    # a queued run does not overtake an earlier one, and a running run is never preempted by a smaller pool
    assert fair_share([a, b, Claim("d", 1.0, False)], learners=2, collectors=2, min_collectors=2) == {"a": 2}
    assert fair_share([Claim("x", 1.0, True), Claim("y", 1.0, True)], learners=1, collectors=1) == {"x": 1, "y": 0}


@pytest.mark.slow
@pytest.mark.multirun
def test_two_runs_on_one_learner_queue_start_stop_and_move_the_slots(tmp_path, toy_config):
    service, url = serve(tmp_path, tmp_path / "svc", "--learners", "1", "--collectors", "2")
    try:
        cli = runs_cli(url, "submit", "-c", toy_config, *[a for o in UNENDING for a in ("--set", o)])
        assert cli.returncode == 0, cli.stderr
        assert "run-1" in cli.stdout
        first = eventually(
            lambda: (r := run_of(url, "run-1"))["state"] == "running" and r["env_steps"] > 0 and r,
            timeout=START,
            message="run-1 running",
        )
        assert first["workers"] == {"learners": 1, "collectors": 2}  # the whole pool: no slot idle
        second = submit(url, toy_config, name="second")  # solves on its own once it runs
        assert (second["id"], second["name"]) == ("run-2", "second")
        listed = requests.get(f"{url}/api/v1/runs", timeout=10).json()["runs"]
        assert [(r["id"], r["state"]) for r in listed] == [("run-1", "running"), ("run-2", "queued")]
        assert listed[1]["workers"] == {"learners": 0, "collectors": 0}  # no learner slot for it yet
        detail = eventually(lambda: (d := run_of(url, "run-1"))["curve"] and d, timeout=START, message="a curve")
        assert detail["summary"]["env_steps"] > 0 and detail["tasks"]
        assert {t["kind"] for t in detail["tasks"]} <= {"collector", "learner", "evaluator"}
        assert all(t["task_id"] and t["state"] for t in detail["tasks"])
        assert detail["url"].startswith("http://127.0.0.1:")  # its own coordinator answers every endpoint
        assert requests.get(detail["url"] + "/api/v1/cluster", timeout=10).json()["state"] == "running"
        pool = requests.get(f"{url}/api/v1/pool", timeout=10).json()
        assert pool["held"] == {"learners": 1, "collectors": 2} and pool["runs"]["queued"] == 1

        stopped = runs_cli(url, "stop", "run-1")  # the slots move to the queued run
        assert stopped.returncode == 0, stopped.stderr
        eventually(lambda: run_of(url, "run-1")["state"] == "stopped", timeout=60, message="run-1 stopped")
        solved = eventually(
            lambda: (r := run_of(url, "run-2"))["state"] in ("solved", "failed") and r, timeout=START, message="run-2"
        )
        assert solved["state"] == "solved", solved["reason"]
        assert solved["last_eval_return"] >= 4.0
        ended = run_of(url, "run-1")
        assert ended["reason"] == "stopped by DELETE /api/v1/runs/run-1"
        assert os.path.isdir(os.path.join(ended["dir"], "shared", "coordinator"))  # its data stays
        listing = runs_cli(url, "list", "--json")
        assert [r["state"] for r in json.loads(listing.stdout)["runs"]] == ["stopped", "solved"]
        busy = requests.get(f"{url}/api/v1/pool", timeout=10).json()["busy_fraction"]
        assert 0.0 < busy <= 1.0
    finally:
        service.stop()


@pytest.mark.slow
@pytest.mark.multirun
def test_runs_submitted_together_start_with_their_shares_and_no_collector_is_forked_to_be_retired(tmp_path, toy_config):
    from parallel_rl.service.service import SETTLE

    service, url = serve(tmp_path, tmp_path / "svc", "--learners", "2", "--collectors", "4")
    try:
        submit(url, toy_config, UNENDING)  # one after the other, as a sweep submits its trials
        answered = time.time()
        second = submit(url, toy_config, UNENDING)
        # the promise is for a submission that reaches the service within SETTLE of the one before being answered
        late = run_of(url, second["id"])["created_at"] - answered
        if late >= SETTLE:
            pytest.skip(f"the second submission reached the service {late:.2f}s after the first (window {SETTLE}s)")
        eventually(
            lambda: [run_of(url, r)["workers"] for r in ("run-1", "run-2")] == [{"learners": 1, "collectors": 2}] * 2,
            timeout=START,
            message="both runs with their shares",
        )
        assert "back to the pool" not in service.output()  # run-1 never started alone on the whole pool
    finally:
        service.stop()


@pytest.mark.slow
@pytest.mark.multirun
def test_bad_input_is_one_line_and_disturbs_nothing(tmp_path, toy_config):
    service, url = serve(tmp_path, tmp_path / "svc")
    try:
        second = subprocess.run(  # a second service on the directory would start the same runs again
            [sys.executable, "-m", "parallel_rl", "serve", "--dir", str(tmp_path / "svc"), "--port", "0"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **ENV},
        )
        assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
        assert f"is in use by pid {service.pid} " in second.stderr and "parallel-rl serve" in second.stderr
        unknown = requests.get(f"{url}/api/v1/runs/run-9", timeout=10)
        assert unknown.status_code == 404
        assert unknown.json()["error"]["message"].startswith("no run 'run-9'")
        assert requests.delete(f"{url}/api/v1/runs/run-9", headers=AUTH, timeout=10).status_code == 404
        cli = runs_cli(url, "stop", "run-9")
        assert cli.returncode == 2 and cli.stderr.count("\n") == 1 and "no run 'run-9'" in cli.stderr, cli.stderr

        bad = requests.post(
            f"{url}/api/v1/runs", json={"config": toy_config, "overrides": ["env.bogus=1"]}, headers=AUTH, timeout=60
        )
        assert bad.status_code == 400 and "env.bogus" in bad.json()["error"]["message"], bad.text
        text = requests.post(
            f"{url}/api/v1/runs", json={"config_text": "main_config = dict(("}, headers=AUTH, timeout=60
        )
        assert text.status_code == 400, text.text
        cli = runs_cli(url, "submit", "-c", toy_config, "--set", "policy.learn.batch_size=-1")
        assert cli.returncode == 2 and cli.stderr.count("\n") == 1 and "batch_size" in cli.stderr, cli.stderr
        both = requests.post(
            f"{url}/api/v1/runs", json={"config": toy_config, "config_text": "x"}, headers=AUTH, timeout=10
        )
        assert both.status_code == 400 and "exactly one" in both.json()["error"]["message"]
        assert requests.post(f"{url}/api/v1/runs", json={"config": toy_config}, timeout=10).status_code == 401
        assert requests.get(f"{url}/api/v1/runs", timeout=10).json()["runs"] == []  # nothing was submitted

        # a run whose config closes its reads (auth_read) is read on the service with the token only
        submit(url, toy_config, ["parallel.coordinator.auth_read=true", *UNENDING])
        assert requests.get(f"{url}/api/v1/runs/run-1", timeout=10).status_code == 401
        [closed] = requests.get(f"{url}/api/v1/runs", timeout=10).json()["runs"]
        assert (sorted(closed), closed["id"]) == (["id", "name", "state"], "run-1")  # no numbers without the token
        assert requests.get(f"{url}/api/v1/runs/run-1", headers=AUTH, timeout=10).json()["id"] == "run-1"
        assert runs_cli(url, "stop", "run-1").returncode == 0

        service.stop()
        down = runs_cli(url, "list")
        assert down.returncode == 2 and down.stderr.count("\n") == 1, down.stderr
    finally:
        service.stop()


def test_ctrl_c_stops_the_service_with_130_and_sigterm_with_0(tmp_path):
    """As the coordinator and the workers: Ctrl-C is an interruption (130, as before the REST line), SIGTERM a
    service's stop (0). Ctrl-C after start-up used to exit 0."""
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 0)):
        service, _ = serve(tmp_path, tmp_path / "svc", name=f"serve-{sig.name}")
        try:
            service.send_signal(sig)
            assert service.wait(60) == code, service.output()[-3000:]
            assert f"service stopped ({sig.name}); no run left to resume" in service.output()
            assert "Traceback" not in service.output()
        finally:
            service.stop()


@pytest.mark.slow
@pytest.mark.multirun
def test_a_restarted_service_resumes_the_run_it_hosted(tmp_path, toy_config):
    service_dir = tmp_path / "svc"
    service, url = serve(tmp_path, service_dir)
    try:
        submit(url, toy_config, UNENDING)
        # trained, and its state saved at least once since (the learner's state, every 20 iterations here)
        before = eventually(
            lambda: (r := run_of(url, "run-1"))["summary"].get("train_iter", 0) >= 40 and r,
            timeout=START,
            message="run-1 training",
        )
        service.send_signal(signal.SIGTERM)
        assert service.wait(60) == 0, service.output()[-3000:]
        assert "resumes run-1" in service.output()
        with open(service_dir / "service.json") as f:
            assert [(r["run_id"], r["state"]) for r in json.load(f)["runs"]] == [("run-1", "running")]
    finally:
        service.stop()
    again, url = serve(tmp_path, service_dir, name="serve-again")
    try:
        resumed = eventually(
            lambda: (r := run_of(url, "run-1"))["state"] == "running" and r["summary"].get("resumed_from") and r,
            timeout=START,
            message="run-1 resumed",
        )
        assert resumed["summary"]["env_steps"] >= before["summary"]["env_steps"]
        assert resumed["summary"]["train_iter"] >= before["summary"]["train_iter"]
        assert runs_cli(url, "stop", "run-1").returncode == 0
        eventually(lambda: run_of(url, "run-1")["state"] == "stopped", timeout=60, message="run-1 stopped")
    finally:
        again.stop()


@pytest.mark.slow
@pytest.mark.multirun
def test_collectors_are_shared_by_weight_and_the_pool_grows_and_shrinks(tmp_path, toy_config):
    service, url = serve(tmp_path, tmp_path / "svc", "--learners", "2", "--collectors", "3")

    def collectors() -> dict:
        """Each run's active collectors, as the service lists them (RUN:WORKER ids)."""
        rows = requests.get(f"{url}/api/v1/collectors", timeout=10).json()["collectors"]
        out: dict = {}
        for row in rows:
            if row["state"] in ("idle", "busy"):
                out.setdefault(row["run"], []).append(row["worker_id"])
        return out

    def counts() -> dict:
        return {run: len(ids) for run, ids in collectors().items()}

    try:
        submit(url, toy_config, UNENDING, weight=1)
        eventually(lambda: counts() == {"run-1": 3}, timeout=START, message="run-1 on the whole pool")
        submit(url, toy_config, UNENDING, weight=2)
        # 1 each, the third by weight: run-1 gives one back (its task wraps up), run-2 gets two
        eventually(lambda: counts() == {"run-1": 1, "run-2": 2}, timeout=START, message="shares 1:2")
        added = subprocess.run(
            [sys.executable, "-m", "parallel_rl", "collectors", "add", "--coordinator", url],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **ENV},
        )
        assert added.returncode == 0, added.stderr
        assert requests.get(f"{url}/api/v1/pool", timeout=10).json()["collectors"] == 4
        eventually(lambda: sum(counts().values()) == 4, timeout=START, message="the added slot used")
        victim = collectors()["run-2"][0]
        removed = requests.delete(f"{url}/api/v1/collectors/{victim}", headers=AUTH, timeout=30)
        assert removed.status_code == 200, removed.text
        eventually(lambda: counts() == {"run-1": 1, "run-2": 2}, timeout=START, message="shares 1:2 again")
        assert requests.get(f"{url}/api/v1/pool", timeout=10).json()["collectors"] == 3
        for run_id in ("run-1", "run-2"):
            assert runs_cli(url, "stop", run_id).returncode == 0
    finally:
        service.stop()


@pytest.fixture(scope="module")
def service_app(tmp_path_factory):
    """The service's real app over a real Service (its pool's loop not started: nothing trains)."""
    from coordinator_app.service import create_service_app
    from parallel_rl.service.service import Service

    service = Service(str(tmp_path_factory.mktemp("svc")), learners=1, collectors=1)
    return create_service_app(service, TOKEN).test_client()


BODY_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.sampled_from([2**64, 10**400, "", "/etc/passwd", "../x.py", "x" * 5000, "\x00", "k=v", "a=b=c"]),
    st.text(max_size=20),
    st.lists(st.one_of(st.text(max_size=10), st.integers(), st.just("policy.learn.batch_size=-1")), max_size=4),
)
RUN_BODIES = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={k: BODY_VALUES for k in ("config", "config_text", "overrides", "weight", "name", "address")},
    ),
    st.lists(BODY_VALUES, max_size=3),
    BODY_VALUES,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=st.sampled_from(["GET", "POST", "DELETE"]),
    path=st.sampled_from(["runs", "runs/run-1", "runs/x%2F..", "pool", "collectors", "learners", "collectors/a:b"]),
    body=RUN_BODIES,
    token=st.booleans(),
)
def test_fuzz_the_service_routes_answer_4xx_json_never_5xx(service_app, method, path, body, token):
    answer = service_app.open(
        f"/api/v1/{path}", method=method, json=body, headers=AUTH if token else {}, follow_redirects=False
    )
    assert answer.status_code < 500, answer.get_data(as_text=True)
    if answer.status_code >= 400:
        message = answer.get_json()["error"]["message"]
        assert message and "\n" not in message


@pytest.mark.slow
@pytest.mark.multirun
def test_a_sweep_with_service_trains_its_trials_as_runs_on_the_pool(tmp_path, toy_config):
    service, url = serve(tmp_path, tmp_path / "svc", "--learners", "1", "--collectors", "2")
    try:
        out = tmp_path / "sweep"
        sweep = subprocess.run(
            [sys.executable, "-m", "parallel_rl", "sweep", "-c", toy_config, "--service", url, "--out", str(out)]
            + ["--grid", "env.stop_value=3,4", "--grid", "policy.learn.batch_size=-1,16"],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, **ENV},
        )
        assert sweep.returncode == 1, sweep.stdout[-3000:] + sweep.stderr[-3000:]  # the two bad trials failed
        rows = list(csv.DictReader(open(out / "results.csv")))
        assert [(r["settings"], r["status"]) for r in rows] == [
            ("env.stop_value=3 policy.learn.batch_size=-1", "failed"),
            ("env.stop_value=3 policy.learn.batch_size=16", "done"),
            ("env.stop_value=4 policy.learn.batch_size=-1", "failed"),
            ("env.stop_value=4 policy.learn.batch_size=16", "done"),
        ]
        assert "batch_size" in rows[0]["note"]
        for row in (rows[1], rows[3]):
            assert row["exit"] == "0" and float(row["eval_return"]) >= 3.0
        runs = requests.get(f"{url}/api/v1/runs", timeout=10).json()["runs"]
        # the bad trials never reached the service; the good ones ran there, one after the other (1 learner)
        assert [(r["name"], r["state"]) for r in runs] == [("trial_001", "solved"), ("trial_003", "solved")]
    finally:
        service.stop()


def test_a_damaged_state_file_stops_the_service_with_one_line(tmp_path):
    (tmp_path / "svc").mkdir()
    (tmp_path / "svc" / "service.json").write_text('{"version": 1, "next": 2, "runs": [{"run_id": "../etc"}]}')
    proc = subprocess.run(
        [sys.executable, "-m", "parallel_rl", "serve", "--dir", str(tmp_path / "svc"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **ENV},
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "service.json" in proc.stderr, proc.stderr


def test_the_service_openapi_document_names_every_route_and_nothing_else(service_app):
    doc = service_app.get("/api/v1/openapi.json").get_json()
    routes = {
        (rule.rule.removeprefix("/api/v1").replace("<", "{").replace(">", "}"), method.lower())
        for rule in service_app.application.url_map.iter_rules()
        if rule.rule.startswith("/api/v1/")
        for method in rule.methods - {"HEAD", "OPTIONS"}
    }
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops if method != "parameters"}
    assert routes == documented
    assert "RunSubmission" in doc["components"]["schemas"] and "Run" in doc["components"]["schemas"]


FLAT_CLUSTER = TOY_CONFIG.replace(
    'env_id="parallel_rl/Counting-v0", env_kwargs=dict(episode_length=5)',
    'env_id="parallel_rl_test/Flat-v0", import_names=["tests.lab_env"], env_kwargs=dict(episode_length=5)',
).replace("stop_value=4.0", "stop_value=None")


@pytest.mark.slow
@pytest.mark.multirun
def test_tune_with_service_searches_on_the_pool_and_each_value_is_the_runs_curve(tmp_path):
    """On the flat env every evaluation returns exactly 5 x the reward drawn, so each trial's value is known."""
    assert "Flat-v0" in FLAT_CLUSTER and "stop_value=None" in FLAT_CLUSTER
    config = tmp_path / "flat_cluster.py"
    config.write_text(FLAT_CLUSTER)
    space = tmp_path / "space.py"
    space.write_text(
        'def space(trial):\n    return {"env.env_kwargs.reward": trial.suggest_float("reward", 0.0, 1.0)}\n'
    )
    service, url = serve(tmp_path, tmp_path / "svc", "--learners", "2", "--collectors", "2")
    try:
        out = tmp_path / "tune"
        tune = subprocess.run(
            [sys.executable, "-m", "parallel_rl", "tune", "-c", str(config), "--trials", "2", "--space", str(space)]
            + ["--out", str(out), "--service", url, "--set", "parallel.commander.max_env_step=1500"]
            + ["--set", "parallel.commander.eval_freq=2"],  # evaluations well before the budget, on a loaded box
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, **ENV},
        )
        assert tune.returncode == 0, tune.stdout[-3000:] + tune.stderr[-3000:]
        rows = list(csv.DictReader(open(out / "flat_cluster" / "trials.csv")))
        assert [r["status"] for r in rows] == ["done", "done"], [r["note"] for r in rows]
        for row in rows:
            assert float(row["eval_return"]) == pytest.approx(5 * float(row["settings"].split("=")[1]))
        runs = requests.get(f"{url}/api/v1/runs", timeout=10).json()["runs"]
        assert [r["state"] for r in runs] == ["stopped", "stopped"]  # each trained to its budget on the pool
    finally:
        service.stop()
