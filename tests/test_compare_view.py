"""The service's compare view (issue 44, item 6): ``GET /api/v1/compare`` and the page at the service's ``/``,
through a real `parallel-rl serve` process over a service directory that holds runs with known curves (their
coordinator states written by the store's own snapshot writer, as tests/test_compare.py writes them; the runs
ended, so the pool starts none of them and nothing trains). The endpoint's CSV is the CLI's, byte for byte; its
IQM is rliable's (``aggregate_iqm``: ``scipy.stats.trim_mean(scores, 0.25)``) of the known final scores."""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
import requests
from scipy.stats import trim_mean

from tests.support import eventually
from tests.test_compare import read_csv, run_cli
from tests.test_runs import AUTH, serve

# run-1..run-5: seeds of one config, final scores CART (IQM 5: the middle three of five, 2, 3 and 10); run-6 another
# config (final 7); run-7 a config that closes its reads (auth_read); run-8 failed before its first evaluation
CART = [1.0, 2.0, 3.0, 10.0, 100.0]
STEPS = (100, 200, 300, 400)
CONFIG = {"env": {"env_id": "CartPole-v1"}, "policy": {"type": "dqn"}}


def ended_run(service_dir, run_id: str, name: str, final, config: dict, auth_read: bool = False):
    """A run record as the service keeps it (ended) and, when ``final`` is not None, its directory: a coordinator
    state with evaluations at STEPS (return ``final * k / 4`` at the k-th) and its config.json."""
    from easydict import EasyDict

    from parallel_rl.config import save_run_config
    from parallel_rl.service.runs import RunRecord, RunState, run_dir
    from parallel_rl.storage import SharedStorage

    where = run_dir(str(service_dir), run_id)
    if final is not None:
        history = [
            {"t": float(k), "policy_version": k, "env_steps": step, "train_iter": 10 * k}
            | {"eval_return": final * k / len(STEPS), "train_return": None}
            for k, step in enumerate(STEPS, 1)
        ]  # exp_name: what the CLI calls the run (its basename), the same name the service keeps
        SharedStorage(os.path.join(where, "shared")).states.save(
            1, {"exp_name": f"lab/{name}", "eval_history": history}, {}
        )
        save_run_config(EasyDict(config), where)
    state = RunState.SOLVED if final is not None else RunState.FAILED
    return RunRecord(run_id, name, "/nowhere/config.py", [], state=state, started=True, auth_read=auth_read)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """A `parallel-rl serve` over 8 ended runs: (url, the service directory)."""
    from parallel_rl.service.runs import save_records

    base = tmp_path_factory.mktemp("compare_view")
    service_dir = base / "svc"
    records = [
        ended_run(service_dir, f"run-{i + 1}", f"cart_s{i}", final, {**CONFIG, "seed": i})
        for i, final in enumerate(CART)
    ]
    records.append(ended_run(service_dir, "run-6", "ppo_s0", 7.0, {**CONFIG, "policy": {"type": "ppo"}, "seed": 0}))
    records.append(
        ended_run(service_dir, "run-7", "secret", 3.0, {**CONFIG, "policy": {"type": "sac"}}, auth_read=True)
    )
    records.append(ended_run(service_dir, "run-8", "broken", None, CONFIG))
    save_records(str(service_dir), records, 9)
    proc, url = serve(base, service_dir, "--learners", "1", "--collectors", "1", name="serve_compare")
    yield url, service_dir
    proc.stop()


def compare(url: str, query: str, headers=None) -> requests.Response:
    return requests.get(f"{url}/api/v1/compare?{query}", headers=headers or {}, timeout=60)


