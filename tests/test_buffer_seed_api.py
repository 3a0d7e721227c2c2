"""Buffers under DI-engine's names: replace=False by default, sample_range, IS / replay_buffer_idx keys."""

import numpy as np
import pytest

from parallel_rl.data import AdvancedReplayBuffer, EpisodeReplayBuffer, NaiveReplayBuffer


def rows(n, first=0):
    return {"obs": np.arange(first, first + n, dtype=np.float32)[:, None], "collect_iter": np.zeros(n, np.int64)}


def test_sampling_is_without_replacement_by_default_like_di_engine():
    buffer = NaiveReplayBuffer({"replay_buffer_size": 10})
    buffer.push(rows(10))
    for _ in range(50):
        assert len(np.unique(buffer.sample(10)["index"])) == 10  # every row exactly once
    partial = NaiveReplayBuffer({"replay_buffer_size": 100})
    partial.push(rows(8))
    assert sorted(partial.sample(8)["obs"][:, 0]) == list(range(8))
    assert partial.sample(9) is None
    repeats = [len(np.unique(buffer.sample(10, replace=True)["index"])) for _ in range(50)]
    assert min(repeats) < 10  # replace=True repeats rows


def test_sample_range_draws_only_from_that_slice_of_the_rows_oldest_first():
    buffer = NaiveReplayBuffer({"replay_buffer_size": 8})
    buffer.push(rows(12))  # ring: rows 4..11 remain, stored out of slot order
    newest = buffer.sample(3, sample_range=slice(-3, None))
    assert sorted(newest["obs"][:, 0]) == [9, 10, 11]
    assert set(buffer.sample(8, sample_range=slice(0, 2), replace=True)["obs"][:, 0]) == {4, 5}
    assert buffer.sample(3, sample_range=slice(0, 2)) is None  # 2 rows cannot give 3 distinct
    with pytest.raises(ValueError, match="sample_range"):
        AdvancedReplayBuffer().sample(1, sample_range=slice(0, 1))


def test_di_engine_keys_are_emitted_and_accepted():
    buffer = AdvancedReplayBuffer({"replay_buffer_size": 16, "alpha": 1.0, "beta": 1.0})
    buffer.push(rows(16))
    batch = buffer.sample(4)
    np.testing.assert_array_equal(batch["IS"], batch["weight"])
    np.testing.assert_array_equal(batch["replay_buffer_idx"], batch["index"])
    np.testing.assert_array_equal(batch["replay_unique_id"], batch["uid"])
    # priorities fed back under DI-engine's names take effect: one row gets all the mass
    target = int(batch["replay_buffer_idx"][0])
    buffer.update(
        {
            "replay_buffer_idx": np.arange(16),
            "replay_unique_id": np.arange(16),  # uid = push order
            "priority": np.full(16, 1e-9),
        }
    )
    buffer.update(
        {"replay_buffer_idx": np.array([target]), "replay_unique_id": np.array([target]), "priority": np.array([1e9])}
    )
    assert set(buffer.sample(8)["index"]) == {target}


def test_push_count_replay_buffer_size_start_close():
    buffer = NaiveReplayBuffer({"replay_buffer_size": 5})
    assert buffer.start() is buffer and buffer.replay_buffer_size == 5
    buffer.push(rows(3))
    buffer.push(rows(4))
    assert buffer.push_count == 7 and len(buffer) == 5
    buffer.close()
    assert len(buffer) == 0
    episodes = EpisodeReplayBuffer({"replay_buffer_size": 4})
    episodes.push([rows(2), rows(3), rows(4)])
    assert episodes.push_count == 3
    assert sorted(len(e["obs"]) for e in episodes.sample(3)) == [2, 3, 4]  # distinct episodes
