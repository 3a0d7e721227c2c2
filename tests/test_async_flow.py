"""The asynchronous on-policy flow (``policy.flow="async"``): collectors never wait for a policy version, only
for room in the learner's bounded queue (``parallel.commander.rollout_queue_batches``); the learner gets the
oldest queued rows within ``max_staleness`` versions, each row once; older rows are dropped and counted. PPO
runs on it here (the V-trace policies pick it by default)."""

import signal
import threading
import time

import numpy as np
import pytest

from parallel_rl.config import compile_config, load_config_file
from parallel_rl.data import RolloutReplayBuffer
from parallel_rl.data.flows import ASYNC, SEGMENTS, flow_of
from parallel_rl.errors import ConfigError, ProtocolViolation
from parallel_rl.protocol import SampleRequest
from tests.support import eventually, get
from tests.test_coordinator import TOKEN, slaves  # noqa: F401  (fixture)


def rows(n, version, first=0):
    return {
        "chunk": np.full(n, 7, np.int64),
        "row": np.arange(first, first + n, dtype=np.int32),
        "collect_iter": np.full(n, version, np.int64),
    }


def adds_up(buffer):
    """Every row pushed was handed to the learner, dropped as stale, quarantined, or is still waiting; and every
    hand-out removed its row (a row handed out twice would count twice in ``sampled``, once in ``evicted``)."""
    gone = buffer["sampled"] + buffer["dropped_stale"] + buffer["rows_quarantined"]
    return buffer["evicted"] == gone and buffer["pushed"] == gone + buffer["size"]


# ---- the buffer and the config -------------------------------------------------------------------------------
def test_rollout_buffer_hands_out_the_oldest_fresh_rows_once_and_counts_what_it_drops():
    evicted = []
    buffer = RolloutReplayBuffer(
        {"replay_buffer_size": 16, "max_staleness": 2}, on_evict=lambda r: evicted.append(r["row"].tolist())
    )
    buffer.push(rows(4, version=0))
    buffer.push(rows(4, version=1, first=10))
    buffer.push(rows(4, version=2, first=20))
    assert buffer.fresh_count(3) == 8 and buffer.sample(9, cur_learner_iter=3) is None  # too few fresh rows
    assert evicted == [[0, 1, 2, 3]] and buffer.stats().dropped_stale == 4  # version 0 is 3 behind iteration 3
    batch = buffer.sample(6, cur_learner_iter=3)
    assert batch["row"].tolist() == [10, 11, 12, 13, 20, 21]  # the oldest 6 (a queue), in push order
    assert buffer.sample(2, cur_learner_iter=3)["row"].tolist() == [22, 23]  # each row once (max_use 1)
    assert buffer.sample(1, cur_learner_iter=3) is None and buffer.count() == 0
    # collectors outpacing the learner: a full buffer pushes out its oldest unused rows, counted stale too
    buffer.push(rows(12, version=3, first=100))
    buffer.push(rows(8, version=3, first=200))
    stats = buffer.stats()
    assert (stats.size, stats.dropped_stale, stats.pushed) == (16, 8, 32)
    assert stats.pushed == stats.sampled + stats.dropped_stale + stats.size
    state = buffer.state_dict()
    again = RolloutReplayBuffer({"replay_buffer_size": 16, "max_staleness": 2})
    again.load_state_dict(state)
    assert again.stats() == stats
    with pytest.raises(ConfigError, match=r"needs max_use in \[1, 1\], got policy.other.replay_buffer.max_use=2"):
        RolloutReplayBuffer({"max_use": 2})