def test_the_endpoint_reports_the_iqm_ci_and_curves_and_its_csv_is_the_clis(service, tmp_path):
    url, service_dir = service
    runs = ",".join(f"run-{i}" for i in range(1, 7))
    answer = compare(url, f"runs={runs}&reps=1000&seed=3")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["env_step"], body["reps"], body["seed"], body["confidence"]) == (400, 1000, 3, 0.95)
    cart, ppo = body["groups"]
    assert (cart["name"], ppo["name"]) == ("cart", "ppo")  # by config: the five seeds of one config, then ppo
    assert [r["id"] for r in cart["runs"]] == [f"run-{i}" for i in range(1, 6)]
    assert [r["seed"] for r in cart["runs"]] == [0, 1, 2, 3, 4] and [r["final_score"] for r in cart["runs"]] == CART
    assert cart["iqm"] == trim_mean(CART, 0.25) == 5.0  # rliable's aggregate_iqm of the known finals
    assert (cart["median"], cart["mean"]) == (3.0, np.mean(CART))
    assert cart["ci"][0] < 5.0 < cart["ci"][1]
    assert ppo["iqm"] == ppo["ci"][0] == ppo["ci"][1] == 7.0 and "1 run" in ppo["note"]
    # the mean curve: every run is final * k / 4 at the k-th step, so the mean is mean(CART) * k / 4
    assert cart["curve"]["env_steps"] == list(STEPS)
    assert cart["curve"]["mean"] == pytest.approx([np.mean(CART) * k / 4 for k in (1, 2, 3, 4)])
    assert all(lo <= m <= hi for lo, m, hi in zip(cart["curve"]["low"], cart["curve"]["mean"], cart["curve"]["high"]))
    assert cart["curve"]["low"][-1] < cart["curve"]["high"][-1]

    answer = compare(url, f"runs={runs}&reps=1000&seed=3&format=csv")
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("text/csv"), answer.text
    dirs = [str(service_dir / "runs" / f"run-{i}") for i in range(1, 7)]
    out = run_cli("compare", *dirs, "--csv", str(tmp_path / "cli.csv"), "--reps", "1000", "--seed", "3")
    assert out.returncode == 0, out.stderr
    with open(tmp_path / "cli.csv", newline="") as f:
        assert answer.text == f.read()  # one computation: the CLI's CSV, byte for byte
    rows = read_csv(tmp_path / "cli.csv")
    group = next(r for r in rows if r["row"] == "group" and r["group"] == "cart")
    assert [float(group["ci_low"]), float(group["ci_high"])] == cart["ci"]  # the JSON's CI is the CSV's

    by_name = compare(url, "runs=run-1,run-6&group=name").json()["groups"]
    assert [(g["name"], [r["id"] for r in g["runs"]]) for g in by_name] == [("cart", ["run-1"]), ("ppo", ["run-6"])]


def test_bad_queries_are_one_line_4xx_and_a_closed_run_needs_the_token(service):
    url, _ = service
    too_many = ",".join(f"run-{i}" for i in range(1, 66))
    cases = {
        "": (400, "'runs' is empty"),
        "runs=": (400, "'runs' is empty"),
        "runs=run-1,run-99": (404, "'run-99'"),
        "runs=nope": (404, "'nope'"),
        f"runs={too_many}": (400, "65 runs, over 64"),
        "runs=run-1,run-1": (400, "'run-1' twice"),
        "runs=run-1&group=seed": (400, "'group' must be one of config, name"),
        "runs=run-1&format=xml": (400, "'format' must be one of json, csv"),
        "runs=run-1&reps=5001": (400, "'reps' must be an integer in [1, 5000]"),
        "runs=run-1&reps=-1": (400, "'reps'"),
        "runs=run-1&at_env_step=nan": (400, "'at_env_step'"),
        "runs=run-1&at_env_step=50": (400, "no evaluation at or before env step 50"),
        "runs=run-1&runs=run-2": (400, "'runs' is given twice"),
        "runs=run-1&color=red": (400, "unknown query parameter 'color'"),
        "runs=run-1,run-8": (
            409,
            "run-8 has no evaluation yet",
        ),  # failed before its first evaluation: nothing to compare yet
        "runs=run-1,run-7": (401, ""),  # its config closes reads: not shown without the token
    }
    for query, (status, words) in cases.items():
        answer = compare(url, query)
        assert answer.status_code == status, (query, answer.text)
        message = answer.json()["error"]["message"]
        assert words in message and "\n" not in message, (query, message)
    assert compare(url, "runs=run-1,run-7&group=name", AUTH).json()["groups"][1]["iqm"] == 3.0
    listed = {r["id"]: r for r in requests.get(f"{url}/api/v1/runs", timeout=10).json()["runs"]}
    assert "last_eval_return" not in listed["run-7"]  # the list shows it, without its numbers, as before


