"""Sweeps and search (parallel_rl.lab, issue 44 items 3, 4 and 7) through the real CLI: `parallel-rl sweep` and
`parallel-rl tune`, each trial a real `parallel-rl serial` (or `run`) process with a tiny budget.

Most trials train on ``parallel_rl_test/Flat-v0`` (tests/lab_env.py): every step earns ``reward`` whatever the
action, so each evaluation returns exactly ``reward * episode_length`` (5 * reward here) and the tables are exact.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.support import CliProcess, eventually

FLAT_CONFIG = textwrap.dedent("""
    main_config = dict(
        env=dict(env_id="parallel_rl_test/Flat-v0", import_names=["tests.lab_env"], env_kwargs=dict(episode_length=5),
                 collector_env_num=2, evaluator_env_num=2, n_evaluator_episode=2, stop_value=None),
        policy=dict(model=dict(hidden_size_list=[16]), nstep=1, learn=dict(batch_size=16),
                    eval=dict(evaluator=dict(eval_freq=10))),
        serial=dict(max_train_iter=30),
    )
""")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def flat_config(tmp_path):
    path = tmp_path / "flat.py"
    path.write_text(FLAT_CONFIG)
    return str(path)


def lab(*args, cwd, timeout=300):
    """A `parallel-rl` command run to its end, from ``cwd`` (tests.lab_env importable through PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "parallel_rl", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def lab_process(tmp_path, command: str, *args) -> CliProcess:
    """A `parallel-rl COMMAND ARGS` process in a session of its own (as at a terminal), from ``tmp_path``."""
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    return CliProcess(tmp_path, command, command, *args, env=env, cwd=str(tmp_path), new_session=True)


def table(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# a space of one knob: the fake env's reward per step, so a trial's eval return is exactly 5 x its draw
REWARD_SPACE = """
    def space(trial):
        return {"env.env_kwargs.reward": trial.suggest_float("reward", 0.0, 1.0)}
"""


def write_space(tmp_path, body: str) -> str:
    path = tmp_path / "space.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_a_two_seed_two_value_grid_runs_four_trials_and_writes_the_table(tmp_path, flat_config):
    out = tmp_path / "sweep"
    proc = lab(
        "sweep",
        "-c",
        flat_config,
        "--seeds",
        "0-1",
        "--grid",
        "env.env_kwargs.reward=1,2",
        "--out",
        str(out),
        "--parallel",
        "2",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = table(out / "results.csv")
    assert [(r["trial"], r["settings"], r["seed"], r["status"], r["exit"]) for r in rows] == [
        ("0", "env.env_kwargs.reward=1", "0", "done", "0"),
        ("1", "env.env_kwargs.reward=1", "1", "done", "0"),
        ("2", "env.env_kwargs.reward=2", "0", "done", "0"),
        ("3", "env.env_kwargs.reward=2", "1", "done", "0"),
    ]
    assert [float(r["eval_return"]) for r in rows] == [5.0, 5.0, 10.0, 10.0]  # the last evaluation of each curve
    assert len({r["env_steps"] for r in rows}) == 1 and int(rows[0]["env_steps"]) > 0
    for n in range(4):  # each trial trained in its own experiment directory under --out, with its seed
        assert (out / f"trial_{n:03d}" / "ckpt").is_dir()
    printed = re.search(
        r"^TRIAL +SETTINGS +SEED +STATUS +EXIT +EVAL_RETURN +ENV_STEPS +WALL_S +NOTE$", proc.stdout, re.M
    )
    assert printed, proc.stdout
    assert f"table in {out / 'results.csv'}" in proc.stdout


def test_a_trial_with_a_bad_value_fails_with_its_reason_while_the_others_complete(tmp_path, flat_config):
    out = tmp_path / "sweep"
    proc = lab(
        "sweep", "-c", flat_config, "--grid", "policy.learn.learning_rate=-1,1e-3", "--out", str(out), cwd=tmp_path
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "parallel-rl sweep: 1 of 2 trial(s) failed; their reasons are in the table"
    ]
    bad, good = table(out / "results.csv")
    assert (bad["status"], bad["exit"], bad["note"]) == (
        "failed",
        "2",
        "policy.learn needs learning_rate > 0, got policy.learn.learning_rate=-1.0",
    )
    assert not (out / "trial_000").exists(), "a trial whose config does not compile never starts"
    assert (good["status"], good["exit"], float(good["eval_return"])) == ("done", "0", 5.0)


def test_a_grid_over_a_di_engine_key_is_read_as_its_run_key_and_a_bad_value_is_its_trials_reason(tmp_path, flat_config):
    """serial.max_train_iter (DI-engine's name for run.max_train_iter in a serial config) is a known key of the
    sweep: a bad value fails its trial naming the key as written, not the sweep."""
    out = tmp_path / "sweep"
    proc = lab("sweep", "-c", flat_config, "--grid", "serial.max_train_iter=-1,20", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    bad, good = table(out / "results.csv")
    assert (bad["status"], bad["exit"], bad["note"]) == (
        "failed",
        "2",
        "serial needs max_train_iter >= 0, got serial.max_train_iter=-1",
    )
    assert (good["status"], good["exit"], float(good["eval_return"])) == ("done", "0", 5.0)


@pytest.mark.slow
@pytest.mark.multirun
def test_random_draws_of_the_space_file_run_as_trials(tmp_path, flat_config):
    out = tmp_path / "sweep"
    space = write_space(tmp_path, REWARD_SPACE)
    proc = lab(
        "sweep",
        "-c",
        flat_config,
        "--random",
        "2",
        "--space",
        space,
        "--out",
        str(out),
        "--parallel",
        "2",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = table(out / "results.csv")
    rewards = [float(r["settings"].removeprefix("env.env_kwargs.reward=")) for r in rows]
    assert len(set(rewards)) == 2 and all(0.0 <= reward <= 1.0 for reward in rewards)
    for r, reward in zip(rows, rewards):
        assert r["status"] == "done" and float(r["eval_return"]) == pytest.approx(5 * reward, rel=1e-6)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--grid", "policy.learn.learning_rate="], "--grid 'policy.learn.learning_rate=' has no values"),
        (["--grid", "policy.learn.learning_rate=1e-3,,1e-4"], "an empty value"),
        (["--seeds", "4-1"], "--seeds '4-1' is not a seed list (the range '4-1' ends before it starts)"),
        (["--seeds", "0,x"], "--seeds '0,x' is not a seed list"),
        (
            ["--grid", "policy.learn.learnin_rate=1e-3,1e-4"],
            "unknown config key 'policy.learn.learnin_rate'; did you mean 'policy.learn.learning_rate'?",
        ),
        (["--random", "2"], "--random N and --space FILE go together"),
    ],
)
def test_bad_sweep_input_is_one_line_exit_2_before_anything_runs(tmp_path, flat_config, args, message):
    out = tmp_path / "sweep"
    proc = lab("sweep", "-c", flat_config, "--out", str(out), *args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("parallel-rl sweep: error: ") and message in line, line
    assert not out.exists(), "nothing ran, nothing was written"


@pytest.mark.parametrize(
    "space, args, message",
    [
        (
            'def space(trial):\n    return {"policy.learn.learnin_rate": trial.suggest_float("lr", 1e-4, 1e-2)}\n',
            [],
            "unknown config key 'policy.learn.learnin_rate'",
        ),
        ("def space(trial):\n    return [1]\n", [], "space(trial) returned list, not a dict"),
        ("x = 1\n", [], "defines no function space(trial)"),
        ("def space(trial):\n    return {}\n", ["--storage", "postgresql://db/x"], "is not an SQLite URL"),
        ("def space(trial):\n    return {}\n", ["--objective", "solve-steps"], "needs a stop value"),
    ],
)
def test_bad_tune_input_is_one_line_exit_2_and_no_study_is_made(tmp_path, flat_config, space, args, message):
    out = tmp_path / "tune"
    proc = lab(
        "tune",
        "-c",
        flat_config,
        "--trials",
        "2",
        "--space",
        write_space(tmp_path, space),
        "--out",
        str(out),
        *args,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("parallel-rl tune: error: ") and message in line, line
    assert not out.exists(), "no study, no trial directory"


@pytest.mark.slow
@pytest.mark.multirun
def test_tune_writes_its_study_resumes_it_and_writes_the_best_config(tmp_path, flat_config):
    from parallel_rl.config import compile_config, load_config_file

    out = tmp_path / "tune"
    space = write_space(tmp_path, REWARD_SPACE)
    args = ["tune", "-c", flat_config, "--space", space, "--out", str(out), "--startup-trials", "10"]
    first = lab(*args, "--trials", "3", cwd=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert (out / "study.db").is_file()
    rows = table(out / "flat" / "trials.csv")
    assert [r["status"] for r in rows] == ["done"] * 3
    for r in rows:  # each trial's value is its curve's last evaluation: exactly 5 * its reward
        reward = float(r["settings"].split("=")[1])
        assert float(r["eval_return"]) == pytest.approx(5 * reward, rel=1e-6)  # TensorBoard keeps float32

    again = lab(*args, "--trials", "4", cwd=tmp_path)  # the same command with one more trial: the study resumes
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "3 finished trial(s) kept" in again.stdout
    resumed = table(out / "flat" / "trials.csv")
    assert resumed[:3] == rows and len(resumed) == 4 and resumed[3]["status"] == "done"

    best = max(resumed, key=lambda r: float(r["eval_return"]))
    path = out / "flat" / "best_config.py"
    assert f"best trial {best['trial']} " in again.stdout
    cfg = compile_config(load_config_file(str(path)))  # a ready config: `parallel-rl serial -c` loads it
    assert cfg.env.env_kwargs.reward == pytest.approx(float(best["settings"].split("=")[1]))
    assert cfg.run.max_train_iter == 30


@pytest.mark.slow
@pytest.mark.multirun
def test_tune_for_solve_steps_minimises_the_median_env_steps_to_the_stop_value_over_seeds(tmp_path, flat_config):
    """--objective solve-steps: a training's value is the env steps at which it reached the stop value (minimised);
    one that never does counts twice the env steps of its whole budget. --seeds 0,1: every trial trains once per
    seed (OUT/S/trial_NNN_K) and its value is the median of theirs. Even trials earn 1 a step (eval return 5 >= the
    stop value 2.5 at their first evaluation), odd ones 0 (they train to their budget). A study resumed with the
    other objective would rank its trials backwards: refused."""
    out = tmp_path / "tune"
    space = write_space(
        tmp_path,
        """
        def space(trial):
            return {"env.env_kwargs.reward": 1.0 if trial.number % 2 == 0 else 0.0,
                    "policy.learn.learning_rate": trial.suggest_float("lr", 1e-4, 1e-2, log=True)}
    """,
    )
    args = ["tune", "-c", flat_config, "--space", space, "--out", str(out), "--set", "run.stop_value=2.5"]
    proc = lab(*args, "--trials", "2", "--objective", "solve-steps", "--seeds", "0,1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = table(out / "flat" / "trials.csv")
    assert [r["status"] for r in rows] == ["done"] * 2
    for r in rows:  # the toy env's env steps do not depend on the seed: each seed trained half of the total
        steps, value = int(r["env_steps"]) // 2, float(r["solve_steps"])
        if int(r["trial"]) % 2 == 0:
            assert (float(r["eval_return"]), value) == (5.0, steps), r
        else:
            assert (float(r["eval_return"]), value) == (0.0, 2 * steps), r
        for k in (0, 1):  # the run's own copy of its compiled config
            run_config = out / "flat" / f"trial_{int(r['trial']):03d}_{k}" / "config.json"
            assert json.loads(run_config.read_text())["seed"] == k
    assert "best trial 0 (solve steps " in proc.stdout

    other = lab(*args, "--trials", "3", cwd=tmp_path)  # the default objective, return: maximised
    assert other.returncode == 2, other.stdout[-3000:] + other.stderr[-3000:]
    [line] = other.stderr.strip().splitlines()
    assert "was made to minimize its value, not to maximize it as --objective return does" in line, line
    assert len(table(out / "flat" / "trials.csv")) == 2


@pytest.mark.slow
@pytest.mark.multirun
def test_a_clearly_worse_trial_is_pruned_and_its_training_stopped(tmp_path, flat_config):
    out = tmp_path / "tune"
    # the first trial earns 1 a step (eval return 5 from its first evaluation), every later one 0: below the
    # median at its first report, with the median pruner counting from one finished trial. The later ones train
    # far longer than the first (30 updates take 0.2 s: on a loaded box the sweep read a trial's first evaluation
    # only after it had trained its whole budget), so only the pruning can end them early
    space = write_space(
        tmp_path,
        """
        def space(trial):
            return {"env.env_kwargs.reward": 1.0 if trial.number == 0 else 0.0,
                    "serial.max_train_iter": 30 if trial.number == 0 else 1000000,
                    "policy.learn.learning_rate": trial.suggest_float("lr", 1e-4, 1e-2, log=True)}
    """,
    )
    proc = lab(
        "tune",
        "-c",
        flat_config,
        "--trials",
        "2",
        "--space",
        space,
        "--out",
        str(out),
        "--startup-trials",
        "1",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    first, second = table(out / "flat" / "trials.csv")
    assert (first["status"], float(first["eval_return"])) == ("done", 5.0)
    assert (second["status"], float(second["eval_return"])) == ("pruned", 0.0)
    assert second["note"].startswith("pruned at env step ")
    log = (out / "flat" / "trial_001.log").read_text()
    # stopped by Ctrl-C (it saves and exits), not trained to its budget
    assert log.rstrip().endswith("parallel-rl serial: interrupted"), log[-2000:]
    assert "train iteration budget" not in log


@pytest.mark.slow
@pytest.mark.multirun
def test_ctrl_c_stops_the_sweeps_trainings_and_says_where_the_results_are(tmp_path, flat_config):
    out = tmp_path / "sweep"
    sweep = lab_process(
        tmp_path,
        "sweep",
        "-c",
        flat_config,
        "--seeds",
        "0-2",
        "--out",
        str(out),
        "--set",
        "serial.max_train_iter=0",
        "--set",
        "serial.max_env_step=100000000",
    )
    try:
        sweep.wait_line(r"^sweep: 3 trial\(s\), 1 at a time")
        log = out / "trial_000.log"
        eventually(
            lambda: log.exists() and "eval_return=" in log.read_text(),
            timeout=120,
            message="the first trial's first evaluation",
        )
        os.killpg(sweep.pid, signal.SIGINT)  # Ctrl-C at the terminal: the sweep's process group
        assert sweep.wait(120) == 130, sweep.output()[-3000:]
    finally:
        sweep.stop()
    assert f"the table of what ran is in {out / 'results.csv'}" in sweep.output()
    rows = table(out / "results.csv")
    assert [r["status"] for r in rows] == ["interrupted"] * 3
    assert rows[0]["exit"] == "130" and rows[1]["exit"] == rows[2]["exit"] == ""  # the others never started
    assert log.read_text().rstrip().endswith("parallel-rl serial: interrupted")  # the training stopped cleanly
    assert not (out / "trial_001").exists()


@pytest.mark.slow
@pytest.mark.multirun
def test_ctrl_c_stops_tune_and_the_rerun_resumes_without_the_interrupted_trial(tmp_path, flat_config):
    out = tmp_path / "tune"
    space = write_space(tmp_path, REWARD_SPACE)
    args = ["-c", flat_config, "--trials", "2", "--space", space, "--out", str(out)]
    tune = lab_process(
        tmp_path,
        "tune",
        *args,
        "--set",
        "serial.max_train_iter=0",
        "--set",
        "serial.max_env_step=100000000",
        "--set",
        "policy.eval.evaluator.eval_freq=1000",
    )
    try:
        log = out / "flat" / "trial_000.log"
        eventually(
            lambda: log.exists() and "eval_return=" in log.read_text(),
            timeout=120,
            message="the first trial's first evaluation",
        )
        os.killpg(tune.pid, signal.SIGINT)
        assert tune.wait(120) == 130, tune.output()[-3000:]
    finally:
        tune.stop()
    assert "the study is kept in sqlite:///" in tune.output()
    assert log.read_text().rstrip().endswith("parallel-rl serial: interrupted")
    [row] = table(out / "flat" / "trials.csv")
    assert row["status"] == "failed" and row["note"].startswith("stopped by an interruption")

    again = lab("tune", *args, cwd=tmp_path)  # the interrupted trial does not count: two more run
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "0 finished trial(s) kept" in again.stdout
    assert [r["status"] for r in table(out / "flat" / "trials.csv")] == ["failed", "done", "done"]


@pytest.mark.slow
@pytest.mark.multirun
def test_a_cluster_trial_runs_as_parallel_rl_run_and_its_curve_comes_from_the_coordinator_state(tmp_path):
    from tests.test_cluster import TOY_CONFIG

    config = tmp_path / "toy_cluster.py"
    config.write_text(TOY_CONFIG)
    out = tmp_path / "sweep"
    proc = lab("sweep", "-c", str(config), "--out", str(out), "--set", "env.stop_value=0.5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [row] = table(out / "results.csv")
    assert (row["status"], row["exit"]) == ("done", "0")
    assert float(row["eval_return"]) >= 0.5  # solved: the curve's last evaluation reached the stop value
    assert (out / "trial_000" / "shared" / "coordinator").is_dir()
    assert "REST API: http://" in (out / "trial_000.log").read_text()


@pytest.mark.slow
def test_a_sweep_killed_with_sigkill_leaves_no_training_running_and_the_training_saved(tmp_path, flat_config):
    from tests.test_signals import descendants

    out = tmp_path / "sweep"
    state = out / "trial_000" / "ckpt" / "serial_state.pt"
    # a training that evaluates (and prints) once, at its start, and then trains its whole budget quietly: only
    # the sweep's death can end it early
    sweep = lab_process(
        tmp_path,
        "sweep",
        "-c",
        flat_config,
        "--seeds",
        "0",
        "--out",
        str(out),
        "--set",
        "serial.max_train_iter=0",
        "--set",
        "serial.max_env_step=100000000",
        "--set",
        "run.eval_freq=1000000000",
    )
    try:
        eventually(state.exists, timeout=120, message="the training's state saved after its first evaluation")
        trainings = descendants(sweep.pid)
        saved = state.stat().st_ino  # a save writes a new file and renames it over this one: a new inode
        os.kill(sweep.pid, signal.SIGKILL)
        eventually(
            lambda: not any(_alive(pid) for pid in trainings),
            timeout=60,
            message="the training ending after its sweep was killed",
        )
    finally:
        sweep.stop()
    # it saved on the way out: what it trained is there for --resume (an mtime can stay the same: two saves within
    # one tick of the kernel's coarse clock)
    assert state.stat().st_ino != saved


def _alive(pid: int) -> bool:
    """Not gone and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_serial_stopped_by_sigterm_saves_says_how_to_continue_and_the_resume_goes_on(tmp_path, flat_config):
    exp = tmp_path / "run"
    sets = ["--set", f"exp_name={exp}", "--set", "serial.max_train_iter=0"]
    serial = lab_process(tmp_path, "serial", "-c", flat_config, *sets, "--set", "serial.max_env_step=100000000")
    try:
        serial.wait_line(r"eval_return=", timeout=120)
        serial.send_signal(signal.SIGTERM)  # e.g. docker stop, a Slurm job's end, the lab's escalation
        assert serial.wait(60) == 143, serial.output()[-3000:]
    finally:
        serial.stop()
    hint = re.search(r"stopped by SIGTERM; continue with: parallel-rl serial -c \S+ --resume (\S+)", serial.output())
    assert hint and hint.group(1) == str(exp), serial.output()[-3000:]
    stopped_at = int(re.findall(r"env_steps=(\d+)", serial.output())[-1])
    again = lab(
        "serial", "-c", flat_config, "--resume", hint.group(1), *sets, "--set", "serial.max_env_step=1", cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr[-2000:]
    assert int(re.search(r"env_steps=(\d+) train_iter=", again.stdout).group(1)) >= stopped_at  # it went on
