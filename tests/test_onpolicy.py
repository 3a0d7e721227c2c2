"""On-policy data in the cluster (PPO): whole segments of the current policy version, used once, dropped."""

import re

import numpy as np
import pytest
import requests

from parallel_rl.config import compile_config, load_config_file
from parallel_rl.data import SegmentReplayBuffer
from parallel_rl.errors import ConfigError
from tests.support import eventually

TOKEN = "test-token"


def rows(n, version, first=0):
    return {
        "chunk": np.full(n, 7, np.int64),
        "row": np.arange(first, first + n, dtype=np.int32),
        "collect_iter": np.full(n, version, np.int64),
    }


def test_segment_buffer_hands_out_fresh_rows_once_and_drops_stale_ones():
    evicted = []
    buffer = SegmentReplayBuffer({"replay_buffer_size": 64}, on_evict=lambda r: evicted.append(r["row"].tolist()))
    buffer.push(rows(4, version=0))
    buffer.push(rows(6, version=1, first=10))
    assert buffer.fresh_count(1) == 6 and buffer.sample(8, cur_learner_iter=1) is None  # too few rows of version 1
    assert evicted == [[0, 1, 2, 3]]  # version 0 is older than max_staleness=0 at iteration 1: dropped unused
    buffer.push(rows(3, version=1, first=20))
    segment = buffer.sample(8, cur_learner_iter=1)
    assert segment["row"].tolist() == [10, 11, 12, 13, 14, 15, 20, 21, 22]  # every fresh row, in push order
    assert buffer.count() == 0 and buffer.sample(1, cur_learner_iter=1) is None  # max_use=1: used, then dropped
    stale = SegmentReplayBuffer({"replay_buffer_size": 64, "max_staleness": 1, "max_use": 2})
    stale.push(rows(4, version=3))
    assert stale.sample(4, cur_learner_iter=4)["collect_iter"].tolist() == [3] * 4
    assert stale.sample(4, cur_learner_iter=5) is None and stale.count() == 0  # two versions old now


def test_on_policy_types_get_a_segment_buffer_and_refuse_a_replay_buffer():
    ppo = compile_config({"policy": {"type": "ppo"}})
    assert ppo.policy.other.replay_buffer.type == "segment" and ppo.policy.other.replay_buffer.max_staleness == 0
    assert compile_config({}).policy.other.replay_buffer.type == "advanced"
    with pytest.raises(ConfigError, match=r"replay_buffer.type='advanced' does not fit the on-policy 'ppo'"):
        compile_config({"policy": {"type": "ppo", "other": {"replay_buffer": {"type": "advanced"}}}})
    with pytest.raises(ConfigError, match=r"replay_buffer.type='segment' does not fit the off-policy 'dqn'"):
        compile_config({"policy": {"other": {"replay_buffer": {"type": "segment"}}}})


def ppo_cluster_config(tmp_path, **overrides):
    user = load_config_file("configs/cartpole_ppo_parallel.py")
    user["exp_name"] = str(tmp_path / "exp")
    user["env"]["stop_value"] = 10_000  # never solved: the budget ends it
    user["parallel"]["commander"].update(max_train_iter=12, eval_freq=1000)
    user["parallel"]["coordinator"] = {"heartbeat_ttl": 5.0}
    user["parallel"]["worker"] = {"heartbeat_interval": 0.2}
    user["system"] = {"tensorboard": False}
    for key, value in overrides.items():
        user["policy"][key] = value
    return compile_config(user)