@pytest.mark.slow
def test_the_compare_view_lists_runs_and_draws_the_ticked_ones(service, tmp_path):
    """Headless Chromium on the service's /: tick run-1..run-6, see the two groups' bands drawn, the IQM table
    and the CSV link; tick run-8 too: the endpoint's one line shows instead."""
    from tests.test_observability import chrome

    url, _ = service
    browser = chrome()
    try:
        browser.set_page_load_timeout(30)
        browser.get(url + "/")

        def rows():  # read in one script: the page redraws the list as it polls (a row found earlier goes stale)
            found = browser.execute_script(
                "return [...document.querySelectorAll('#runs tbody tr[data-run-id]')]"
                ".map(r => [r.dataset.runId, [...r.querySelectorAll('td')].map(c => c.innerText.trim())])"
            )
            return found if len(found) == 8 else None

        listed = eventually(rows, timeout=20, message="8 run rows")
        assert [run_id for run_id, _ in listed] == [f"run-{i}" for i in range(1, 9)]
        assert listed[0][1][1:] == [
            "run-1",
            "cart_s0",
            "solved",
            "0",
            "–",
        ]  # the row the service lists (its saved numbers: none here, the state files were written by hand)

        def tick(run_id: str) -> None:
            """Click a run's box, found and clicked in one script: the page redraws its run list as it polls, and an
            element found by one WebDriver call can be gone (stale) by the next."""
            box = f'#runs tr[data-run-id="{run_id}"] input[type=checkbox]'
            script = "const box = document.querySelector(arguments[0]); if (box) box.click(); return !!box;"
            eventually(lambda: browser.execute_script(script, box), timeout=10, message=run_id)

        # the page asks for one comparison at a time (the service refuses a third at once with 429): six ticks in
        # one go, each of which used to send its own request at once, make one or two requests, never two at once
        browser.execute_script("""
            let live = 0;
            window.mostComparesAtOnce = 0;
            const fetchBefore = window.fetch;
            window.fetch = async (...args) => {
              const comparing = String(args[0]).includes("/compare?");
              if (comparing) window.mostComparesAtOnce = Math.max(window.mostComparesAtOnce, ++live);
              try { return await fetchBefore(...args); } finally { if (comparing) live--; }
            };""")
        clicked = browser.execute_script(
            "return arguments[0].filter((id) => { const box = document.querySelector("
            '`#runs tr[data-run-id="${id}"] input[type=checkbox]`); if (box) box.click(); return !!box; }).length',
            [f"run-{i}" for i in range(1, 7)],
        )
        assert clicked == 6
        wanted = "runs=run-1,run-2,run-3,run-4,run-5,run-6&group=config"
        eventually(
            lambda: browser.execute_script("return document.body.dataset.compared") == wanted,
            timeout=30,
            message="the six runs compared",
        )
        assert browser.execute_script("return window.mostComparesAtOnce") == 1
        table = browser.execute_script(
            "return Object.fromEntries([...document.querySelectorAll('#iqm tbody tr')]"
            ".map(r => [r.dataset.group, r.querySelector('td.iqm').textContent.trim()]))"
        )
        assert table == {"cart": "5", "ppo": "7"}  # trim_mean(CART, 0.25) and the single run's score
        assert browser.find_element("id", "csv").get_attribute("href").endswith(f"/api/v1/compare?{wanted}&format=csv")
        # both groups drew: count painted pixels of each group's colour on uPlot's canvas (line and band)
        painted = browser.execute_script("""
            const c = document.querySelector('#curve-chart canvas');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            const near = (i, r, g, b) => Math.abs(d[i] - r) < 40 && Math.abs(d[i + 1] - g) < 40 && Math.abs(d[i + 2] - b) < 40;
            let blue = 0, orange = 0;
            for (let i = 0; i < d.length; i += 4) {
              if (d[i + 3] < 200) continue;
              if (near(i, 0x17, 0x5c, 0xd3)) blue++; else if (near(i, 0xf7, 0x90, 0x09)) orange++;
            }
            return [blue, orange];""")
        assert painted[0] > 100 and painted[1] > 100, painted
        shot = tmp_path / "compare.png"
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        tick("run-8")
        error = eventually(
            lambda: browser.find_element("id", "compare-error").text, timeout=30, message="the 409's line"
        )
        assert error.startswith("/compare: run-8 has no evaluation yet"), error
        assert not browser.find_elements("css selector", "#iqm tbody tr, #curve-chart canvas")  # nothing stale
    finally:
        browser.quit()


