"""`parallel-rl run` as a user runs it: real processes, real HTTP on 127.0.0.1, real files."""

import os
import re
import signal
import textwrap

import pytest

from tests.support import eventually, get

TOY_CONFIG = textwrap.dedent("""
    main_config = dict(
        env=dict(env_id="parallel_rl/Counting-v0", env_kwargs=dict(episode_length=5), collector_env_num=2,
                 evaluator_env_num=2, n_evaluator_episode=2, stop_value=4.0),
        policy=dict(model=dict(hidden_size_list=[16]), nstep=1, learn=dict(batch_size=16),
                    other=dict(eps=dict(decay=300))),
        parallel=dict(coordinator=dict(heartbeat_ttl=2.0),
                      worker=dict(heartbeat_interval=0.2),
                      commander=dict(eval_freq=20, max_seconds=90.0, max_env_steps_per_update=8.0),
                      collector=dict(chunk_size=32), learner=dict(min_buffer_size=32, publish_every=10,
                                                                   save_state_every=20)),
    )
""")


def child_pids(pid: int) -> list:
    """Processes whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


def worker_pids(run_pid: int) -> list:
    """The learner and collector processes of the `run` launcher ``run_pid``: forks of its fork server."""
    return [pid for child in child_pids(run_pid) for pid in child_pids(child) if role_of(pid)]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def role_of(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline") as f:
        argv = f.read().split("\0")
    return next((a for a in argv if a in ("learner", "collector", "coordinator")), "")


@pytest.fixture
def toy_config(tmp_path):
    path = tmp_path / "toy.py"
    path.write_text(TOY_CONFIG)
    return str(path)


def start_run(cli, tmp_path, config, *extra):
    run = cli("run", "run", "-c", config, "--set", f"exp_name={tmp_path / 'exp'}", *extra)
    url = run.wait_line(r"^REST API: (http://127\.0\.0\.1:\d+/api/v1)$").group(1)
    return run, url


def test_run_solves_toy_env_and_cleans_up(cli, tmp_path, toy_config):
    run, url = start_run(cli, tmp_path, toy_config)
    assert get(url, "/health") == {"status": "ok"}
    assert run.wait(120) == 0, run.output()[-3000:]
    assert re.search(r"^solved: eval return", run.output(), re.M)
    # the learner saves through the shared store: no warning that an exp_dir checkpoint was not saved
    assert "not saved" not in run.output(), run.output()[-3000:]
    assert child_pids(run.pid) == []
    shared = tmp_path / "exp" / "shared"
    # and run.token unless PARALLEL_RL_TOKEN was exported (tests/test_supervisor.py)
    assert sorted(set(os.listdir(shared)) - {"run.token"}) == [
        "coordinator",
        "data",
        "learner",
        "policy",
        "run.lock",
        "tensorboard",
    ]
    assert os.listdir(shared / "policy"), "the learner published checkpoints"
    assert os.listdir(shared / "coordinator"), "the coordinator saved its state"
    assert {
        "learner/loss",
        "learner/q_value",
        "learner/updates_per_second",
        "learner/longest_update_seconds",
    } <= tensorboard_tags(shared / "tensorboard" / "learner-1")
    assert "evaluator/eval_return" in tensorboard_tags(shared / "tensorboard" / "evaluator")


@pytest.mark.parametrize("stop_value, code", [('float("inf")', 0), ("1000.0", 3)])
def test_a_run_that_reaches_its_budget_exits_0_without_a_stop_value_and_3_with_one(cli, tmp_path, stop_value, code):
    """Budget mode: with no stop value (``float("inf")`` in the file, None in the compiled config, which JSON
    carries to every worker) the budget is the goal, exit 0, as in the serial pipeline; every evaluation used to
    fail ('the evaluator needs stop_value') and the run end with exit 1. With a stop value not reached the
    budget running out stays exit 3."""
    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG.replace("stop_value=4.0", f"stop_value={stop_value}"))
    run, url = start_run(cli, tmp_path, str(config), "--set", "parallel.commander.max_train_iter=300")
    assert get(url, "/cluster")["stop_value"] == (None if code == 0 else 1000.0)
    assert run.wait(120) == code, run.output()[-3000:]
    output = run.output()
    assert "Traceback" not in output, output[-3000:]
    assert re.search(r"^stopped: train iteration budget 300 used up", output, re.M), output[-3000:]
    assert re.search(r"coordinator: eval of policy \d+: mean return", output), "an evaluation ran"


def test_a_run_whose_budget_ends_before_the_first_update_says_nothing_was_trained(cli, tmp_path, toy_config):
    """Collectors may run ``warmup_env_steps`` (1,000) ahead of the learner's first update: a budget within that
    head start (here the learner waits for 10,000 transitions) ends the run as asked, and says what it got. PBT's
    short steps on a busy pool ended so, without a word, before their learner had started."""
    run, _ = start_run(
        cli, tmp_path, toy_config, "--set", "run.max_env_step=64", "--set", "parallel.learner.min_buffer_size=10000"
    )
    assert run.wait(120) == 3, run.output()[-3000:]  # the toy config has a stop value
    assert re.search(
        r"^stopped: env step budget 64 used up before the first update: nothing was trained; .* train_iter=0 ",
        run.output(),
        re.M,
    ), run.output()[-3000:]


def busy_collectors(url, n):
    """The busy collectors when there are ``n`` of them, else None."""
    busy = [w for w in get(url, "/collectors")["collectors"] if w["state"] == "busy"]
    return busy if len(busy) == n else None


def tensorboard_tags(logdir) -> set:
    """Scalar tags in the event files of ``logdir`` (read back with TensorBoard's own reader)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(logdir))
    accumulator.Reload()
    return set(accumulator.Tags()["tensors"]) | set(accumulator.Tags()["scalars"])


@pytest.mark.slow
def test_run_solves_cartpole(cli, tmp_path):
    run, url = start_run(cli, tmp_path, "configs/cartpole_dqn_parallel.py")
    assert run.wait(300) == 0, run.output()[-3000:]
    assert re.search(r"^solved: eval return \d+\.\d >= stop value 195", run.output(), re.M)


@pytest.mark.slow
def test_cartpole_solves_despite_a_killed_collector(cli, tmp_path):
    run, url = start_run(cli, tmp_path, "configs/cartpole_dqn_parallel.py", "--collectors", "3")
    busy = eventually(lambda: busy_collectors(url, 3), timeout=60, message="three busy collectors")
    victim = busy[0]
    assert victim["pid"] in worker_pids(run.pid) and role_of(victim["pid"]) == "collector"
    os.kill(victim["pid"], signal.SIGKILL)
    assert run.wait(300) == 0, run.output()[-3000:]
    assert re.search(r"^solved: eval return", run.output(), re.M)
    # lost at once, not when its lease runs out: the launcher sees its child die (or it refuses a task first)
    assert re.search(rf"{victim['worker_id']} at \S+ lost \((process exited with code -9|refused task)", run.output())


def test_ctrl_c_leaves_no_process_behind(cli, tmp_path, toy_config):
    run, url = start_run(cli, tmp_path, toy_config, "--set", "env.stop_value=1000", "--collectors", "2")
    eventually(lambda: busy_collectors(url, 2), timeout=60, message="two busy collectors")
    children = worker_pids(run.pid)
    assert sorted(role_of(pid) for pid in children) == ["collector", "collector", "learner"]
    # once training runs, the learner has the last CPU to itself; the others share the rest
    run.wait_line(r"launcher: training runs: the learner pinned to CPUs")
    cpus = sorted(os.sched_getaffinity(0))
    for pid in children + [run.pid]:
        expected = cpus[-1:] if role_of(pid) == "learner" else cpus[:-1]
        assert sorted(os.sched_getaffinity(pid)) == expected, f"{role_of(pid) or 'launcher'} pinned to {expected}"
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) == 130
    assert "interrupted (SIGINT)" in run.output()
    assert not [pid for pid in children if alive(pid)]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="CPU placement needs 2 CPUs")
