"""`parallel-rl run` as a user runs it: real processes, real HTTP on 127.0.0.1, real files."""
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import requests

from tests.conftest import eventually

TOY_CONFIG = textwrap.dedent("""
    main_config = dict(
        env=dict(env_id="parallel_rl/Counting-v0", env_kwargs=dict(episode_length=5), collector_env_num=2,
                 evaluator_env_num=2, n_evaluator_episode=2, stop_value=4.0),
        policy=dict(model=dict(hidden_size_list=[16]), nstep=1, learn=dict(batch_size=16),
                    other=dict(eps=dict(decay=300))),
        parallel=dict(commander=dict(eval_freq=20, max_seconds=60.0, max_env_steps_per_update=8.0),
                      collector=dict(chunk_size=32), learner=dict(min_buffer_size=32, publish_every=10)),
    )
""")


def child_pids(pid: int) -> list:
    """Processes whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def toy_config(tmp_path):
    path = tmp_path / "toy.py"
    path.write_text(TOY_CONFIG)
    return str(path)


def start_run(tmp_path, config, *extra):
    cmd = [sys.executable, "-m", "parallel_rl", "run", "-c", config, "--set", f"exp_name={tmp_path / 'exp'}", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def rest_url(proc) -> str:
    line = proc.stdout.readline()
    m = re.match(r"REST API: (http://127\.0\.0\.1:\d+/api/v1)", line)
    assert m, f"first line should give the REST address, got {line!r}"
    return m.group(1)


def test_run_solves_toy_env_and_cleans_up(tmp_path, toy_config):
    proc = start_run(tmp_path, toy_config)
    try:
        url = rest_url(proc)
        assert requests.get(url + "/health", timeout=5).json() == {"status": "ok"}
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert re.search(r"^solved: eval return", out, re.M), out
    assert child_pids(proc.pid) == []
    shared = tmp_path / "exp" / "shared"
    assert sorted(os.listdir(shared)) == ["data", "learner", "policy"]
    assert os.listdir(shared / "policy"), "the learner published checkpoints"


@pytest.mark.slow
def test_run_solves_cartpole(tmp_path):
    proc = start_run(tmp_path, "configs/cartpole_dqn_parallel.py")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert re.search(r"^solved: eval return \d+\.\d >= stop value 195", out, re.M)


def test_ctrl_c_leaves_no_process_behind(tmp_path, toy_config):
    proc = start_run(tmp_path, toy_config, "--set", "env.stop_value=1000", "--collectors", "2")
    try:
        url = rest_url(proc)
        eventually(lambda: len([w for w in requests.get(url + "/collectors", timeout=5).json()["collectors"]
                                if w["state"] == "busy"]) == 2, timeout=60, message="two busy collectors")
        children = child_pids(proc.pid)
        assert len(children) == 3
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "interrupted (SIGINT)" in out
    assert not [pid for pid in children if alive(pid)]


def test_dead_learner_fails_the_run_with_its_reason(tmp_path, toy_config):
    proc = start_run(tmp_path, toy_config, "--set", "env.stop_value=1000")
    try:
        url = rest_url(proc)
        learner = eventually(lambda: [w for w in requests.get(url + "/learners", timeout=5).json()["learners"]
                                      if w["state"] == "busy"], timeout=60, message="busy learner")[0]
        assert learner["worker_id"] == "learner-1"
        learner_pid = next(pid for pid in child_pids(proc.pid)
                           if "learner" in open(f"/proc/{pid}/cmdline").read().split("\0"))
        os.kill(learner_pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert re.search(r"failed: learner-1 exited with code -9", err), err[-2000:]
    assert not [pid for pid in child_pids(proc.pid) if alive(pid)]
