import io

from parallel_rl.progress import ProgressReporter


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    reporter = ProgressReporter(195, name="serial", stream=out, min_interval=3600)
    reporter.update(100, 10, 50.0, force=True)
    reporter.update(200, 20, 60.0)  # within min_interval: no line
    reporter.update(300, 30, 70.0, best_return=80.0, workers="3", force=True)
    reporter.close("solved: done")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert "eval_return=50.0/195" in lines[0] and "env_steps=100 updates=10" in lines[0]
    assert "best=80.0" in lines[1] and "workers=3" in lines[1]
    assert lines[2] == "solved: done"


def test_live_bar_on_a_terminal():
    out = io.StringIO()
    reporter = ProgressReporter(195, name="cluster", stream=out, live=True)
    reporter.update(1234, 56, 97.5, workers="3")
    reporter.close()
    text = out.getvalue()
    assert "cluster eval return: 97.5/195" in text
    assert "env_steps=1234 updates=56" in text and "workers=3" in text and ", env_steps" not in text