def test_busy_collectors_may_use_every_cpu(cli, tmp_path, toy_config):
    # no replay ratio and a latency-bound env: the collectors never wait for the learner, they wait for their
    # envs; confined to the learner's leftover CPUs they would collect less
    run, url = start_run(
        cli,
        tmp_path,
        toy_config,
        "--set",
        "env.stop_value=1000",
        "--set",
        "parallel.commander.max_env_steps_per_update=0",
        "--set",
        "env.step_latency_ms=2",
    )
    run.wait_line(r"launcher: the collectors wait \d+% of their time: every process on CPUs", timeout=90)
    cpus = sorted(os.sched_getaffinity(0))
    pids = worker_pids(run.pid)
    assert sorted(role_of(pid) for pid in pids) == ["collector", "collector", "learner"]
    for pid in pids + [run.pid]:
        assert sorted(os.sched_getaffinity(pid)) == cpus, f"{role_of(pid) or 'launcher'} may use every CPU"


def learner_pid(run) -> int:
    return next(pid for pid in worker_pids(run.pid) if role_of(pid) == "learner")


def test_dead_learner_is_restarted_and_resumes(cli, tmp_path, toy_config):
    run, url = start_run(cli, tmp_path, toy_config, "--set", "env.stop_value=1000")
    # a learner state is saved every 20 iterations: wait for one
    eventually(lambda: get(url, "/cluster")["train_iter"] > 45, timeout=60, message="training")
    old = learner_pid(run)
    os.kill(old, signal.SIGKILL)
    learner = eventually(
        lambda: [
            w for w in get(url, "/learners")["learners"] if w["worker_id"] == "learner-2" and w["state"] == "busy"
        ],
        timeout=60,
        message="a restarted learner at work",
    )[0]
    assert learner["pid"] != old and learner["pid"] in worker_pids(run.pid)
    states = {w["worker_id"]: w["state"] for w in get(url, "/learners")["learners"]}
    assert states["learner-1"] == "lost"
    task = next(t for t in get(url, "/tasks?kind=learner")["tasks"] if t["worker_id"] == "learner-2")
    assert task["spec"]["resume"] is True and task["replaces"]
    # it resumed from a saved learner state (not from iteration 0) and trains on
    resumed = int(run.wait_line(r"resumed from learner state (\d+)", timeout=30).group(1))
    assert resumed >= 20
    before = get(url, "/cluster")["train_iter"]
    eventually(lambda: get(url, "/cluster")["train_iter"] > before + 20, timeout=30, message="training continues")
    # one name per process: the launcher's prefix is the worker id the REST API shows
    output = run.output()
    assert re.search(r"^\[learner-2\] .*connected as learner-2 ", output, re.M), output[-3000:]
    assert re.search(r"^\[collector-1\] .*connected as collector-1 ", output, re.M), output[-3000:]
    assert "restarting a learner" in output
    children = worker_pids(run.pid)
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) == 130
    assert not [pid for pid in children if alive(pid)]