def test_the_flow_key_picks_the_asynchronous_flow_for_an_on_policy_type():
    cfg = compile_config({"policy": {"type": "ppo", "flow": "async"}})
    assert flow_of(cfg.policy) is ASYNC and cfg.policy.other.replay_buffer.type == "rollout"
    assert cfg.policy.other.replay_buffer.max_staleness == 8 and cfg.policy.other.replay_buffer.max_use == 1
    assert flow_of(compile_config({"policy": {"type": "ppo"}}).policy) is SEGMENTS
    with pytest.raises(
        ConfigError,
        match=r"policy.flow must be 'segments' or 'async' for the on-policy 'ppo', "
        r"got 'asnyc'",
    ):
        compile_config({"policy": {"type": "ppo", "flow": "asnyc"}})
    with pytest.raises(
        ConfigError,
        match=r"type='segment' does not fit the on-policy 'ppo' \(policy.flow='async'\): "
        r"use rollout",
    ):
        compile_config({"policy": {"type": "ppo", "flow": "async", "other": {"replay_buffer": {"type": "segment"}}}})
    with pytest.raises(ConfigError, match="unknown config key 'policy.flow'"):
        compile_config({"policy": {"type": "dqn", "flow": "async"}})  # replay has one flow
    with pytest.raises(ConfigError, match="policy.nstep must be 1"):
        compile_config({"policy": {"type": "ppo", "flow": "async", "nstep": 3}})
    assert cfg.parallel.commander.rollout_queue_batches == 3
    with pytest.raises(
        ConfigError,
        match=r"rollout_queue_batches must be a whole number of learner batches >= 0 "
        r"\(3: .*got -1",
    ):
        compile_config(
            {"policy": {"type": "ppo", "flow": "async"}, "parallel": {"commander": {"rollout_queue_batches": -1}}}
        )
    with pytest.raises(ConfigError, match="world_size=2 needs an off-policy algorithm"):
        compile_config({"policy": {"type": "ppo", "flow": "async"}, "parallel": {"learner": {"world_size": 2}}})


def test_ppo_follows_its_flow_key_and_trains_serially_on_what_it_collected(tmp_path):
    from parallel_rl.entry.serial import serial_pipeline
    from parallel_rl.policy import create_policy

    cfg = compile_config({"exp_name": str(tmp_path / "exp"), "policy": {"type": "ppo", "flow": "async"}})
    assert create_policy(cfg.policy, 4, 2).flow is ASYNC
    assert create_policy(compile_config({"policy": {"type": "ppo"}}).policy, 4, 2).flow is SEGMENTS
    user = load_config_file("configs/cartpole_ppo.py")
    user.update(exp_name=str(tmp_path / "serial"), serial={"max_train_iter": 2}, system={"tensorboard": False})
    user["policy"].update(flow="async", collect={"n_sample": 64}, learn={**user["policy"]["learn"], "batch_size": 32})
    result = serial_pipeline(compile_config(user))
    assert result.train_iter == 2 and result.env_steps >= 128  # one update per n_sample collected, as segments


def test_a_sample_request_says_how_many_batches_the_learner_holds():
    body = {"worker_id": "learner-1", "batch_size": 8}
    assert SampleRequest.from_json(body).ahead == 0  # a learner from before the field
    assert SampleRequest.from_json({**body, "ahead": 2}).ahead == 2
    with pytest.raises(ProtocolViolation, match="'ahead' must be in"):
        SampleRequest.from_json({**body, "ahead": -1})


# ---- the coordinator's side, over HTTP -----------------------------------------------------------------------
def async_toy_config(tmp_path, **replay_buffer):
    return compile_config(
        {
            "exp_name": str(tmp_path / "exp"),
            "env": {"env_id": "parallel_rl/Counting-v0", "env_kwargs": {"episode_length": 5}, "collector_env_num": 2},
            "policy": {
                "type": "ppo",
                "flow": "async",
                "model": {"hidden_size_list": [16]},
                "other": {"replay_buffer": {"replay_buffer_size": 64, **replay_buffer}},
            },
            "parallel": {
                "coordinator": {"heartbeat_ttl": 2.0, "chunk_grace_seconds": 0.0, "long_poll_slots": 8},
                "worker": {"heartbeat_interval": 0.2, "request_timeout": 2.0, "max_retries": 1},
                "commander": {"collector_task_env_steps": 64},
                "collector": {"chunk_size": 16},
            },
        }
    )


