"""Smaller operator findings (issues 40 and 41): exit codes, ignore files, MuJoCo's messages, a finished run
found on start, TensorBoard's files. Real processes (`python -m parallel_rl ...`), real files, real git."""

import fnmatch
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import requests

from tests.support import get
from tests.test_cluster import toy_config  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parent.parent

TOKEN = {"PARALLEL_RL_TOKEN": "misc-token"}


# ---- 40.10: a shared directory that cannot be made is a usage error ------------------------------------
@pytest.mark.parametrize("command", ["coordinator", "run"])
def test_a_shared_dir_that_cannot_be_created_exits_2_with_one_line(cli, tmp_path, toy_config, command):
    """README: a store that cannot be used ends the command with one line, exit 2; a local directory that
    cannot be created (`--shared-dir /proc/nope`) used to exit 1."""
    proc = cli(
        command,
        command,
        "-c",
        toy_config,
        "--shared-dir",
        "/proc/nope",
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        env=TOKEN,
    )
    assert proc.wait(120) == 2, proc.output()[-3000:]
    output = proc.output()
    assert "Traceback" not in output, output[-3000:]
    assert re.search(r"cannot create the shared directory '/proc/nope'.*--shared-dir", output), output[-3000:]


# ---- 40.10: every experiment directory is ignored by git and by docker's build context ---------------
def shipped_exp_names() -> set:
    from parallel_rl.config.schema import load_config_file

    names = set()
    for path in sorted((ROOT / "configs").iterdir()):
        if path.suffix in (".py", ".yaml", ".yml"):
            names.add(load_config_file(str(path)).get("exp_name", "default_experiment"))
    return names


def dockerignored(path: str) -> bool:
    """Whether docker leaves ``path`` (relative to the context) out of the build context: the last pattern of
    .dockerignore that matches it or a directory above it decides, `!` patterns take it back in."""
    ignored = False
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/").replace("**/", "").split("/")
        parts = path.split("/")  # a `*` stays within one name (Go's filepath.Match, which docker uses)
        if any(
            len(pattern) == i and all(map(fnmatch.fnmatchcase, parts[:i], pattern)) for i in range(1, len(parts) + 1)
        ):
            ignored = not negate
    return ignored


def test_every_shipped_experiment_directory_is_ignored_by_git_and_docker():
    """A Pong run leaves 415 MB in pong_dqn_parallel/; .gitignore and .dockerignore named only CartPole's
    directories, so any other run's went into `git status` and into a compose build's context."""
    names = shipped_exp_names()
    assert len(names) > 40 and "pong_dqn_parallel" in names
    for name in sorted(names):
        file = f"{name}/shared/data/chunk.npz"
        check = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", file])
        assert check.returncode == 0, f"git does not ignore {file}"
        assert dockerignored(file), f".dockerignore does not leave out {file}"
    for kept in (
        "parallel_rl/envs/toy.py",
        "configs/pong_dqn_parallel.py",
        "coordinator_app/__init__.py",
        "pyproject.toml",
        "setup.cfg",
        "constraints.txt",
        "README.md",
    ):
        assert subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", kept]).returncode == 1
        assert not dockerignored(kept), kept


# ---- 40.10: a coordinator started on the store of a finished run does not train it again ---------------
def start_coordinator(cli, name, toy_config, shared, tmp_path, *extra):
    proc = cli(
        name,
        "coordinator",
        "-c",
        toy_config,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--shared-dir",
        shared,
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        *extra,
        env=TOKEN,
    )
    return proc, proc.wait_line(r"^REST API: (http://127\.0\.0\.1:\d+)/api/v1$").group(1)


def test_a_coordinator_recreated_on_a_solved_run_reports_it_and_does_not_train_again(cli, tmp_path, toy_config):
    """Compose's coordinator resumes whatever its volume holds: recreated after a solved run (`docker compose up`
    again) it used to resume the run as running and train it again with the workers compose starts. It now
    finds the run ended, says so, serves it read-only (--linger) and lets every worker that registers go."""
    shared = str(tmp_path / "shared")
    first, url = start_coordinator(cli, "coordinator-1", toy_config, shared, tmp_path)
    workers = [
        cli(role, role, "--coordinator", url, "--host", "127.0.0.1", "--shared-dir", shared, env=TOKEN)
        for role in ("learner", "collector")
    ]
    assert first.wait(120) == 0, first.output()[-3000:]
    assert re.search(r"^coordinator: solved: eval return", first.output(), re.M), first.output()[-3000:]
    for worker in workers:
        assert worker.wait(60) == 0, worker.output()[-3000:]

    again, url = start_coordinator(cli, "coordinator-2", toy_config, shared, tmp_path, "--linger")
    again.wait_line(r"^coordinator: the run in .* already ended solved \(eval return .*\); not training it again")
    cluster = get(url, "/api/v1/cluster")
    assert cluster["state"] == "solved", cluster
    env_steps = cluster["env_steps"]
    collector = cli(
        "collector-again", "collector", "--coordinator", url, "--host", "127.0.0.1", "--shared-dir", shared, env=TOKEN
    )
    assert collector.wait(60) == 0, collector.output()[-3000:]  # let go at once: nothing to collect for
    assert get(url, "/api/v1/cluster")["env_steps"] == env_steps
    assert requests.get(url + "/metrics", timeout=5).status_code == 200  # still serving, read-only
    again.proc.send_signal(signal.SIGTERM)
    assert again.wait(30) == 0, again.output()[-3000:]  # the run's outcome, as --linger exits after any run


