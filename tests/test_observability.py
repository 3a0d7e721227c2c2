"""Metrics (Prometheus text), history, and the dashboard in a real headless Chromium."""

import os
import shutil

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support import eventually
from tests.test_cluster import start_run, toy_config  # noqa: F401  (fixture)
from tests.test_coordinator import ScriptedSlave, slaves  # noqa: F401  (fixture)


def samples(text):
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_in_prometheus_format(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    collector.write_chunk(collector.received[0].task_id, "c-m", n=8, version=2)
    response = requests.get(server.url + "/metrics", timeout=5)
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/plain")
    m = samples(response.text)
    assert m[("parallel_rl_env_steps_total", ())] == 8
    assert m[("parallel_rl_transitions_pushed_total", ())] == 8
    assert m[("parallel_rl_buffer_size", ())] == 8
    assert m[("parallel_rl_tasks", (("kind", "collector"), ("state", "running")))] == 1
    assert m[("parallel_rl_workers", (("kind", "collector"), ("state", "busy")))] == 1
    assert m[("parallel_rl_policy_version", ())] == -1
    assert m[("parallel_rl_control_message_seconds_count", (("endpoint", "metadata"),))] >= 1
    assert ("parallel_rl_eval_return_best", ()) in m


def test_history_for_charts(coordinator_factory, slaves):  # noqa: F811
    coordinator, server = coordinator_factory()
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    learner = slaves("learner", server.url, run=False)
    learner.announce_policy(0)
    evaluator = eventually(lambda: collector.inbox.take(lambda t: t.kind == "evaluator"), message="evaluator task")
    collector.report_end(evaluator, "task_done", {"eval_episode_return_mean": 2.5, "episodes": 2})
    history = eventually(
        lambda: (lambda h: h if h["eval"] and h["throughput"] else None)(
            requests.get(server.url + "/api/v1/cluster/history", timeout=5).json()
        ),
        message="history",
    )
    assert history["eval"][0]["eval_return"] == 2.5 and history["eval"][0]["policy_version"] == 0
    assert history["stop_value"] == 4.0


def chrome():
    """Headless Chromium through the Debian chromedriver (installed by `make test`)."""
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium download a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert binary and driver, "the dashboard test needs Debian's chromium and chromium-driver (make test installs them)"
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


def test_dashboard_renders_workers_and_charts(cli, tmp_path, toy_config):  # noqa: F811
    run, url = start_run(cli, tmp_path, toy_config, "--set", "env.stop_value=1000")
    base = url[: -len("/api/v1")]
    eventually(
        lambda: len(requests.get(url + "/cluster/history", timeout=5).json()["eval"]) >= 2,
        timeout=60,
        message="two evaluations",
    )
    browser = chrome()
    try:
        browser.set_page_load_timeout(30)
        browser.get(base + "/")
        rows = eventually(
            lambda: (
                browser.find_elements("css selector", "#workers tbody tr[data-worker-id]")
                if len(browser.find_elements("css selector", "#workers tbody tr[data-worker-id]")) >= 3
                else None
            ),
            timeout=20,
            message="worker rows",
        )
        ids = sorted(r.get_attribute("data-worker-id") for r in rows)
        assert ids == ["collector-1", "collector-2", "learner-1"]
        assert "running" in browser.find_element("id", "state").text
        # the eval chart drew its line: count coloured pixels on uPlot's canvas
        painted = eventually(
            lambda: browser.execute_script("""
            const c = document.querySelector('#eval-chart canvas');
            if (!c) return 0;
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
            return n;"""),
            timeout=20,
            message="painted eval chart",
        )
        assert painted > 200
        assert browser.find_elements("css selector", "#tasks tbody tr")
        shot = tmp_path / "dashboard.png"
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        browser.quit()


def test_tensorboard_event_files_are_written_without_loading_the_aws_sdk(tmp_path):
    """The writer is imported with the AWS SDK kept out (tensorboard's file layer would load it for s3:// logdirs,
    which no writer here has: ~0.1 s of every process's start); the events are written, and the SDK imports
    normally afterwards. A fresh interpreter: this one may hold boto3 already (moto)."""
    import subprocess
    import sys

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    code = (
        "import sys\n"
        "from parallel_rl.tblog import TensorBoardLogger\n"
        f"tb = TensorBoardLogger({str(tmp_path)!r})\n"
        "tb.scalars(7, 'learner/', loss=0.5)\n"
        "tb.close()\n"
        "print(sorted(m for m in ('boto3', 'botocore') if m in sys.modules))\n"
        "import boto3, botocore.exceptions\n"
        "print(boto3.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "boto3"]
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert "learner/loss" in events.Tags()["tensors"] + events.Tags()["scalars"]
