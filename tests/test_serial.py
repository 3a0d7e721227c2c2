"""The serial pipeline end to end, through the real CLI in a subprocess."""
import subprocess
import sys


def run_cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "parallel_rl", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_serial_solves_cartpole(tmp_path):
    proc = run_cli("serial", "-c", "configs/cartpole_dqn.py", "--set", f"exp_name={tmp_path / 'exp'}",
                   "--set", "serial.max_env_step=150000")
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("solved: eval return")
    assert (tmp_path / "exp" / "ckpt" / "ckpt_best.pt").is_file()
    from tests.test_cluster import tensorboard_tags

    assert {"evaluator/eval_return", "evaluator/env_steps_per_second", "learner/loss"} <= tensorboard_tags(
        tmp_path / "exp" / "tensorboard")


def test_serial_budget_exhausted_exits_3(tmp_path):
    proc = run_cli("serial", "-c", "configs/cartpole_dqn.py", "--set", f"exp_name={tmp_path / 'exp'}",
                   "--set", "serial.max_env_step=500")
    assert proc.returncode == 3
    assert "env step budget 500 used up" in proc.stderr


def test_bad_override_is_one_line_exit_2():
    proc = run_cli("serial", "-c", "configs/cartpole_dqn.py", "--set", "policy.learn.batch_sze=3")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "did you mean 'policy.learn.batch_size'" in proc.stderr
