"""The best evaluated policy of a run (kept on the store, never pruned, what eval/export/load_policy take by
default, saying which) and `serial --resume DIR` (issue 40, "Missing" 1 and 2): real `parallel-rl run` / `serial`
/ `eval` processes on the toy env, real files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np

from tests.test_cluster import TOY_CONFIG
from tests.support.s3 import bucket, s3_env, s3_server  # noqa: F401 (fixtures: the S3 servers and a bucket)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "parallel_rl", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def toy_config(tmp_path) -> str:
    path = tmp_path / "toy.py"
    path.write_text(TOY_CONFIG)
    return str(path)


def test_a_cluster_run_keeps_its_best_version_and_eval_takes_it_by_default(cli, tmp_path):
    """The evaluation that solves the run is its best: eval, export and load_policy take that version (not the
    newest checkpoint) and say which; `--checkpoint newest` takes the newest."""
    import parallel_rl
    from parallel_rl.storage import SharedStorage

    config = toy_config(tmp_path)
    exp = tmp_path / "exp"
    run = cli("run", "run", "-c", config, "--set", f"exp_name={exp}", "--collectors", "1", "--port", "0")
    assert run.wait(150) == 0, run.output()[-3000:]
    solved = re.search(r"^solved: eval return (\S+) >= stop value \S+ \(policy version (\d+)\)", run.output(), re.M)
    assert solved, run.output()[-3000:]
    best_return, best_version = float(solved.group(1)), int(solved.group(2))
    store = SharedStorage(str(exp / "shared"), create=False)
    record = store.policies.best_record()
    assert (record.version, round(record.eval_return, 1)) == (best_version, best_return)
    assert store.policies.exists(best_version)

    out = run_cli("eval", "-c", config, "--run", str(exp), "--episodes", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        f"eval: best: version {best_version}, eval return {best_return:.1f} at env step {record.env_steps}"
        in out.stdout
    ), out.stdout + out.stderr
    assert store.policies.path(best_version) in out.stdout

    newest = store.policies.latest()
    out = run_cli("--json", "eval", "-c", config, "--run", str(exp), "--episodes", "2", "--checkpoint", "newest")
    assert out.returncode == 0, out.stdout + out.stderr
    chosen = json.loads(out.stdout)
    assert chosen["checkpoint"] == store.policies.path(newest) and chosen["checkpoint_choice"].startswith(
        f"newest: version {newest}"
    ), chosen

    agent = parallel_rl.load_policy(str(exp), config=config)  # `run` writes no config.json
    assert agent.source == store.policies.path(best_version)
    assert agent.act(np.zeros(agent.obs_shape, dtype=np.float32)) in range(2)
    assert parallel_rl.load_policy(str(exp), config, checkpoint="newest").source == store.policies.path(newest)


def test_the_best_and_the_versions_under_evaluation_are_never_pruned(tmp_path, bucket):
    """keep_checkpoints prunes the old versions but not one held for an evaluation nor the best one, on a local
    directory and on S3 (moto's server and SeaweedFS) alike."""
    for root in (str(tmp_path / "shared"), f"s3://{bucket}/run"):
        best_and_held_versions_are_never_pruned(root)


def best_and_held_versions_are_never_pruned(root):
    from parallel_rl.storage import SharedStorage
    from parallel_rl.storage.checkpoints import BestRecord

    store = SharedStorage(root)
    for version in range(0, 100, 10):
        store.policies.save(version, {"w": np.full(2, version)})
    store.policies.hold(30)  # under evaluation
    store.policies.keep_best(BestRecord(version=20, eval_return=7.5, env_steps=1234, train_iter=25))
    store.prune_checkpoints(2)
    assert store.policies.versions() == [20, 30, 80, 90]
    assert store.policies.best_record() == BestRecord(version=20, eval_return=7.5, env_steps=1234, train_iter=25)
    store.policies.keep_best(BestRecord(version=30, eval_return=9.0, env_steps=2000, train_iter=31))
    store.prune_checkpoints(2)  # the old best is released with the new one kept
    assert store.policies.versions() == [30, 80, 90]
    assert store.reset() and store.policies.best_record() is None and store.policies.versions() == []


def test_a_resumed_coordinator_remembers_its_best_version(coordinator_factory, tmp_path):
    from parallel_rl.coordinator import Coordinator
    from parallel_rl.storage import SharedStorage
    from parallel_rl.storage.checkpoints import BestRecord

    coordinator, _ = coordinator_factory()
    coordinator.storage.policies.save(40, {"w": np.zeros(2)})
    assert coordinator.best.evaluated(40, 4.5, env_steps=640, train_iter=41)
    assert not coordinator.best.evaluated(40, 3.0, env_steps=700, train_iter=50)  # worse: the best stays
    state = coordinator.state_dict()
    again = Coordinator(coordinator.cfg, SharedStorage(str(tmp_path / "shared")), "test-token")
    again.load_state_dict(state)
    assert again.best.record == BestRecord(version=40, eval_return=4.5, env_steps=640, train_iter=41)
    assert not again.best.evaluated(40, 4.0, env_steps=800, train_iter=60)


def test_serial_resume_continues_the_counters_and_eval_takes_the_best(tmp_path):
    config = toy_config(tmp_path)
    exp = tmp_path / "serial"
    common = ("-c", config, "--set", "env.stop_value=100", "--set", "policy.eval.evaluator.eval_freq=5")
    first = run_cli("serial", *common, "--set", f"exp_name={exp}", "--set", "serial.max_env_step=200")
    assert first.returncode == 3, first.stdout + first.stderr
    steps, iters = map(int, re.findall(r"env_steps=(\d+) train_iter=(\d+)", first.stdout)[-1])
    assert steps >= 200 and iters > 0

    out = run_cli("eval", "-c", config, "--run", str(exp), "--episodes", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^eval: best: version \d+, eval return \S+ at env step \d+", out.stdout, re.M), out.stdout
    assert os.path.join(str(exp), "ckpt", "ckpt_best.pt") in out.stdout

    second = run_cli("serial", *common, "--resume", str(exp), "--set", "serial.max_env_step=400")
    assert second.returncode == 3, second.stdout + second.stderr
    assert f"resumed {exp}: env_steps={steps} train_iter={iters}" in second.stdout + second.stderr, second.stdout
    end_steps, end_iters = map(int, re.findall(r"env_steps=(\d+) train_iter=(\d+)", second.stdout)[-1])
    assert end_steps >= 400 and end_iters > iters


def test_serial_resume_of_a_directory_with_nothing_to_resume_is_one_line(tmp_path):
    config = toy_config(tmp_path)
    out = run_cli("serial", "-c", config, "--resume", str(tmp_path / "nothing"))
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("parallel-rl serial: error: --resume ")
        and "no saved serial state" in lines[0]
    ), out.stderr