def test_learner_dying_past_its_restart_budget_fails_the_run(cli, tmp_path, toy_config):
    run, url = start_run(
        cli, tmp_path, toy_config, "--set", "env.stop_value=1000", "--set", "parallel.supervisor.max_restarts=0"
    )
    eventually(
        lambda: [w for w in get(url, "/learners")["learners"] if w["state"] == "busy"],
        timeout=60,
        message="busy learner",
    )
    children = worker_pids(run.pid)
    os.kill(learner_pid(run), signal.SIGKILL)
    assert run.wait(30) == 1
    assert re.search(
        r"failed: learner kept dying: learner-1 exited with code -9 after 0 restart\(s\) "
        r"\(parallel.supervisor.max_restarts=0\)",
        run.output(),
    ), run.output()[-2000:]
    assert not [pid for pid in children if alive(pid)]


def test_killed_collector_is_reaped_and_its_task_replaced(cli, tmp_path, toy_config):
    run, url = start_run(cli, tmp_path, toy_config, "--set", "env.stop_value=1000", "--collectors", "2")
    busy = eventually(lambda: busy_collectors(url, 2), timeout=60, message="two busy collectors")
    victim = busy[0]
    os.kill(victim["pid"], signal.SIGKILL)
    lost = eventually(
        lambda: [w for w in get(url, "/collectors")["collectors"] if w["state"] == "lost"],
        timeout=5,
        message="collector marked lost",
    )[0]
    assert lost["worker_id"] == victim["worker_id"]
    # lost at once, not when its lease runs out: the launcher sees its child die (or it refuses a task first)
    failed = eventually(
        lambda: [
            t for t in get(url, "/tasks?kind=collector&state=failed")["tasks"] if t["worker_id"] == lost["worker_id"]
        ],
        timeout=5,
        message="failed task",
    )
    assert len(failed) == 1 and re.search(r"lost: (process exited with code -9|refused task)", failed[0]["error"])
    # the replacement goes to the survivor or to the collector the launcher started in the dead one's place
    replacement = eventually(
        lambda: [
            t
            for t in get(url, "/tasks?kind=collector")["tasks"]
            if t["replaces"] == failed[0]["task_id"] and t["worker_id"] and t["worker_id"] != lost["worker_id"]
        ],
        timeout=20,
        message="replacement task on another collector",
    )[0]
    assert replacement["attempts"] >= 1
    # nothing it wrote was dropped: every transition pushed is still in the buffer
    buffer = get(url, "/buffers")["buffers"][0]
    assert buffer["evicted"] == 0 and buffer["size"] == buffer["pushed"] > 0
    # training goes on
    before = get(url, "/cluster")["train_iter"]
    eventually(lambda: get(url, "/cluster")["train_iter"] > before + 20, timeout=30, message="training continues")
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(30) == 130


