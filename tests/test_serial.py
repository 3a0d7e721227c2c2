"""The serial pipeline end to end, through the real CLI in a subprocess."""

import subprocess
import sys

import pytest


def run_cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "parallel_rl", *args], capture_output=True, text=True, timeout=timeout)


def test_serial_solves_cartpole(tmp_path):
    proc = run_cli(
        "serial",
        "-c",
        "configs/cartpole_dqn.py",
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "serial.max_env_step=150000",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("solved: eval return")
    assert (tmp_path / "exp" / "ckpt" / "ckpt_best.pt").is_file()
    from tests.test_cluster import tensorboard_tags

    assert {"evaluator/eval_return", "evaluator/env_steps_per_second", "learner/loss"} <= tensorboard_tags(
        tmp_path / "exp" / "tensorboard"
    )


def test_serial_budget_exhausted_exits_3(tmp_path):
    proc = run_cli(
        "serial",
        "-c",
        "configs/cartpole_dqn.py",
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "serial.max_env_step=500",
    )
    assert proc.returncode == 3
    assert "env step budget 500 used up" in proc.stderr
    assert "nothing was trained" not in proc.stdout  # it trained (serial trains on each collect before the check)


@pytest.mark.parametrize("name, stop_value", [("toy.py", 'float("inf")'), ("toy.py", "None"), ("toy.yml", ".inf")])
def test_serial_with_no_stop_value_trains_to_its_budget_and_exits_0(tmp_path, name, stop_value):
    """No stop value (``float("inf")`` or None in a Python config, ``.inf`` in a YAML one: one meaning in the
    compiled config): the budget is the goal, exit 0, as in the cluster (tests/test_cluster.py)."""
    import runpy

    import yaml

    from tests.test_cluster import TOY_CONFIG

    config = tmp_path / name
    if name.endswith(".py"):
        config.write_text(TOY_CONFIG.replace("stop_value=4.0", f"stop_value={stop_value}"))
    else:  # -c of a YAML file with the Python config's keys
        (tmp_path / "toy.py").write_text(TOY_CONFIG)
        main = runpy.run_path(str(tmp_path / "toy.py"))["main_config"]
        config.write_text(yaml.safe_dump(main).replace("stop_value: 4.0", f"stop_value: {stop_value}"))
    proc = run_cli(
        "serial",
        "-c",
        str(config),
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "serial.max_train_iter=40",
        "--set",
        "policy.eval.evaluator.eval_freq=10",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("stopped: train iteration budget 40 used up")


def test_a_config_file_neither_python_nor_yaml_is_one_line_exit_2(tmp_path):
    config = tmp_path / "toy.json"
    config.write_text("{}")
    proc = run_cli("serial", "-c", str(config))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().count("\n") == 0 and "neither a Python (.py) nor a YAML" in proc.stderr


def test_pipelines_called_from_python_run_torch_on_the_configured_threads(tmp_path):
    """`serial_pipeline(cfg)` called from Python (not through the CLI) honours `system.torch_num_threads`: with
    torch's default threads, two busy processes on this box ran the toy self-play test ~7x slower."""
    import torch

    from parallel_rl.entry.serial import serial_pipeline
    from tests.support import toy_cluster_config

    cfg = toy_cluster_config(tmp_path)
    cfg.run.max_train_iter = 2
    cfg.system.torch_num_threads = 1
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        serial_pipeline(cfg)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_bad_override_is_one_line_exit_2():
    proc = run_cli("serial", "-c", "configs/cartpole_dqn.py", "--set", "policy.learn.batch_sze=3")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "did you mean 'policy.learn.batch_size'" in proc.stderr


def test_serial_ppo_solves_cartpole(tmp_path):
    proc = run_cli(
        "serial",
        "-c",
        "configs/cartpole_ppo.py",
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "serial.max_env_step=60000",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("solved: eval return")
    from tests.test_cluster import tensorboard_tags

    assert {"learner/policy_loss", "learner/entropy", "learner/approx_kl"} <= tensorboard_tags(
        tmp_path / "exp" / "tensorboard"
    )


@pytest.mark.parametrize(
    "command, config, sets, match",
    [
        ("serial", "cartpole_dqn", ["env.env_id=Pendulum-v1"], "policy.type='dqn' does not fit env 'Pendulum-v1'"),
        ("run", "pendulum_sac", ["env.env_id=CartPole-v1"], "policy.type='sac' does not fit env 'CartPole-v1'"),
        ("run", "cartpole_dqn", ["policy.cuda=true"], "policy.cuda=True but torch sees no CUDA device"),
    ],
)
def test_bad_algorithm_or_device_exits_2_before_any_process_starts(tmp_path, command, config, sets, match):
    import torch

    if "cuda" in match and torch.cuda.is_available():
        pytest.skip("checks the no-GPU error path")
    args = [command, "-c", f"configs/{config}.py", "--set", f"exp_name={tmp_path / 'exp'}"]
    if command == "run":
        args += ["--shared-dir", str(tmp_path / "shared")]
    for s in sets:
        args += ["--set", s]
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert match in proc.stderr and proc.stderr.strip().count("\n") == 0
    # nothing started: no experiment dir, no shared store (the launcher makes it before its children)
    assert not (tmp_path / "exp").exists() and not (tmp_path / "shared").exists()