def test_rows_older_than_max_staleness_are_never_handed_to_the_learner(
    coordinator_factory,
    slaves,  # noqa: F811
    tmp_path,
):
    """Chunks of policy versions 0..5 (4 rows each, their obs say the version); the learner at iteration 5,
    holding one batch untrained (``ahead`` 1), trains the next one at 6: only versions 4 and 5 are within
    max_staleness=2, oldest first; versions 0..3 are dropped and counted, and no row is handed out twice."""
    coordinator, server = coordinator_factory(cfg=async_toy_config(tmp_path, max_staleness=2), token=TOKEN)
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(10)
    learner = slaves("learner", server.url, run=False)
    for version in range(6):
        learner.announce_policy(version)
        collector.write_chunk(collector.received[0].task_id, f"v{version}", n=4, version=version, first=100 * version)
    eventually(lambda: get(server.url + "/api/v1", "/buffers")["buffers"][0]["pushed"] == 24, message="24 rows")

    def sample(train_iter, ahead, batch_size=4):
        answer = learner.coordinator.post(
            "/api/v1/buffers/default/sample",
            {
                "worker_id": learner.worker_id,
                "batch_size": batch_size,
                "batches": 4,
                "train_iter": train_iter,
                "ahead": ahead,
                "wait": 0.0,
            },
        )
        return [[answer["chunks"][i] for i in b["chunk"]] for b in answer["batches"]], answer["batches"]

    chunks, batches = sample(5, 1)
    assert chunks == [["v4"] * 4]  # one batch whatever `batches` asks, the oldest fresh rows
    assert sample(5, 1, batch_size=8)[0] == []  # 4 fresh rows left (version 5), too few for 8
    chunks, more = sample(5, 1)
    assert chunks == [["v5"] * 4]
    assert sample(3, 0)[0] == []  # versions 1..3 would be fresh at iteration 3, but they were dropped at 6
    uids = [u for b in batches + more for u in b["uid"]]
    assert len(uids) == len(set(uids)) == 8
    buffer = get(server.url + "/api/v1", "/buffers")["buffers"][0]
    assert (buffer["type"], buffer["sampled"], buffer["dropped_stale"], buffer["size"]) == ("rollout", 8, 16, 0)
    assert adds_up(buffer)
    assert buffer["staleness"] == 1.5  # both batches trained at iteration 6: version 5 one behind, version 4 two


def test_collectors_share_the_room_in_the_learners_queue_and_wait_for_room_not_for_versions(
    coordinator_factory, slaves, tmp_path
):  # noqa: F811
    """The queue holds rollout_queue_batches (2) * n_sample (8) = 16 rows: each collector's allowance is its share
    of the room (rounded up to whole vector steps of 2 envs), computed from the rows queued, so a collector that
    leaves holds none back. A throttled collector is not woken by a new version, only by room: the learner
    taking batches."""
    cfg = async_toy_config(tmp_path)
    cfg.policy.collect.n_sample = 8
    cfg.parallel.commander.rollout_queue_batches = 2
    coordinator, server = coordinator_factory(cfg=cfg, token=TOKEN)
    a = slaves("collector", server.url)
    assert a.got_task.wait(10)
    learner = slaves("learner", server.url, run=False)
    learner.announce_policy(0)

    def room(slave, **body):
        control = slave.coordinator.post(
            f"/api/v1/workers/{slave.worker_id}/metadata", {"messages": [], **body}, timeout=12
        )["control"]
        return control["allowed_env_steps"] - control["env_steps"]

    assert room(a) == 16  # alone: the whole queue
    b = slaves("collector", server.url)
    assert b.got_task.wait(10)
    assert room(a) == room(b) == 8  # two: half each
    a.write_chunk(a.received[0].task_id, "a-1", n=11)
    assert room(a) == 4  # 5 rows of room: 2.5 each, rounded up to a vector step
    b.write_chunk(b.received[0].task_id, "b-1", n=5)
    assert room(a) == room(b) == 0
    result = {}

    def wait():
        started = time.monotonic()
        result["room"] = room(a, wait_for_allowance=8.0, loaded_version=0)
        result["waited"] = time.monotonic() - started

    waiter = threading.Thread(target=wait)
    waiter.start()
    learner.announce_policy(1)  # no room yet: the waiter waits on

    def take(train_iter):
        answer = learner.coordinator.post(
            "/api/v1/buffers/default/sample",
            {
                "worker_id": learner.worker_id,
                "batch_size": 8,
                "batches": 1,
                "train_iter": train_iter,
                "ahead": 1,
                "wait": 0.0,
            },
        )
        return sum(len(batch["uid"]) for batch in answer["batches"])

    assert take(0) == 8  # 8 rows of room: one batch still queued, the learner is not short of data
    assert take(1) == 8  # 16: the waiter wakes
    waiter.join(10)
    assert result["room"] == 8 and result["waited"] < 4.0  # woken by the room, not by version 1 or the 8 s timeout
    for ev in b.finish.values():  # its scripted task ends, then it leaves
        ev.set()
    b.close()
    eventually(lambda: room(a) == 16, message="the collector that left holding no room back")


# ---- real clusters on CartPole ---------------------------------------------------------------------------------
CAPACITY = 1024


