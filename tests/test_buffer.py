import threading

import numpy as np
import pytest

from parallel_rl.data import AdvancedReplayBuffer, EpisodeReplayBuffer, NaiveReplayBuffer, create_buffer
from parallel_rl.errors import ConfigError


def rows(start, n, collect_iter=0):
    return {
        "obs": np.arange(start, start + n, dtype=np.float32)[:, None].repeat(2, axis=1),
        "action": np.arange(start, start + n, dtype=np.int64),
        "collect_iter": np.full(n, collect_iter, dtype=np.int64),
    }


def draw(buf, size, times):
    """Concatenate ``times`` samples of ``size`` rows (columns stay aligned)."""
    samples = [buf.sample(size) for _ in range(times)]
    return {k: np.concatenate([smp[k] for smp in samples]) for k in samples[0]}


def test_naive_ring_overwrites_oldest_and_counts():
    evicted = []
    buf = NaiveReplayBuffer({"replay_buffer_size": 3}, on_evict=evicted.append)
    buf.push(rows(0, 2))
    buf.push(rows(2, 3))
    assert buf.count() == 3
    stats = buf.stats()
    assert (stats.pushed, stats.evicted, stats.capacity) == (5, 2, 3)
    np.testing.assert_array_equal(np.concatenate([e["action"] for e in evicted]), [0, 1])
    for _ in range(20):
        sample = buf.sample(3)
        assert set(sample["action"].tolist()) <= {2, 3, 4}
        np.testing.assert_array_equal(sample["obs"][:, 0], sample["action"])  # rows stay aligned
    assert buf.stats().sampled == 60


def test_sample_returns_none_until_enough_rows():
    buf = NaiveReplayBuffer({"replay_buffer_size": 10})
    assert buf.sample(1) is None
    buf.push(rows(0, 2))
    assert buf.sample(3) is None
    assert buf.sample(2) is not None


def test_push_validates_columns():
    buf = NaiveReplayBuffer({"replay_buffer_size": 10})
    buf.push(rows(0, 2))
    with pytest.raises(ValueError, match="columns"):
        buf.push({"obs": np.zeros((1, 2), np.float32)})
    with pytest.raises(ValueError, match="different lengths"):
        buf.push(
            {
                "obs": np.zeros((1, 2), np.float32),
                "action": np.zeros(2, np.int64),
                "collect_iter": np.zeros(1, np.int64),
            }
        )


def test_prioritized_sampling_follows_priorities():
    buf = AdvancedReplayBuffer({"replay_buffer_size": 8, "alpha": 1.0, "beta": 1.0})
    slots = buf.push(rows(0, 2))
    uid = buf.sample(2)["uid"]  # any sample to learn uids
    buf.update(
        {
            "index": slots,
            "uid": np.sort(uid) if len(set(uid)) == 2 else np.array([0, 1]),
            "priority": np.array([9.0, 1.0]),
        }
    )
    sample = draw(buf, 2, 500)
    share0 = np.mean(sample["action"] == 0)
    assert 0.85 < share0 < 0.95  # expected 0.9
    # IS weights: (p_i / p_min)^-beta
    w0 = sample["weight"][sample["action"] == 0][0]
    w1 = sample["weight"][sample["action"] == 1][0]
    assert w1 == pytest.approx(1.0) and w0 == pytest.approx(1 / 9, rel=1e-4)


def test_priority_update_for_overwritten_slot_is_ignored():
    buf = AdvancedReplayBuffer({"replay_buffer_size": 2, "alpha": 1.0})
    buf.push(rows(0, 2))
    old = buf.sample(2)
    buf.push(rows(2, 2))  # overwrites both slots
    buf.update({"index": old["index"], "uid": old["uid"], "priority": np.full(2, 1000.0)})
    sample = draw(buf, 2, 1000)
    share2 = np.mean(sample["action"] == 2)
    assert 0.4 < share2 < 0.6  # both rows still at equal (max) priority


def test_new_rows_get_max_priority():
    buf = AdvancedReplayBuffer({"replay_buffer_size": 4, "alpha": 1.0})
    buf.push(rows(0, 1))
    s = buf.sample(1)
    buf.update({"index": s["index"], "uid": s["uid"], "priority": np.array([5.0])})
    buf.push(rows(1, 1))
    sample = draw(buf, 2, 500)
    assert 0.4 < np.mean(sample["action"] == 1) < 0.6


def test_max_use_removes_rows():
    buf = AdvancedReplayBuffer({"replay_buffer_size": 10, "max_use": 1})
    buf.push(rows(0, 4))
    first = buf.sample(2)
    assert buf.count() == 4 - len(np.unique(first["index"]))
    assert buf.stats().evicted == len(np.unique(first["index"]))


def test_max_staleness_drops_old_rows():
    buf = AdvancedReplayBuffer({"replay_buffer_size": 10, "max_staleness": 5})
    buf.push(rows(0, 3, collect_iter=0))
    buf.push(rows(3, 1, collect_iter=8))
    assert buf.sample(1, cur_learner_iter=10)["action"][0] == 3
    assert buf.count() == 1
    assert buf.sample(2, cur_learner_iter=10) is None


def test_staleness_stat():
    buf = NaiveReplayBuffer({"replay_buffer_size": 10})
    buf.push(rows(0, 4, collect_iter=2))
    buf.sample(4, cur_learner_iter=7)
    assert buf.stats().mean_staleness == pytest.approx(5.0)


