"""A latency-bound env, and where each worker's time goes: its heartbeats' breakdown, `GET /api/v1/workers`,
the bottleneck line of `parallel-rl status`, the dashboard's stacked bars in a real Chromium."""

import os
import re
import time

import numpy as np
import pytest
import requests

from parallel_rl.config import compile_config
from parallel_rl.coordinator.bottleneck import bottleneck
from parallel_rl.entry.placement import CpuPlacement
from parallel_rl.envs import EnvManager
from parallel_rl.errors import ConfigError, ProtocolViolation
from parallel_rl.protocol import Heartbeat, TimeBreakdown
from tests.support import eventually, get
from tests.test_cluster import start_run, toy_config  # noqa: F401  (fixture)
from tests.test_observability import chrome


def timed_steps(env: EnvManager, steps: int):
    """(wall seconds, CPU seconds of this process) of ``steps`` vector steps."""
    env.reset()
    actions = np.zeros(env.num_envs, dtype=np.int64)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        env.step(actions)
    return time.perf_counter() - wall, time.process_time() - cpu


def test_latency_bound_env_sleeps_through_each_step():
    cfg = compile_config({"env": {"env_id": "CartPole-v1", "step_latency_ms": 20}})
    with EnvManager.from_cfg(cfg.env, 2, seed=0) as env:
        assert env.vector_mode == "sync"  # CartPole's vector entry point cannot wrap each sub-env
        wall, cpu = timed_steps(env, 10)
    assert wall >= 10 * 2 * 0.020  # the sync vector env steps its sub-envs in turn: the latencies add up
    assert cpu < 0.3 * wall, f"{cpu=:.3f} s of CPU in {wall=:.3f} s: the latency must not use CPU"
    with EnvManager("CartPole-v1", 1, seed=0) as plain:
        assert timed_steps(plain, 10)[0] < 0.1  # off by default


def test_latency_overlaps_in_an_async_vector_env():
    with EnvManager("CartPole-v1", 4, seed=0, vector_mode="async", step_latency_ms=50) as env:
        wall, _ = timed_steps(env, 5)
    assert 5 * 0.050 <= wall < 0.6 * 5 * 4 * 0.050  # in turn it would take 1 s


def test_evaluators_can_step_their_envs_at_once_while_collectors_step_theirs_in_turn():
    cfg = compile_config({"env": {"env_id": "CartPole-v1", "step_latency_ms": 50, "evaluator_vector_mode": "async"}})
    with EnvManager.from_cfg(cfg.env, 4, seed=0) as collector_env:
        assert collector_env.vector_mode == "sync"
    with EnvManager.from_cfg(cfg.env, 4, seed=0, evaluating=True) as evaluator_env:
        assert evaluator_env.vector_mode == "async"
        wall, _ = timed_steps(evaluator_env, 5)
    assert wall < 0.6 * 5 * 4 * 0.050  # in turn it would take 1 s
    plain = compile_config({"env": {"env_id": "CartPole-v1", "step_latency_ms": 50}})
    with EnvManager.from_cfg(plain.env, 2, seed=0, evaluating=True) as evaluator_env:
        assert evaluator_env.vector_mode == "sync"  # by default as the collectors' (env.vector_mode)


@pytest.mark.parametrize(
    "settings, text",
    [
        ({"step_latency_ms": -1}, "env needs step_latency_ms in [0, 60000)"),
        ({"step_latency_ms": 5, "vector_mode": "vector_entry_point"}, "use env.vector_mode sync"),
    ],
)
def test_latency_settings_that_cannot_work_are_refused(settings, text):
    with pytest.raises(ConfigError, match=re.escape(text)):
        cfg = compile_config({"env": {"env_id": "CartPole-v1", **settings}})
        EnvManager.from_cfg(cfg.env, 2).close()


def breakdown(wall, **phases):
    return TimeBreakdown(wall_seconds=wall, phases=phases)


