"""Losing a process: the coordinator restarted mid-run, a run resumed after Ctrl-C."""

import re
import signal

import requests

from tests.support import eventually, free_port
from tests.test_cluster import TOY_CONFIG, alive, start_run, worker_pids

TOKEN = "resilience-token"
ENV = {"PARALLEL_RL_TOKEN": TOKEN}


def get(url, path):
    return requests.get(f"{url}/api/v1{path}", timeout=5).json()


def snapshot(url):
    """(cluster summary, default buffer) read together."""
    return get(url, "/cluster"), get(url, "/buffers")["buffers"][0]


def test_coordinator_restart_mid_run_keeps_counters_buffer_and_workers(cli, tmp_path):
    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    shared = str(tmp_path / "shared")
    port = str(free_port())
    url = f"http://127.0.0.1:{port}"
    args = (
        "coordinator",
        "-c",
        str(config),
        "--port",
        port,
        "--shared-dir",
        shared,
        "--set",
        "env.stop_value=1000",
        "--set",
        "parallel.coordinator.snapshot_interval=0.5",
        "--set",
        "parallel.coordinator.heartbeat_ttl=10",
        "--set",
        f"exp_name={tmp_path / 'exp'}",
    )
    coordinator = cli("coordinator", *args, env=ENV)
    coordinator.wait_line(r"^REST API: ")
    learner = cli("learner", "learner", "--coordinator", url, "--shared-dir", shared, env=ENV)
    collector = cli("collector", "collector", "--coordinator", url, "--shared-dir", shared, env=ENV)
    eventually(lambda: get(url, "/cluster")["train_iter"] > 30, timeout=90, message="training")

    # `first` was read before a snapshot that was saved before `last`: after the kill the restarted coordinator
    # must show counters between the two (at most one snapshot interval lost, nothing counted twice)
    first, first_buffer = snapshot(url)
    eventually(
        lambda: (get(url, "/cluster")["state_saved_at"] or 0) > first["started_at"] + first["uptime"],
        timeout=10,
        message="a snapshot after the first reading",
    )
    saved_at = get(url, "/cluster")["state_saved_at"]
    eventually(lambda: get(url, "/cluster")["state_saved_at"] > saved_at, timeout=10, message="one more snapshot")
    last, last_buffer = snapshot(url)
    workers = {
        w["worker_id"]: w["pid"]
        for kind in ("learners", "collectors")
        for w in get(url, f"/{kind}")[kind]
        if w["state"] == "busy"
    }
    assert len(workers) == 2, workers
    coordinator.proc.send_signal(signal.SIGKILL)
    coordinator.wait(10)

    restarted = cli("coordinator-2", *args, env=ENV)
    # what it restored, before serving (the workers report progress again as soon as it serves)
    resumed = restarted.wait_line(
        r"^coordinator: resumed the saved state of \S+: env_steps=(\d+) "
        r"train_iter=(\d+) buffer=(\d+)$",
        timeout=30,
    )
    restored = dict(zip(("env_steps", "train_iter", "buffer"), map(int, resumed.groups())))
    restarted.wait_line(r"^REST API: ")
    for key in ("env_steps", "train_iter"):
        assert first[key] <= restored[key] <= last[key], (key, first[key], restored[key], last[key])
    assert first_buffer["size"] <= restored["buffer"] <= last_buffer["size"]
    after = get(url, "/cluster")
    assert after["resumed_from"] is not None and after["started_at"] == first["started_at"]
    assert after["env_steps"] >= restored["env_steps"] and after["train_iter"] >= restored["train_iter"]
    # the workers kept running and are re-adopted under their ids (same processes)
    eventually(
        lambda: (
            {
                w["worker_id"]: (w["pid"], w["state"])
                for kind in ("learners", "collectors")
                for w in get(url, f"/{kind}")[kind]
                if w["worker_id"] in workers
            }
            == {k: (pid, "busy") for k, pid in workers.items()}
        ),
        timeout=30,
        message="the same workers busy again",
    )
    eventually(
        lambda: get(url, "/cluster")["train_iter"] > last["train_iter"] + 20, timeout=60, message="training continues"
    )
    assert learner.proc.poll() is None and collector.proc.poll() is None
    restarted.proc.send_signal(signal.SIGTERM)
    assert restarted.wait(30) == 0
    _, arrays = check_replay_index(shared)
    assert arrays["buffer/counters"].tolist()[4] == 0  # nothing evicted: every row pushed is referenced
    assert int(arrays["chunks/ints"][:, 1].sum()) == arrays["buffer/counters"].tolist()[2]


def check_replay_index(shared):
    """The final saved state: every chunk the buffer references exists with the rows it was indexed with, each
    once, and the references add up to the buffer's count (nothing lost, nothing counted twice). Returns the
    saved arrays."""
    from parallel_rl.storage import SharedStorage

    storage = SharedStorage(shared)
    meta, arrays = storage.states.latest()
    names = arrays["chunks/name"].tolist()
    ints = arrays["chunks/ints"]
    assert names and len(set(names)) == len(names)
    for name, size in zip(names, ints[:, 1].tolist()):
        assert len(storage.chunks.read(name)["action"]) == size
    _, count, pushed, _, evicted = arrays["buffer/counters"].tolist()
    assert int(ints[:, 3].sum()) == count == pushed - evicted
    return meta, arrays