@pytest.mark.parametrize("kind", ["naive", "advanced"])
def test_state_round_trip(kind, tmp_path):
    buf = create_buffer({"type": kind, "replay_buffer_size": 5})
    buf.push(rows(0, 7))
    buf.sample(3)
    other = create_buffer({"type": kind, "replay_buffer_size": 5})
    other.load_state_dict(buf.state_dict())
    assert other.stats() == buf.stats()
    for key, value in buf.state_dict().items():
        np.testing.assert_array_equal(other.state_dict()[key], value)
    path = str(tmp_path / "buf.npz")
    buf.save_data(path)
    third = create_buffer({"type": kind, "replay_buffer_size": 5})
    third.load_data(path)
    assert third.stats() == buf.stats()
    assert set(third.sample(5)["action"].tolist()) <= {2, 3, 4, 5, 6}


def test_advanced_state_keeps_priorities():
    buf = AdvancedReplayBuffer({"replay_buffer_size": 4, "alpha": 1.0})
    buf.push(rows(0, 2))
    s = buf.sample(2)
    buf.update({"index": s["index"], "uid": s["uid"], "priority": np.where(s["action"] == 0, 99.0, 1.0)})
    other = AdvancedReplayBuffer({"replay_buffer_size": 4, "alpha": 1.0})
    other.load_state_dict(buf.state_dict())
    assert np.mean(np.concatenate([other.sample(2)["action"] for _ in range(250)]) == 0) > 0.9


def test_priorities_kept_by_pushes_evictions_and_updates_equal_those_rebuilt_from_a_saved_state():
    """The sum tree is updated in place on every push, eviction and priority update (runs of slots and
    scattered ones, wrapping around the ring); a buffer loaded from its state rebuilds it from the leaves.
    With the same seed and the same draws before, both must draw the same rows with the same weights."""
    cfg = {"replay_buffer_size": 6000, "alpha": 0.6, "beta": 0.4, "seed": 3}
    buf, rng = AdvancedReplayBuffer(cfg), np.random.default_rng(0)
    pushed, draws = 0, 0
    for step in range(60):
        n = int(rng.choice([1, 8, 64, 700]))
        buf.push(rows(pushed, n))
        pushed += n
        if step % 3 == 2:  # new priorities for rows all over the buffer, or for a run of them
            state = buf.state_dict()
            valid = np.flatnonzero(state["meta/valid"])
            index = np.sort(rng.choice(valid, 32, replace=False)) if step % 2 else valid[:32]
            buf.update({"index": index, "uid": state["meta/uid"][index], "priority": rng.uniform(0.1, 50.0, 32)})
        if step % 3 != 1:
            continue
        rebuilt = AdvancedReplayBuffer(cfg)
        rebuilt.load_state_dict(buf.state_dict())
        for _ in range(draws):  # the same random numbers drawn before
            rebuilt.sample(16)
        a, b = buf.sample(16), rebuilt.sample(16)
        draws += 1
        np.testing.assert_array_equal(a["index"], b["index"], err_msg=f"step {step}")
        np.testing.assert_array_equal(a["weight"], b["weight"], err_msg=f"step {step}")
    assert pushed > 6000  # the ring wrapped: rows were evicted


def test_capacity_mismatch_on_load():
    a = NaiveReplayBuffer({"replay_buffer_size": 4})
    a.push(rows(0, 1))
    with pytest.raises(ValueError, match="capacity"):
        NaiveReplayBuffer({"replay_buffer_size": 5}).load_state_dict(a.state_dict())


def test_concurrent_push_and_sample_stay_consistent():
    buf = AdvancedReplayBuffer({"replay_buffer_size": 500})
    errors = []

    def pusher(start):
        try:
            for i in range(200):
                buf.push(rows(start + i * 3, 3))
        except Exception as exc:  # surfaced by the assert below
            errors.append(exc)

    def sampler():
        try:
            for _ in range(300):
                s = buf.sample(8)
                if s is not None:
                    np.testing.assert_array_equal(s["obs"][:, 0], s["action"])
                    buf.update({"index": s["index"], "uid": s["uid"], "priority": np.ones(8)})
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=pusher, args=(k * 100000,)) for k in range(2)] + [
        threading.Thread(target=sampler) for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    stats = buf.stats()
    assert stats.pushed == 1200 and stats.size == 500 and stats.evicted == 700


def test_episode_buffer():
    evicted = []
    buf = EpisodeReplayBuffer({"replay_buffer_size": 2}, on_evict=evicted.append)
    buf.push([rows(0, 3), rows(10, 2)])
    buf.push(rows(20, 4))
    assert buf.count() == 2 and len(evicted) == 1
    episodes = buf.sample(2)
    assert {len(e["action"]) for e in episodes} <= {2, 4}
    other = EpisodeReplayBuffer({"replay_buffer_size": 2})
    other.load_state_dict(buf.state_dict())
    assert {len(e["action"]) for e in other.sample(2)} <= {2, 4}
    assert other.count() == 2 and other.stats().pushed == 3


def test_unknown_buffer_type():
    with pytest.raises(ConfigError, match="did you mean 'naive'"):
        create_buffer({"type": "naiv"})
