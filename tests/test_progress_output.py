"""What people read: what `serial` and `run` show on a terminal (the real CLI under a pseudo-terminal, python's
``pty``, its output drawn as a terminal draws it: a carriage return goes back to the start of the line, later text
overwrites), what `status` prints, how `plot` labels runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

from tests.test_cluster import TOY_CONFIG, tensorboard_tags

# a log record as runtime.setup_logging formats it (a child's, forwarded by `run`, behind its [name])
LOG_RECORD = re.compile(r"\d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
COLUMNS = 120


def run_in_terminal(args, timeout: float = 120.0):
    """Run `python -m parallel_rl ARGS` with a terminal (``COLUMNS`` wide) as stdin, stdout and stderr; its exit
    code and everything it wrote there."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, COLUMNS, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "parallel_rl", *args], stdin=slave, stdout=slave, stderr=slave, start_new_session=True
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"still running after {timeout}s:\n{b''.join(chunks)[-3000:]!r}")
            if not select.select([master], [], [], left)[0]:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every process that had the terminal closed it
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
    return code, b"".join(chunks).decode("utf-8", errors="replace")


def screen(raw: str) -> list:
    """The lines of ``raw`` as a terminal shows them."""
    lines, line, col = [], [], 0
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|.", raw, re.S):
        if token.startswith("\x1b"):  # one bar: no cursor moves to draw
            continue
        if token == "\n":
            lines.append("".join(line).rstrip())
            line, col = [], 0
        elif token == "\r":
            col = 0
        else:
            line[col : col + 1] = [token]
            col += 1
    lines.append("".join(line).rstrip())
    return lines


def frames(raw: str, marker: str) -> list:
    """Each drawing of the bar (the text between carriage returns and newlines that holds ``marker``), in order."""
    return [f for f in re.split(r"[\r\n]", raw) if marker in f]


def check_terminal_output(raw: str, stop_value: str, marker: str = "steps/s="):
    """No line on the screen holds the bar (``marker``: its text) and a log record; the first bar shows no
    return; no bar is wider than the terminal. The lines shown, and the bars drawn."""
    shown = screen(raw)
    bars = frames(raw, marker)
    assert bars, raw[-3000:]
    assert any(LOG_RECORD.search(line) for line in shown), "the run logged nothing to check against"
    glued = [line for line in shown if marker in line and LOG_RECORD.search(line)]
    assert not glued, glued[:3]
    # before the first evaluation: no return yet, not a return of 0.0
    assert "eval=—" in bars[0] and not re.search(rf"\b0\.0/{stop_value}\b", bars[0]), bars[0]
    assert all(len(f) <= COLUMNS for f in bars), "a bar wider than the terminal wraps and cannot be redrawn"
    return shown, bars


def test_serial_on_a_terminal_keeps_log_records_off_the_bar(tmp_path):
    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    code, raw = run_in_terminal(
        [
            "serial",
            "-c",
            str(config),
            "--set",
            f"exp_name={tmp_path / 'exp'}",
            "--set",
            "serial.max_train_iter=40",
            "--set",
            "policy.eval.evaluator.eval_freq=10",
            "--set",
            "policy.random_collect_size=64",
            "--set",
            "env.stop_value=1000",
        ]
    )  # a stop value the budget ends before
    assert code == 3, raw[-3000:]
    shown, bars = check_terminal_output(raw, "1000")
    assert any("serial: collecting 64 transitions" in line for line in shown)  # logged while the bar was shown
    assert re.search(r"train=\d", bars[-1]), bars[-1]  # the training episodes' return (SB3's ep_rew_mean)
    assert "collector/train_return" in tensorboard_tags(tmp_path / "exp" / "tensorboard")
    assert any(line.startswith("stopped: train iteration budget 40 used up") for line in shown), shown[-5:]


def test_run_on_a_terminal_keeps_the_workers_lines_off_the_bar(tmp_path):
    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    code, raw = run_in_terminal(
        [
            "run",
            "-c",
            str(config),
            "--set",
            f"exp_name={tmp_path / 'exp'}",
            "--port",
            "0",
            "--set",
            "parallel.commander.max_train_iter=200",
        ]
    )
    assert code in (0, 3), raw[-3000:]
    shown, bars = check_terminal_output(raw, "4")
    assert any(re.match(r"\[(learner|collector)-\d+\] ", line) for line in shown)  # the workers' lines
    assert any(line.startswith("REST API: http://127.0.0.1:") for line in shown)