@pytest.mark.parametrize(
    "workers, line",
    [
        ([], r"^unknown \("),
        (
            [
                ("learner", breakdown(10, waiting_for_data=7.2, train=2)),
                ("collector", breakdown(10, env_step=8, policy_forward=1, waiting=0.2)),
                ("collector", breakdown(10, env_step=8.2, policy_forward=1)),
            ],
            r"^collectors \(the learner waits for data 72%; collectors: env steps 81%\) — collectors are env-bound: "
            r"add collectors$",
        ),
        (
            [
                ("learner", breakdown(10, waiting_for_data=0.5, train=9)),
                ("collector", breakdown(10, env_step=2, waiting=7)),
            ],
            r"^learner \(collectors wait 70%; the learner: training 90%\) — the learner is compute-bound",
        ),
        (
            [
                ("learner", breakdown(10, waiting_for_data=6, train=3)),
                ("collector", breakdown(10, env_step=2, waiting=7)),
            ],
            r"^the data flow \(the learner waits for data 60%",
        ),
        (
            [
                ("learner", breakdown(10, waiting_for_data=1, train=8)),
                ("collector", breakdown(10, env_step=8, waiting=1)),
            ],
            r"^none \(",
        ),
    ],
)
def test_bottleneck_rules(workers, line):
    assert re.search(line, bottleneck(workers)), bottleneck(workers)


def test_a_breakdown_whose_phases_exceed_the_wall_is_refused():
    with pytest.raises(ProtocolViolation, match="more than wall_seconds"):
        Heartbeat.from_json({"time_breakdown": {"wall_seconds": 1.0, "phases": {"train": 2.0}}})
    with pytest.raises(ProtocolViolation, match="seconds >= 0"):
        TimeBreakdown.from_json({"wall_seconds": 1.0, "phases": {"train": -1}})


COLLECTOR_PHASES = {"env_step", "policy_forward", "chunk_write", "policy_load", "waiting", "evaluate", "other"}
LEARNER_PHASES = {"waiting_for_data", "train", "publishing", "other"}


def breakdowns(url):
    """The workers' time breakdowns once every active worker reported the phases that must be non-zero by now."""
    workers = [w for w in get(url, "/workers")["workers"] if w["state"] in ("idle", "busy")]
    out = {w["worker_id"]: w["time_breakdown"] for w in workers}
    must = {"collector": ("env_step", "policy_forward", "chunk_write"), "learner": ("train", "publishing")}
    ready = len(out) == 3 and all(
        b and all(b["phases"][p]["seconds"] > 0 for p in must[w["kind"]]) for w, b in zip(workers, out.values())
    )
    return out if ready else None


def test_cluster_reports_where_time_goes_and_status_names_the_bottleneck(cli, tmp_path, toy_config):  # noqa: F811
    run, url = start_run(cli, tmp_path, toy_config, "--set", "env.stop_value=1000", "--set", "env.step_latency_ms=2")
    found = eventually(lambda: breakdowns(url), timeout=90, interval=0.2, message="breakdowns of 3 workers")
    for worker_id, b in found.items():
        phases = b["phases"]
        assert set(phases) == (COLLECTOR_PHASES if worker_id.startswith("collector") else LEARNER_PHASES)
        assert sum(p["seconds"] for p in phases.values()) == pytest.approx(b["wall_seconds"], abs=0.01)
        assert sum(p["seconds"] for k, p in phases.items() if k != "other") <= b["wall_seconds"]
        assert sum(p["fraction"] for p in phases.values()) == pytest.approx(1.0, abs=0.01)
        if worker_id.startswith("learner"):
            assert set(b["background"]) == {"sample_request", "reading_rows"}
            assert b["background"]["sample_request"]["seconds"] > 0
    status = cli("status", "status", "--coordinator", url[: -len("/api/v1")])
    assert status.wait(30) == 0, status.output()
    assert re.search(r"^\s+bottleneck: (collectors|learner|the data flow|none) \(.+\)", status.output(), re.M), (
        status.output()
    )