def cartpole_async_config(tmp_path, heartbeat_ttl=10.0, **commander):
    """PPO on CartPole with the async flow, light updates (2 epochs over 256 rows), a small rollout buffer."""
    user = load_config_file("configs/cartpole_ppo_async_parallel.py")
    user["exp_name"] = str(tmp_path / "exp")
    user["env"]["stop_value"] = 10_000  # never solved: the budget ends it
    user["policy"]["collect"] = {"n_sample": 256}
    user["policy"]["learn"].update(epoch_per_collect=2)
    user["policy"].setdefault("other", {}).setdefault("replay_buffer", {})["replay_buffer_size"] = CAPACITY
    user["parallel"]["commander"].update(eval_freq=100_000, **commander)
    user["parallel"]["coordinator"] = {"heartbeat_ttl": heartbeat_ttl, "chunk_grace_seconds": 1.0}
    user["parallel"]["worker"] = {"heartbeat_interval": 0.2}
    user["system"] = {"tensorboard": False}
    return compile_config(user)


def start_cluster(coordinator_factory, cli, tmp_path, cfg, collectors=("collector-a", "collector-b")):
    coordinator, server = coordinator_factory(cfg=cfg, token=TOKEN)
    shared = str(tmp_path / "shared")
    procs = [
        cli(name, "collector", "--coordinator", server.url, "--shared-dir", shared, env={"PARALLEL_RL_TOKEN": TOKEN})
        for name in collectors
    ]
    return coordinator, server, shared, procs


def heartbeats(api, kind, count):
    """Wait until every active worker of ``kind`` has been heard from ``count`` more times: a window of real
    events (each collector's heartbeats and requests), not a sleep."""
    last, heard = {}, {}

    def heard_enough():
        for w in get(api, "/workers")["workers"]:
            if w["kind"] == kind and w["state"] in ("idle", "busy"):
                since = w["seconds_since_heartbeat"]
                heard[w["worker_id"]] = heard.get(w["worker_id"], 0) + (since < last.get(w["worker_id"], since))
                last[w["worker_id"]] = since
        return heard and min(heard.values()) >= count

    eventually(heard_enough, timeout=30, message=f"{count} heartbeats of every {kind}")


@pytest.mark.slow
def test_collectors_wait_for_room_while_the_learner_is_paused_and_nearly_nothing_is_dropped(
    coordinator_factory, cli, tmp_path
):
    """Two collectors and a learner at the default queue (3 batches of 256 rows): while the learner is stopped
    (SIGSTOP) the collectors fill the queue and then wait for room (without the bound they outran it and most
    rows aged out unused): rows pushed stay within those handed to the learner (or dropped) + the queue + one
    collect call per collector. The learner then trains on to its budget, the collectors never waiting for a
    version; at most 5 % of the rows are dropped as stale, and pushed = trained + dropped + still waiting."""
    cfg = cartpole_async_config(tmp_path, max_train_iter=8)
    # the learner stays stopped longer than the 1 s (cartpole_async_config) a handed-out chunk's file is kept:
    # deleted then, the rows the stopped learner held would come back damaged, quarantined (not this test's point)
    cfg.parallel.coordinator.chunk_grace_seconds = 300.0
    queue = cfg.parallel.commander.rollout_queue_batches * 256
    coordinator, server, shared, procs = start_cluster(coordinator_factory, cli, tmp_path, cfg)
    api = server.url + "/api/v1"
    learner = cli(
        "learner", "learner", "--coordinator", server.url, "--shared-dir", shared, env={"PARALLEL_RL_TOKEN": TOKEN}
    )
    eventually(lambda: get(api, "/cluster")["train_iter"] >= 2, timeout=90, message="the learner trained twice")
    learner.proc.send_signal(signal.SIGSTOP)
    before = get(api, "/buffers")["buffers"][0]

    def within_bound(dropped=None):
        """Rows pushed <= rows gone from the queue (handed out, quarantined, dropped: ``dropped`` of them, all
        of them by default) + the queue + one collect call (n_sample rows) per collector."""
        buffer = get(api, "/buffers")["buffers"][0]
        dropped = buffer["dropped_stale"] if dropped is None else dropped
        gone = buffer["sampled"] + buffer["rows_quarantined"] + dropped
        assert buffer["pushed"] <= gone + queue + len(procs) * 256, buffer
        return buffer

    try:
        # no version comes out while the learner is stopped, so no row ages: none may be dropped meanwhile
        eventually(
            lambda: within_bound(before["dropped_stale"])["size"] >= queue,
            timeout=60,
            message="the collectors filling the queue",
        )
        heartbeats(api, "collector", 10)  # the collectors, throttled, stay within the bound meanwhile
        within_bound(before["dropped_stale"])
    finally:
        learner.proc.send_signal(signal.SIGCONT)

    def learner_result():
        tasks = get(api, "/tasks?kind=learner")["tasks"]
        return next((t["result"] for t in tasks if t["state"] in ("finished", "cancelled") and t["result"]), None)

    result = eventually(learner_result, timeout=120, message="the learner's task ended at the budget")
    assert result["train_iter"] >= 8 and result["rollouts"] == result["updates"] == result["train_iter"]
    assert 1 <= result["rollout_staleness_max"] <= cfg.policy.other.replay_buffer.max_staleness
    assert result["rollout_rows_total"] == 256 * result["rollouts"]
    buffer = within_bound()
    assert buffer["type"] == "rollout" and adds_up(buffer), buffer
    assert buffer["dropped_stale"] <= 0.05 * buffer["pushed"], buffer
    # handed out in whole batches: those trained on, and at most the one the learner held when it stopped
    assert buffer["sampled"] % 256 == 0 and 0 <= buffer["sampled"] - result["rollout_rows_total"] <= 2 * 256
    assert 0 < buffer["staleness"] <= cfg.policy.other.replay_buffer.max_staleness