def test_run_resumed_after_ctrl_c_continues_training(cli, tmp_path):
    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    run, url = start_run(cli, tmp_path, str(config), "--set", "env.stop_value=1000")
    url = url[: -len("/api/v1")]
    eventually(lambda: get(url, "/cluster")["train_iter"] > 45, timeout=60, message="training")
    eventually(lambda: get(url, "/cluster/history")["eval"], timeout=60, message="an evaluation")
    children = worker_pids(run.pid)
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) == 130
    stopped = re.search(r"^interrupted \(SIGINT\); env_steps=(\d+) train_iter=(\d+)", run.output(), re.M)
    assert stopped, run.output()[-2000:]
    shared = re.search(r"^continue with: parallel-rl run --resume (\S+)", run.output(), re.M).group(1)
    assert not [pid for pid in children if alive(pid)]

    # the saved policy may already reach the toy's stop value (an eval on resume would end the run before the
    # learner starts): the resumed run trains to an iteration budget instead, which only the learner can use up
    budget = int(stopped.group(2)) + 30
    again = cli(
        "run-2",
        "run",
        "-c",
        str(config),
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--resume",
        shared,
        "--set",
        "env.stop_value=1000",
        "--set",
        f"parallel.commander.max_train_iter={budget}",
    )
    resumed = again.wait_line(r"^resumed \S+: env_steps=(\d+) train_iter=(\d+) policy_version=\d+ buffer=(\d+)")
    assert int(resumed.group(1)) == int(stopped.group(1)) and int(resumed.group(2)) == int(stopped.group(2))
    assert int(resumed.group(3)) > 0
    # the learner continues from its saved state (written at its end), not from iteration 0
    learner_iter = int(again.wait_line(r"resumed from learner state (\d+)", timeout=60).group(1))
    assert learner_iter >= 40
    assert again.wait(120) == 3, again.output()[-3000:]  # the budget ran out before the (unreachable) stop value
    assert re.search(rf"^stopped: train iteration budget {budget} used up", again.output(), re.M), again.output()[
        -3000:
    ]
    final = re.search(r"env_steps=(\d+) train_iter=(\d+)", again.output().rsplit("stopped:", 1)[1])
    # the budget is train iterations: the learner may use it up on the resumed buffer before new env steps arrive
    assert int(final.group(1)) >= int(stopped.group(1)) and int(final.group(2)) >= budget


def test_a_learner_silent_past_its_lease_registers_again_once_its_task_ended_and_trains_on(cli, tmp_path):
    """The learner stopped (SIGSTOP) past its lease: the coordinator marks it lost and fails its task. Resumed, it
    hears it was forgotten, stops its old task and registers again; the coordinator hands the replacement task to
    it at once. It used to register again while its old task still wound down (saving its state), refuse the
    replacement as "already running" three times within milliseconds, and the run ended as failed."""
    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    shared = str(tmp_path / "shared")
    port = str(free_port())
    url = f"http://127.0.0.1:{port}"
    coordinator = cli(
        "coordinator",
        "coordinator",
        "-c",
        str(config),
        "--port",
        port,
        "--shared-dir",
        shared,
        "--set",
        "env.stop_value=1000",
        "--set",
        "parallel.commander.max_seconds=300",
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        env=ENV,
    )
    coordinator.wait_line(r"^REST API: ")
    learner = cli("learner", "learner", "--coordinator", url, "--shared-dir", shared, env=ENV)
    cli("collector", "collector", "--coordinator", url, "--shared-dir", shared, env=ENV)
    eventually(lambda: get(url, "/cluster")["train_iter"] > 30, timeout=90, message="training")
    first = get(url, "/learners")["learners"][0]["worker_id"]
    learner.proc.send_signal(signal.SIGSTOP)
    try:
        eventually(
            lambda: get(url, "/learners")["learners"][0]["state"] == "lost",
            timeout=30,
            message="the stopped learner marked lost",
        )
        before = get(url, "/cluster")["train_iter"]
    finally:
        learner.proc.send_signal(signal.SIGCONT)

    def back():
        return [w for w in get(url, "/learners")["learners"] if w["worker_id"] != first and w["state"] == "busy"]

    eventually(back, timeout=60, message="the learner registered again and busy")
    eventually(lambda: get(url, "/cluster")["train_iter"] > before + 30, timeout=90, message="training on")
    assert get(url, "/cluster")["state"] == "running"
    refused = [t for t in get(url, "/tasks?kind=learner")["tasks"] if "refused" in (t["error"] or "")]
    assert not refused, refused
    assert learner.proc.poll() is None