def test_a_launcher_that_cannot_start_its_workers_closes_its_server_and_raises(tmp_path, monkeypatch, toy_config):
    """Starting the first worker fails (here: the working directory is gone, so multiprocessing cannot prepare the
    child): the error reaches the caller, and the REST server, the fork server and the run's lock are let go, so
    the process can exit (it once hung in interpreter shutdown on the server's threads)."""
    import requests
    from parallel_rl.config import compile_config, load_config_file
    from parallel_rl.entry.launcher import LocalCluster

    cfg = compile_config({**load_config_file(toy_config), "exp_name": str(tmp_path / "exp")})
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    cluster = LocalCluster(cfg, 1, "127.0.0.1", 0, str(tmp_path / "shared"), toy_config, [], None)
    url = cluster.url
    with pytest.raises(FileNotFoundError):
        cluster.run()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/api/v1/cluster", timeout=2)
    monkeypatch.chdir(tmp_path)
    LocalCluster(cfg, 1, "127.0.0.1", 0, str(tmp_path / "shared"), toy_config, [], None).shutdown(grace=0)


def test_a_stopping_run_waits_for_a_learner_as_long_as_its_updates_take():
    """A learner in a long update (an on-policy version's epochs on a big network: ~10 s for Pong PPO on a CPU)
    finishes it and saves its state before the run terminates it; a quick learner keeps the plain grace, and a
    learner whose update never ends is terminated after MAX_LEARNER_GRACE."""
    from parallel_rl.entry.launcher import MAX_LEARNER_GRACE, learner_stop_grace

    assert learner_stop_grace(5.0, 0.0) == learner_stop_grace(5.0, 0.02) == 5.0
    assert learner_stop_grace(5.0, 10.0) == 16.0
    assert learner_stop_grace(5.0, 3600.0) == MAX_LEARNER_GRACE
    assert learner_stop_grace(0.0, 0.0) == 1.0


def test_a_role_s_first_restart_is_immediate_and_later_ones_back_off():
    """A one-off death (a collector killed by hand) is restarted at once; a role that keeps dying waits
    ``backoff`` before its second restart, doubled per restart after it, at most ``max_backoff``."""
    from parallel_rl.entry.launcher import restart_delay

    assert [restart_delay(n, 0.25, 10.0) for n in range(5)] == [0.0, 0.25, 0.5, 1.0, 2.0]
    assert restart_delay(9, 0.25, 10.0) == 10.0