def test_cluster_ppo_learner_trains_only_on_current_segments(coordinator_factory, cli, tmp_path):
    cfg = ppo_cluster_config(tmp_path)
    coordinator, server = coordinator_factory(cfg=cfg, token=TOKEN)
    api = server.url + "/api/v1"
    shared = str(tmp_path / "shared")
    env = {"PARALLEL_RL_TOKEN": TOKEN}
    for name in ("collector-a", "collector-b"):
        cli(name, "collector", "--coordinator", server.url, "--shared-dir", shared, env=env)
    # both collectors split the first segment too (one alone would be given all of it)
    eventually(
        lambda: len(requests.get(api + "/collectors", timeout=5).json()["collectors"]) == 2,
        timeout=60,
        message="two collectors registered",
    )
    cli("learner", "learner", "--coordinator", server.url, "--shared-dir", shared, env=env)

    def learner_result():
        tasks = requests.get(api + "/tasks?kind=learner", timeout=5).json()["tasks"]
        return next((t for t in tasks if t["state"] in ("finished", "cancelled") and t["result"]), None)

    task = eventually(learner_result, timeout=120, message="the learner's task ended at the budget")
    result = task["result"]
    # what the learner reports about the data it trained on: one segment per iteration, none from an older
    # policy version than max_staleness (0) allows
    assert result["train_iter"] >= 12 and result["segments"] == result["updates"] == result["train_iter"]
    assert result["segment_staleness_max"] == 0
    info = requests.get(api + "/cluster", timeout=5).json()["learn_info"]
    assert info["segment_staleness_max"] == 0 and info["segments"] == result["segments"]
    assert info["epochs"] == cfg.policy.learn.epoch_per_collect
    assert info["segment_rows"] >= cfg.policy.collect.n_sample
    # each segment used once then dropped; the collectors paused instead of collecting data thrown away
    buffer = requests.get(api + "/buffers", timeout=5).json()["buffers"][0]
    assert buffer["type"] == "segment" and buffer["staleness"] == 0.0
    thrown_away = buffer["pushed"] - buffer["sampled"] - buffer["size"]
    assert thrown_away == 0


def test_a_collector_given_an_evaluation_leaves_its_share_of_the_segment_to_the_others(coordinator_factory, tmp_path):
    """Evaluations run on collectors and a collector collects nothing while it evaluates: its share of the
    segment goes to the others (the segment used to wait for it: seconds per evaluation of long episodes), for
    the rest of that policy version (the others were told to collect it); a collector left alone collects again
    once its evaluation ends (nobody else would)."""
    cfg = ppo_cluster_config(tmp_path)  # 512 env steps a segment, 8 envs a collector
    coordinator, _ = coordinator_factory(cfg=cfg)
    a, b = (coordinator.workers.register("collector", f"http://127.0.0.1:{port}", None) for port in (9, 10))
    allowed = lambda worker: coordinator.flow.control_for(worker)["segment_env_steps"]  # noqa: E731
    coordinator.policy_version = 0
    assert allowed(a) == allowed(b) == 256
    b.eval_task = "evaluator-000001"
    assert (allowed(a), allowed(b)) == (512, 0)
    b.eval_task = None  # its evaluation ended mid-version: a was told to collect all of it
    assert (allowed(a), allowed(b)) == (512, 0)
    coordinator.policy_version = 1
    assert allowed(a) == allowed(b) == 256
    for worker in (a, b):
        worker.eval_task = "evaluator-000002"
    assert allowed(a) == allowed(b) == 0  # both evaluate: the segment waits
    a.eval_task = None
    assert allowed(a) == 512  # a is back and alone: it collects the segment


@pytest.mark.slow
def test_run_solves_cartpole_with_ppo(cli, tmp_path):
    run = cli("run", "run", "-c", "configs/cartpole_ppo_parallel.py", "--set", f"exp_name={tmp_path / 'exp'}")
    assert run.wait(180) == 0, run.output()[-3000:]
    assert re.search(r"^solved: eval return \d+\.\d >= stop value 195", run.output(), re.M)