# ---- 40.10: MuJoCo's known warning is silenced at its source, and its log file stays out of the cwd ------
def test_a_mujoco_run_prints_no_deprecation_warning_and_leaves_no_log_file(cli, tmp_path):
    """gymnasium's v5 models use a compiler attribute MuJoCo deprecates: every MuJoCo run printed the warning
    once per env (7 lines) and left MUJOCO_LOG.TXT in the working directory."""
    pytest.importorskip("mujoco")
    run = cli(
        "serial",
        "serial",
        "-c",
        str(ROOT / "configs" / "halfcheetah_sac.py"),
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "policy.random_collect_size=64",
        "--set",
        "serial.max_env_step=64",
        "--set",
        'env.env_kwargs={"max_episode_steps": 20}',
        "--set",
        "env.n_evaluator_episode=1",
        "--set",
        "env.evaluator_env_num=1",
        cwd=str(tmp_path),
    )
    assert run.wait(180) == 0, run.output()[-3000:]
    assert re.search(r"^stopped: env step budget 64 used up", run.output(), re.M), run.output()[-3000:]
    assert "settotalmass" not in run.output(), run.output()[-3000:]
    assert "WARNING" not in run.output(), run.output()[-3000:]
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_other_mujoco_warnings_still_reach_the_user_as_python_warnings(tmp_path):
    """The filter names the one known message: any other warning of MuJoCo's is a Python warning, and still
    no log file is written (checked in a process of its own, in an empty working directory)."""
    pytest.importorskip("mujoco")
    script = textwrap.dedent("""
        import warnings
        import mujoco
        from parallel_rl.envs.mujoco_messages import MuJoCoWarning, route_mujoco_messages
        route_mujoco_messages()
        model = mujoco.MjModel.from_xml_string('<mujoco><worldbody><body><freejoint/><geom size="1"/></body>'
                                               '</worldbody></mujoco>')
        data = mujoco.MjData(model)
        data.qpos[0] = float("nan")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mujoco.mj_checkPos(model, data)
        print([(w.category.__name__, str(w.message)) for w in caught])
    """)
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"\('MuJoCoWarning', 'MuJoCo: .*QPOS", out.stdout), out.stdout + out.stderr
    assert os.listdir(tmp_path) == []


# ---- 41.12 / 40: TensorBoard's files: named by worker id, bounded, removed with the run -----------------
def event_files(logdir) -> dict:
    """Path -> size of the event files under ``logdir`` (each writer's directory)."""
    return {str(p): p.stat().st_size for p in Path(logdir).glob("*/events.out.tfevents.*")}


def scalar_points(logdir, tag) -> list:
    """(step, value) of ``tag`` in ``logdir``'s event files, read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    accumulator = EventAccumulator(str(logdir))
    accumulator.Reload()
    return [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in accumulator.Tensors(tag)]


def test_tensorboard_directories_are_named_by_worker_id_capped_and_removed_with_the_run(cli, tmp_path, toy_config):
    """Each collector process used to get a directory named by its pid (a new one at every restart), the learner
    one named `learner` whatever its REST id; the files grew without bound (~270 MiB a day a learner); and a
    fresh `run` kept the last run's event files, which `plot` then read beside the new ones."""
    exp = tmp_path / "exp"
    tensorboard = exp / "shared" / "tensorboard"
    first = cli("run-1", "run", "-c", toy_config, "--set", f"exp_name={exp}", "--port", "0")
    assert first.wait(120) == 0, first.output()[-3000:]
    names = set(re.findall(r"^\[((?:learner|collector)-\d+)\]", first.output(), re.M))  # the REST API's ids
    directories = set(os.listdir(tensorboard))
    assert {"evaluator", "learner-1", "collector-1"} <= directories <= names | {"evaluator"}, (directories, names)
    old = event_files(tensorboard)
    assert old

    cap = 12 * 1024  # bytes: 0.01171875 MiB
    second = cli(
        "run-2",
        "run",
        "-c",
        toy_config,
        "--set",
        f"exp_name={exp}",
        "--port",
        "0",
        "--set",
        "system.tensorboard_interval=0",
        "--set",
        f"system.tensorboard_max_mb={cap / 2**20}",
    )
    assert second.wait(120) == 0, second.output()[-3000:]
    new = event_files(tensorboard)
    assert not set(old) & set(new), "the first run's event files were left for plot to read"
    for directory in os.listdir(tensorboard):
        sizes = [size for path, size in new.items() if Path(path).parent.name == directory]
        assert sum(sizes) <= cap, (directory, sizes)
    # the newest points stay: the learner's last loss is in its files
    assert scalar_points(tensorboard / "learner-1", "learner/loss")
    assert scalar_points(tensorboard / "evaluator", "evaluator/eval_return")


def test_a_worker_logger_writes_a_tag_at_most_once_an_interval_and_its_last_value_at_close(tmp_path):
    from parallel_rl.tblog import TensorBoardLogger

    tb = TensorBoardLogger(str(tmp_path / "learner-1"), interval=3600.0)
    for step in range(100):
        tb.scalars(step, "learner/", loss=float(step))
    tb.close()
    assert scalar_points(tmp_path / "learner-1", "learner/loss") == [(0, 0.0), (99, 99.0)]


def test_tensorboard_settings_out_of_range_are_config_errors():
    from parallel_rl.config import compile_config
    from parallel_rl.errors import ConfigError

    for key in ("tensorboard_interval", "tensorboard_max_mb"):
        with pytest.raises(ConfigError, match=rf"system needs .*system\.{key}=-1"):
            compile_config({"system": {key: -1}})
