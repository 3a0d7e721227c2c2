import io
import math
import re

from parallel_rl.progress import ProgressReporter


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    reporter = ProgressReporter(195, name="serial", stream=out, min_interval=3600)
    reporter.update(100, 10, 50.0, force=True)
    reporter.update(200, 20, 60.0)  # within min_interval: no line
    reporter.update(300, 30, 70.0, best_return=80.0, workers="3", force=True, train_return=42.25)
    reporter.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "eval_return=50.0/195" in lines[0] and "env_steps=100 updates=10" in lines[0]
    assert "best=80.0" in lines[1] and "workers=3" in lines[1] and "train_return=42.2" in lines[1]


def test_live_bar_on_a_terminal():
    out = io.StringIO()
    with ProgressReporter(195, name="cluster", stream=out, live=True) as reporter:
        reporter.update(1234, 56, 97.5, workers="3", force=True)
    text = out.getvalue()
    assert "cluster |" in text and "eval=97.5/195" in text
    assert "env_steps=1234" in text and "updates=56" in text and "workers=3" in text


def test_the_bar_shows_no_return_before_the_first_evaluation_then_keeps_the_last():
    out = io.StringIO()
    with ProgressReporter(195, name="cluster", stream=out, live=True) as reporter:
        first = out.getvalue()
        reporter.update(10, 1, 20.0, force=True)
        reporter.update(20, 2, math.nan, force=True)  # no evaluation since: the last one stays
    assert "eval=—/195" in first and "0.0" not in first
    assert out.getvalue().rsplit("\r", 1)[-1].count("eval=20.0/195") == 1


def test_steps_per_second_count_only_the_steps_made_since_the_reporter_started():
    """A resumed run starts at its saved env steps: those are not this process's (they made steps/s huge)."""
    out = io.StringIO()
    reporter = ProgressReporter(None, stream=out, min_interval=0, start_envstep=10**9)
    reporter.update(10**9, 0, force=True)
    assert re.search(r" steps/s=0$", out.getvalue(), re.M), out.getvalue()