@pytest.mark.slow
def test_a_learner_taking_over_gets_fresh_segments(coordinator_factory, cli, tmp_path):
    import signal

    cfg = ppo_cluster_config(tmp_path)
    cfg.run.max_train_iter = 0
    coordinator, server = coordinator_factory(cfg=cfg, token=TOKEN)
    api = server.url + "/api/v1"
    shared = str(tmp_path / "shared")
    env = {"PARALLEL_RL_TOKEN": TOKEN}
    cli("collector", "collector", "--coordinator", server.url, "--shared-dir", shared, env=env)
    first = cli("learner-a", "learner", "--coordinator", server.url, "--shared-dir", shared, env=env)
    cluster = lambda: requests.get(api + "/cluster", timeout=5).json()  # noqa: E731
    eventually(lambda: cluster()["train_iter"] >= 3, timeout=90, message="the first learner trained")
    first.proc.send_signal(signal.SIGKILL)
    first.wait(10)
    killed_at = cluster()["train_iter"]
    cli("learner-b", "learner", "--coordinator", server.url, "--shared-dir", shared, env=env)
    # the new learner resumes at the newest version and gets segments of it, though the dead one took the last
    eventually(
        lambda: cluster()["learn_info"].get("segments", 0) >= 3 and cluster()["train_iter"] >= killed_at + 3,
        timeout=90,
        message="the second learner trained on three segments",
    )
    assert cluster()["learn_info"]["segment_staleness_max"] == 0


def test_env_lanes_run_on_across_a_collectors_consecutive_chunks():
    """Two envs of collector ``ca`` over chunks 1, 2 (consecutive: one lane per env) and 4 (after a gap: new
    lanes), collector ``cb``'s chunk 1 (its own lanes), a chunk named otherwise (its own); rows handed over
    shuffled. Ordered by the time keys, each lane's rows come in step order."""
    from parallel_rl.learner.pipeline import collector_lanes
    from parallel_rl.policy.returns import gae_advantages

    chunks = ["ca-0000002", "cb-0000001", "ca-0000001", "other.npz", "ca-0000004"]
    # rows of a chunk: (step, env) in time-major order, 3 steps x 2 envs; step numbers global per collector
    first_step = {"ca-0000001": 0, "ca-0000002": 3, "ca-0000004": 9, "cb-0000001": 0, "other.npz": 0}
    chunk = np.repeat(np.arange(len(chunks)), 6)
    row = np.tile(np.arange(6), len(chunks))
    env_id = row % 2
    step = np.array([first_step[chunks[c]] for c in chunk]) + row // 2
    shuffle = np.random.default_rng(0).permutation(len(row))
    lane, time = collector_lanes(chunks, chunk[shuffle], row[shuffle], env_id[shuffle])
    # five lanes of two envs... ca's chunks 1+2 are one run, ca-4 another, cb-1 and other.npz one each
    groups = {}
    for c, e, l in zip(chunk[shuffle], env_id[shuffle], lane):
        groups.setdefault((chunks[c].rsplit("-", 1)[0], e, c == 4), set()).add(int(l))
    assert all(len(ids) == 1 for ids in groups.values()) and len({next(iter(v)) for v in groups.values()}) == 8
    order = np.argsort(time, kind="stable")
    for l in np.unique(lane):
        steps = step[shuffle][order][lane[order] == l]
        assert (np.diff(steps) == 1).all(), steps
    # GAE over the ordered rows: ca's env 0 lane carries chunk 2's advantages back into chunk 1 (reward only at
    # its last step, value 0): the first step's advantage is gamma^5 * 1
    reward = (step[shuffle] == 5).astype(np.float64) * (chunk[shuffle] == 0) * (env_id[shuffle] == 0)
    zeros = np.zeros(len(row))
    adv = gae_advantages(reward[order], zeros, zeros, zeros, zeros.astype(bool), lane[order], 0.9, 1.0)
    at = np.flatnonzero((chunk[shuffle][order] == 2) & (env_id[shuffle][order] == 0) & (step[shuffle][order] == 0))
    assert adv[at[0]] == pytest.approx(0.9**5)