def test_an_ended_run_of_an_earlier_life_of_the_service_shows_its_saved_curve(service):
    url, _ = service
    run = requests.get(f"{url}/api/v1/runs/run-6", timeout=30).json()
    assert [(p["env_steps"], p["eval_return"]) for p in run["curve"]] == [
        (s, 7.0 * k / 4) for k, s in enumerate(STEPS, 1)
    ]
    assert requests.get(f"{url}/api/v1/runs/run-8", timeout=30).json()["curve"] == []  # it saved none


@contextlib.contextmanager
def one_run_service(tmp_path, computes):
    """The service's real app on a real server in this process (its URL), over a service directory with one ended
    run, run-1 (final score 1); ``computes`` what GET /api/v1/compare answers. Its pool is never started."""
    from coordinator_app.service import serve_service
    from parallel_rl.service.runs import save_records
    from parallel_rl.service.service import Service

    service_dir = tmp_path / "svc"
    save_records(str(service_dir), [ended_run(service_dir, "run-1", "cart_s0", 1.0, CONFIG)], 2)
    service = Service(str(service_dir), 1, 1)
    server = serve_service(service, "127.0.0.1", 0, "token", computes).start()
    try:
        yield server.url
    finally:
        server.close()
        service.close()


def test_a_third_comparison_at_once_is_refused_with_429_and_the_slots_come_back(tmp_path):
    """The service computes at most 2 comparisons at once (each up to 64 runs and 5,000 resamples, open to anyone):
    a third is refused at once with one line, never queued on a server thread; once the two end, the next one is
    computed. The real service app on a real server; the computation is held until the test lets it go, which
    makes "at once" exact."""
    import threading

    from coordinator_app.service import COMPARE_SLOTS

    computing, go = [], threading.Event()

    def held(runs, query):
        computing.append(runs)
        assert go.wait(60)
        return {"groups": []}

    with one_run_service(tmp_path, held) as url:
        try:
            answers = []
            asking = [
                threading.Thread(target=lambda: answers.append(compare(url, "runs=run-1")))
                for _ in range(COMPARE_SLOTS)
            ]
            for thread in asking:
                thread.start()
            eventually(lambda: len(computing) == COMPARE_SLOTS, timeout=30, message="two comparisons being computed")
            refused = compare(url, "runs=run-1")
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["message"] == "2 comparisons are being computed: try again shortly"
            go.set()
            for thread in asking:
                thread.join(60)
            assert [a.status_code for a in answers] == [200] * COMPARE_SLOTS
            assert compare(url, "runs=run-1").status_code == 200  # the slots came back
        finally:
            go.set()


def test_a_service_without_scipy_answers_503_saying_what_to_install(tmp_path, monkeypatch):
    """scipy comes with the `compare` extra only (the Docker image has it not): the service's comparisons are
    unavailable, said in one line, where they were a 500 with a ModuleNotFoundError. The real service app and its
    real comparison on a real server, scipy hidden as an uninstalled package is."""
    import sys

    from parallel_rl.after.compare import service_comparison

    with one_run_service(tmp_path, service_comparison) as url:
        assert compare(url, "runs=run-1").status_code == 200
        monkeypatch.setitem(sys.modules, "scipy", None)
        monkeypatch.setitem(sys.modules, "scipy.stats", None)
        answer = compare(url, "runs=run-1")
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["message"] == "comparing runs needs scipy: pip install 'parallel-rl[compare]'"