def test_dashboard_shows_a_stacked_time_bar_per_worker(cli, tmp_path, toy_config):  # noqa: F811
    run, url = start_run(cli, tmp_path, toy_config, "--set", "env.stop_value=1000")
    eventually(lambda: breakdowns(url), timeout=90, interval=0.2, message="breakdowns of 3 workers")
    browser = chrome()
    try:
        browser.set_page_load_timeout(30)
        browser.get(url[: -len("/api/v1")] + "/")
        bars = eventually(
            lambda: browser.execute_script("""
            const rows = [...document.querySelectorAll('#time-breakdown .time-row[data-worker-id]')];
            return rows.length === 3 ? rows.map((r) => [r.dataset.workerId,
                [...r.querySelectorAll('.time-bar .phase')].map((s) => [s.dataset.phase, s.getBoundingClientRect().width]),
                r.querySelector('.time-bar').getBoundingClientRect().width]) : null;"""),
            timeout=20,
            message="three time bars",
        )
        by_worker = {worker_id: (dict(segments), width) for worker_id, segments, width in bars}
        assert sorted(by_worker) == ["collector-1", "collector-2", "learner-1"]
        for worker_id, (segments, width) in by_worker.items():
            assert ("env_step" if worker_id.startswith("collector") else "train") in segments
            assert all(w > 0 for w in segments.values()) and sum(segments.values()) <= width + 1
        assert "bottleneck:" in browser.find_element("id", "bottleneck").text
        assert browser.find_elements("css selector", "#time-legend i")
    finally:
        browser.quit()
    assert requests.get(url + "/cluster", timeout=5).json()["bottleneck"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="CPU placement needs 2 CPUs")
def test_the_learner_gets_a_cpu_to_itself_only_while_the_collectors_wait_for_it(tmp_path):
    placement = CpuPlacement(learner_cpus=1, claims_dir=str(tmp_path))
    cpus = sorted(os.sched_getaffinity(0))

    def window(waiting):  # two collectors, 10 s more wall each, ``waiting`` of it waiting
        window.wall += 10
        window.waited += 10 * waiting
        return [
            (f"collector-{i}", breakdown(window.wall, waiting=window.waited, env_step=window.wall - window.waited))
            for i in (1, 2)
        ]

    window.wall = window.waited = 0.0

    first = placement.decide(window(0.0))  # training has begun: no window yet
    assert (sorted(first["learner"]), sorted(first["collector"])) == (cpus[-1:], cpus[:-1])
    assert placement.decide(window(0.8)) is None  # throttled collectors: the learner keeps its CPU
    shared = placement.decide(window(0.1))  # env-bound collectors: every process on every CPU
    assert sorted(shared["learner"]) == sorted(shared["collector"]) == cpus
    assert "the collectors wait 10% of their time: every process on CPUs" in placement.reason
    assert placement.decide(window(0.4)) is None  # in between: as it is (no flapping)
    assert sorted(placement.decide(window(0.7))["learner"]) == cpus[-1:]
    assert placement.decide(window(0.4)) is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="CPU placement needs 2 CPUs")
def test_two_runs_learners_claim_different_cpus(tmp_path):
    """Another run's launcher (a process of its own) holds the last CPU for its learner: this run's learner takes
    the highest CPU left; with every CPU held, the last (as one run alone); a claim ends with its process."""
    import subprocess
    import sys

    cpus = sorted(os.sched_getaffinity(0))
    other = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from parallel_rl.entry.placement import CpuPlacement; "
            f"p = CpuPlacement(1, claims_dir={str(tmp_path)!r}); print(sorted(p.dedicated['learner']), flush=True); "
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout.readline().strip() == str(cpus[-1:])
        second = CpuPlacement(learner_cpus=1, claims_dir=str(tmp_path))
        assert second.dedicated["learner"] == {cpus[-2]} and second.dedicated["collector"] == set(cpus) - {cpus[-2]}
        others = [CpuPlacement(learner_cpus=1, claims_dir=str(tmp_path)) for _ in cpus[2:]]
        assert {next(iter(p.dedicated["learner"])) for p in others} == set(cpus[:-2])
        assert CpuPlacement(learner_cpus=1, claims_dir=str(tmp_path)).dedicated["learner"] == {cpus[-1]}  # all held
    finally:
        other.stdin.close()
        other.wait(timeout=30)
    assert CpuPlacement(learner_cpus=1, claims_dir=str(tmp_path)).dedicated["learner"] == {cpus[-1]}