def test_status_prints_dates_and_rounded_numbers(cli, tmp_path):
    """`status` for people: times as dates, floats rounded; it printed epochs (``state_saved_at:
    1795838444.359144``) and full-precision floats (``loss=0.02548707276582718``)."""
    from tests.support import eventually, get
    from tests.test_cluster import start_run

    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    run, url = start_run(
        cli,
        tmp_path,
        str(config),
        "--set",
        "env.stop_value=1000",
        "--set",
        "parallel.coordinator.snapshot_interval=0.2",
    )
    eventually(
        lambda: (lambda c: c["state_saved_at"] and "loss" in c["learn_info"])(get(url, "/cluster")),
        timeout=60,
        interval=0.1,
        message="a snapshot and a learner's loss",
    )
    status = cli("status", "status", "--coordinator", url[: -len("/api/v1")])
    assert status.wait(30) == 0, status.output()
    text = status.output()
    assert re.search(r"^\s*state_saved_at: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", text, re.M), text
    assert re.search(r"^\s*learn_info: .*\bloss=[-\d.e]+\s", text, re.M), text
    long = [n for n in re.findall(r"\d+\.\d+", text) if len(n.replace(".", "").lstrip("0")) > 4]
    assert not long, long  # no float in full precision: 4 significant digits
    assert not re.search(r"\b\d{10}\b", text), text  # no epoch
    assert re.search(r"^\s*reason: -$", text, re.M), text
    widths = {line.index(":") for line in text.splitlines() if ":" in line}
    assert len(widths) == 1, text  # the names right-aligned in one column
    run.stop()


def test_plot_labels_cluster_runs_by_their_names(tmp_path):
    """Two seeds of a cluster run, each plotted by its shared store: one group named after the runs, not two
    stores both called ``shared`` (the label, and the key the seeds are grouped by)."""
    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    for seed in (0, 1):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "parallel_rl",
                "run",
                "-c",
                str(config),
                "--port",
                "0",
                "--set",
                f"exp_name={tmp_path / f'toy_s{seed}'}",
                "--set",
                f"seed={seed}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_rl",
            "plot",
            str(tmp_path / "toy_s0" / "shared"),
            str(tmp_path / "toy_s1" / "shared"),
            "-o",
            str(tmp_path / "curves.png"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "plot: toy: 2 run(s): toy_s0, toy_s1" in out.stdout, out.stdout


def test_a_resumed_run_s_steps_per_second_count_only_its_own_steps(tmp_path):
    """Off a terminal (the plain lines): after `run --resume`, steps/s is the env steps made since the command
    started over its time; it used to count the steps of the run before the resume too."""
    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG.replace("stop_value=4.0", "stop_value=1000.0"))

    def run(*extra):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "parallel_rl",
                "run",
                "-c",
                str(config),
                "--port",
                "0",
                "--set",
                f"exp_name={tmp_path / 'exp'}",
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 3, done.stderr[-3000:]  # the budget ran out before the stop value
        return done.stdout

    run("--set", "parallel.commander.max_train_iter=100")
    out = run("--resume", str(tmp_path / "exp" / "shared"), "--set", "parallel.commander.max_train_iter=400")
    start = int(re.search(r"^resumed \S+: env_steps=(\d+)", out, re.M).group(1))
    assert start > 0, out
    lines = re.findall(r"^\[cluster +([\d.]+)s\] .*env_steps=(\d+) .*steps/s=(\d+)", out, re.M)
    checked = 0
    for elapsed, env_steps, rate in lines:
        if float(elapsed) >= 0.2:  # printed to 0.1 s: the time the rate was taken over is at least elapsed - 0.05
            assert int(rate) <= (int(env_steps) - start) / (float(elapsed) - 0.05) + 1, (elapsed, env_steps, rate)
            checked += 1
    assert checked, out


def test_eval_on_a_terminal_shows_the_episodes_played(tmp_path):
    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    trained = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_rl",
            "serial",
            "-c",
            str(config),
            "--set",
            f"exp_name={tmp_path / 'exp'}",
            "--set",
            "serial.max_train_iter=20",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert trained.returncode in (0, 3), trained.stderr[-3000:]
    code, raw = run_in_terminal(["eval", "-c", str(config), "--run", str(tmp_path / "exp"), "--episodes", "20"])
    assert code == 0, raw[-3000:]
    shown = screen(raw)
    assert any(re.match(r"eval: +100%.*\| 20/20 ", line) for line in shown), shown
    assert not [line for line in shown if "20/20" in line and LOG_RECORD.search(line)], shown
    assert any(re.match(r"return\s+\d", line) for line in shown), shown  # the table after it
