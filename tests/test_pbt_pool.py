"""Population-based training on a service's pool (issue 44 item 5: ``parallel-rl pbt --service URL``) and the
learner's warm start it rests on (``parallel.learner.init_from``), through the real CLI (`parallel-rl serve`,
`parallel-rl pbt`) and the real REST API: every member step a run of the service, with real worker processes.

The runs train ``parallel_rl_test/Flat-v0`` (tests/lab_env.py) on the toy cluster config (tests/test_runs.py's
FLAT_CLUSTER): each evaluation returns exactly 5 x the member's ``env.env_kwargs.reward``, so the ranking, and with
it which member copies which, is known from the draws. One service serves the module's tests.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import signal
import subprocess
import sys

import pytest
import requests
import torch

from tests.support import CliProcess, eventually
from tests.test_lab import table
from tests.test_pbt import CONFIG as SERIAL_CONFIG
from tests.test_pbt import REWARD_EPISODE, lineage, write_space
from tests.test_runs import ENV, FLAT_CLUSTER, START, run_of, serve, submit

SPACE = """
    def space(trial):
        return {"env.env_kwargs.reward": trial.suggest_float("reward", 0.0, 1.0)}
"""
# evaluations well within a step's env steps on a loaded box; every published version kept (the test reads the first)
STEP_SETTINGS = ["parallel.commander.eval_freq=2", "parallel.learner.keep_checkpoints=100000"]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pool")
    proc, url = serve(tmp, tmp / "svc", "--learners", "2", "--collectors", "2")
    try:
        yield url
    finally:
        proc.stop()


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "flat_cluster.py"
    path.write_text(FLAT_CLUSTER)
    return str(path)


def cli(*args, cwd, timeout=120):
    """A `parallel-rl` command run to its end with the service's token (tests.lab_env importable)."""
    return subprocess.run(
        [sys.executable, "-m", "parallel_rl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, **ENV},
    )


def pbt(config, space, out, service, *extra, generations="2"):
    return cli(
        "pbt", "-c", config, "--service", service, "--population", "2", "--interval", "400",
        "--generations", generations, "--space", space, "--out", str(out),
        *[a for s in STEP_SETTINGS for a in ("--set", s)], *extra,
        cwd=out.parent, timeout=600,
    )  # fmt: skip


def newest_learner_state(run_dir: str) -> dict:
    files = sorted(glob.glob(os.path.join(run_dir, "shared", "learner", "learner_*.pt")))
    assert files, f"no learner state in {run_dir}"
    return torch.load(files[-1], weights_only=True)


def first_policy(run_dir: str) -> dict:
    return torch.load(os.path.join(run_dir, "shared", "policy", "policy_000000000.pt"), weights_only=True)


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
@pytest.mark.multirun
def test_pool_pbt_starts_the_exploiting_members_next_run_from_the_sources_checkpoint(tmp_path, config, service):
    out = tmp_path / "pbt"
    proc = pbt(config, write_space(tmp_path, SPACE), out, service)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = lineage(out)
    start = {r["member"]: r for r in records if r["event"] == "start"}
    reward = {m: r["params"]["reward"] for m, r in start.items()}
    best, worst = max(reward, key=reward.get), min(reward, key=reward.get)
    steps = [r for r in records if r["event"] == "step"]
    assert [(s["generation"], s["env_steps"]) for s in steps] == [(0, 400), (1, 800)]
    for member, score in steps[0]["scores"].items():  # each run's latest evaluation: 5 x the member's reward
        assert score == pytest.approx(REWARD_EPISODE * reward[int(member)], rel=1e-6)
    runs = {m: [s["runs"][str(m)] for s in steps] for m in (best, worst)}  # each step a run of its own
    assert len({r for rs in runs.values() for r in rs}) == 4
    detail = {r: run_of(service, r) for rs in runs.values() for r in rs}
    assert all(d["state"] == "stopped" and d["env_steps"] >= 400 for d in detail.values())  # its budget: T steps

    # exploit: the worst member's next run starts from the best member's last run, nothing copied
    (exploit,) = [r for r in records if r["event"] == "exploit"]
    assert (exploit["member"], exploit["copied_from"]) == (worst, best)
    source_dir = detail[runs[best][0]]["dir"]
    assert exploit["source_dir"] == source_dir
    assert f"parallel.learner.init_from={json.dumps(source_dir)}" in detail[runs[worst][1]]["overrides"]
    # the weights its learner published first are the source's last learner state's model (not its own run's)
    source_state = newest_learner_state(source_dir)["policy"]
    assert same_weights(first_policy(detail[runs[worst][1]]["dir"])["model"], source_state["model"])
    own_state = newest_learner_state(detail[runs[worst][0]]["dir"])["policy"]
    assert not same_weights(own_state["model"], source_state["model"])  # the check can tell the two apart
    # the best member went on from its own last run
    assert same_weights(first_policy(detail[runs[best][1]]["dir"])["model"], source_state["model"])

    # the table: each member's env steps are the sum of its runs', the runs named
    rows = {int(r["member"]): r for r in table(out / "pbt.csv")}
    for member in (best, worst):
        assert rows[member]["status"] == "done"
        assert int(rows[member]["env_steps"]) == sum(detail[r]["env_steps"] for r in runs[member])
        assert rows[member]["runs"] == " ".join(runs[member])
    assert float(rows[worst]["score"]) == pytest.approx(REWARD_EPISODE * exploit["new_params"]["reward"], rel=1e-6)
    assert rows[worst]["history"].split(" | ")[1].startswith(f"1: from {best}: env.env_kwargs.reward=")
    assert re.search(r"^MEMBER +STATUS +SCORE +ENV_STEPS +SETTINGS +HISTORY +NOTE +RUNS$", proc.stdout, re.M)
    # steps of 400 env steps within the default head start of 1,000: said once, before the members start
    warning = "pbt: warning: a step of 400 env steps is within the collectors' head start of "
    assert proc.stdout.count(warning) == 1 and proc.stdout.index(warning) < proc.stdout.index("pbt: 2 members")


@pytest.mark.slow
@pytest.mark.multirun
def test_a_run_starts_from_init_from_and_a_checkpoint_that_does_not_fit_fails_the_member_with_one_line(
    tmp_path, config, service
):
    from parallel_rl.config import load_cluster_config
    from parallel_rl.envs.fit import env_spaces
    from parallel_rl.policy import create_policy

    def checkpoint(path, hidden: int) -> dict:
        cfg = load_cluster_config(config, [f"policy.model.hidden_size_list=[{hidden}]"])
        obs_shape, action = env_spaces(cfg.env, cfg.policy.type)
        state = create_policy(cfg.policy, math.prod(obs_shape), action, seed=1).state_dict()
        for tensor in state["model"].values():  # weights no fresh model has
            if tensor.is_floating_point():
                tensor.fill_(0.125)
        torch.save({"policy": state, "train_iter": 7}, path)
        return state

    good = checkpoint(tmp_path / "good.pt", 16)  # the config's own shape
    checkpoint(tmp_path / "other.pt", 8)
    warm = submit(service, config, [f"parallel.learner.init_from={tmp_path / 'good.pt'}", "run.max_env_step=200"])

    out = tmp_path / "pbt"
    bad = tmp_path / "other.pt"
    # collectors get 64 env steps ahead of the learner's first update (1,000 by default, more than a step's 400): no
    # member's run reaches its step's budget before its learner has loaded the checkpoint and failed
    proc = pbt(
        config, write_space(tmp_path, SPACE), out, service, "--set", f"parallel.learner.init_from={bad}",
        "--set", "parallel.commander.warmup_env_steps=64", generations="1",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "head start" not in proc.stdout  # 64 env steps of it, within a step of 400
    for row in table(out / "pbt.csv"):
        assert row["status"] == "failed"
        assert "\n" not in row["note"] and "learner task failed on the config: " in row["note"]
        assert re.search(
            rf"ConfigError: {re.escape(str(bad))} does not fit policy\.type='dqn' on env 'parallel_rl_test/Flat-v0' "
            r"\(RuntimeError: .*\); set parallel\.learner\.init_from to a checkpoint of this algorithm and env$",
            row["note"],
        ), row["note"]

    ended = eventually(
        lambda: (r := run_of(service, warm["id"]))["state"] in ("stopped", "failed") and r, timeout=START, message="run"
    )
    assert ended["state"] == "stopped", ended["reason"]
    # the first published version is 0 (the run's own counter, not the file's 7) and has the checkpoint's weights
    assert same_weights(first_policy(ended["dir"])["model"], good["model"])
    assert ended["env_steps"] >= 200


@pytest.mark.slow
@pytest.mark.multirun
def test_ctrl_c_stops_every_members_run_on_the_service_and_exits_130(tmp_path, config, service):
    out = tmp_path / "pbt"
    proc = CliProcess(
        tmp_path, "pbt", "pbt", "-c", config, "--service", service, "--population", "2", "--interval", "100000000",
        "--generations", "2", "--space", write_space(tmp_path, SPACE), "--out", str(out),
        env=ENV, cwd=str(tmp_path), new_session=True,
    )  # fmt: skip
    try:
        proc.wait_line(r"^pbt: generation 0: 2 member\(s\) train to env step 100000000", timeout=START)

        def running():
            runs = requests.get(f"{service}/api/v1/runs", timeout=10).json()["runs"]
            mine = [r for r in runs if r["name"] in ("trial_000_0", "trial_001_0") and r["config"] == config]
            return len(mine) == 2 and all(r["state"] == "running" and r["env_steps"] > 0 for r in mine) and mine

        mine = eventually(running, timeout=START, message="both members' runs training on the service")
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C at the terminal: PBT's process group
        assert proc.wait(120) == 130, proc.output()[-3000:]
    finally:
        proc.stop()
    for run in mine:  # stopped on the service (each saved; its directory stays), not left training
        ended = run_of(service, run["id"])
        assert ended["state"] == "stopped" and ended["reason"] == f"stopped by DELETE /api/v1/runs/{run['id']}"
    assert [r["status"] for r in table(out / "pbt.csv")] == ["interrupted"] * 2
    assert not [r for r in lineage(out) if r["event"] == "exploit"]


@pytest.mark.parametrize(
    "serial, service, message",
    [
        (
            True,
            "http://127.0.0.1:9",
            r"pbt --service: \S+ is a serial config; the service trains cluster configs \(with a parallel section\), "
            r"e\.g\. configs/cartpole_ppo_parallel\.py",
        ),
        (False, None, r"pbt: \S+ is a cluster config \(it has a parallel section\); without --service .*"),
    ],
)
def test_bad_input_is_one_line_exit_2_before_anything_runs(tmp_path, serial, service, message):
    config = tmp_path / "config.py"
    config.write_text(SERIAL_CONFIG if serial else FLAT_CLUSTER)
    out = tmp_path / "pbt"
    args = ["--service", service] if service else []
    proc = cli(
        "pbt", "-c", str(config), "--population", "2", "--interval", "32", "--generations", "2",
        "--space", write_space(tmp_path, SPACE), "--out", str(out), *args, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(r"parallel-rl pbt: error: " + message, lines[0]), proc.stderr
    assert not out.exists()