def recording_learner(url):
    """The real learner shell (in this process), keeping what it trained on: per batch the iteration it trained
    it at, its rows' buffer uids and their policy versions."""
    from parallel_rl.learner.shell import LearnerSlave

    class RecordingLearner(LearnerSlave):
        def train_step(self, learner, batch):
            self.batches.append((learner.train_iter, batch["uid"].copy(), batch["collect_iter"].copy()))
            super().train_step(learner, batch)

    learner = RecordingLearner(url, token=TOKEN, worker_id="learner-b")
    learner.batches = []
    return learner


@pytest.mark.slow
def test_a_killed_collector_and_a_restarted_learner_train_nothing_twice_or_stale(coordinator_factory, cli, tmp_path):
    """A collector killed mid-rollout and the learner killed (SIGKILL): the other collector collects on with the
    version it has until the learner's queue is full (the dead collector holds no room back); a new learner
    takes over at the newest version (not from 0) and trains on rows within max_staleness only, none twice,
    more of them than the queue holds (the survivor collects on as room frees); the coordinator handed every
    row out at most once (the dead learner's batches are gone with it), and every row pushed is accounted for."""
    cfg = cartpole_async_config(tmp_path, heartbeat_ttl=3.0)  # the dead learner's task is given to the next soon
    coordinator, server, shared, (doomed, _) = start_cluster(coordinator_factory, cli, tmp_path, cfg)
    api = server.url + "/api/v1"
    first = cli(
        "learner-a", "learner", "--coordinator", server.url, "--shared-dir", shared, env={"PARALLEL_RL_TOKEN": TOKEN}
    )
    eventually(lambda: get(api, "/cluster")["train_iter"] >= 3, timeout=90, message="the first learner trained")
    doomed.proc.send_signal(signal.SIGKILL)  # it collects all the time: mid-rollout
    first.proc.send_signal(signal.SIGKILL)
    first.wait(10)
    killed_at = get(api, "/cluster")
    queue = cfg.parallel.commander.rollout_queue_batches * 256
    eventually(
        lambda: get(api, "/buffers")["buffers"][0]["size"] >= queue,
        timeout=60,
        message="the surviving collector filling the queue without a learner",
    )
    handed_before = get(api, "/buffers")["buffers"][0]["sampled"]

    learner = recording_learner(server.url)
    learner.start()
    threading.Thread(target=learner.run, daemon=True).start()
    try:
        # 4 batches are more than the queue held: the survivor collected on as the new learner made room
        eventually(lambda: len(learner.batches) >= 4, timeout=90, message="the new learner trained 4 batches")
        buffer = get(api, "/buffers")["buffers"][0]
    finally:
        learner.request_stop()
        learner.close()
    trained_at = [at for at, _, _ in learner.batches]
    assert trained_at[0] >= killed_at["train_iter"]  # resumed at the newest version, not from 0
    assert trained_at == list(range(trained_at[0], trained_at[0] + len(trained_at)))
    for at, _, versions in learner.batches:
        assert 0 <= at - versions.min() <= cfg.policy.other.replay_buffer.max_staleness
    uids = np.concatenate([u for _, u, _ in learner.batches])
    assert len(np.unique(uids)) == len(uids)  # nothing trained twice
    # what the new learner got was handed out after the dead one's batches, each row once
    assert adds_up(buffer), buffer
    assert buffer["sampled"] - handed_before >= len(uids)
