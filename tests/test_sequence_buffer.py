"""DI-engine's SequenceReplayBuffer: contiguous, same-episode sequences over the naive buffer's ring."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parallel_rl.config import compile_config
from parallel_rl.data import BUFFER_REGISTRY, SequenceReplayBuffer, create_buffer
from parallel_rl.errors import ConfigError


def episode(number: int, length: int, truncated: bool = False) -> dict:
    """Rows of one episode: obs = [episode number, t], done on the last row (unless truncated)."""
    t = np.arange(length)
    return {
        "obs": np.stack([np.full(length, number), t], axis=1).astype(np.float32),
        "done": (t == length - 1) & (not truncated),
    }


def check_sequences(out: dict, batch: int, sequence: int) -> None:
    assert out["obs"].shape == (batch, sequence, 2) and out["index"].shape == (batch, sequence)
    numbers, t = out["obs"][..., 0], out["obs"][..., 1]
    assert (numbers == numbers[:, :1]).all(), "a sequence crossed an episode boundary"
    assert (np.diff(t, axis=1) == 1).all(), "a sequence is not contiguous in time"
    assert (np.diff(out["uid"], axis=1) == 1).all()


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=12),
    capacity=st.integers(4, 60),
    sequence=st.integers(1, 8),
    as_list=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_sequences_are_contiguous_and_never_cross_an_episode_boundary(lengths, capacity, sequence, as_list, seed):
    buffer = SequenceReplayBuffer({"replay_buffer_size": capacity, "seed": seed})
    episodes = [episode(i, n) for i, n in enumerate(lengths)]
    if as_list:
        buffer.push(episodes)
    else:  # one env's rows in time order, split across pushes at arbitrary points
        rows = {k: np.concatenate([e[k] for e in episodes]) for k in episodes[0]}
        cut = len(rows["obs"]) // 2
        buffer.push({k: v[:cut] for k, v in rows.items()})
        buffer.push({k: v[cut:] for k, v in rows.items()})
    # how many start rows can begin a whole in-episode sequence among the rows the ring still holds
    kept = np.concatenate([np.full(n, i) for i, n in enumerate(lengths)])[-capacity:]
    starts = sum(max(0, int((kept == i).sum()) - sequence + 1) for i in np.unique(kept))
    if starts == 0:
        assert buffer.sample(1, sequence) is None
        return
    batch = min(starts, 3)
    out = buffer.sample(batch, sequence)
    check_sequences(out, batch, sequence)
    assert len(np.unique(out["index"][:, 0])) == batch  # replace=False: distinct starts
    assert buffer.sample(starts + 1, sequence) is None  # not that many distinct starts
    check_sequences(buffer.sample(starts + 1, sequence, replace=True), starts + 1, sequence)


def test_a_sequence_crosses_episodes_only_when_asked():
    buffer = SequenceReplayBuffer({"replay_buffer_size": 100})
    buffer.push([episode(0, 3), episode(1, 3)])
    assert buffer.sample(1, 4) is None  # no episode has 4 rows
    out = buffer.sample(3, 4, cross_episode=True)  # the 3 windows of 4 of the 6 rows
    assert out["obs"].shape == (3, 4, 2) and (np.diff(out["uid"], axis=1) == 1).all()


def test_episode_boundaries_from_done_end_and_episode_id():
    buffer = SequenceReplayBuffer({"replay_buffer_size": 100})
    rows = episode(0, 4, truncated=True)  # done never set: an end column marks the truncation
    rows["end"] = np.array([False, False, False, True])
    buffer.push(rows)
    buffer.push({**episode(1, 4), "end": np.array([False, False, False, True])})
    assert buffer.sample(2, 4) is not None and buffer.sample(1, 5) is None
    ids = SequenceReplayBuffer({"replay_buffer_size": 100})
    ids.push({"obs": np.zeros((6, 2), np.float32), "episode_id": np.array([7, 7, 7, 9, 9, 9])})
    assert ids.sample(2, 3) is not None and ids.sample(1, 4) is None
    assert "episode_id" not in ids.sample(1, 3)


def test_sample_range_and_registry_and_state():
    buffer = create_buffer({"type": "sequence", "replay_buffer_size": 100})
    assert isinstance(buffer, SequenceReplayBuffer) and BUFFER_REGISTRY.get("sequence") is SequenceReplayBuffer
    buffer.push([episode(0, 5), episode(1, 5)])
    out = buffer.sample(3, 2, sample_range=slice(-5, None))  # the newest 5 rows: episode 1 only
    assert (out["obs"][..., 0] == 1).all()
    copy = SequenceReplayBuffer({"replay_buffer_size": 100})
    copy.load_state_dict(buffer.state_dict())
    copy.push(episode(2, 2))  # continues numbering after the restored episodes
    assert copy.sample(1, 3, sample_range=slice(-2, None)) is None
    with pytest.raises(ValueError, match="sequence=0"):
        buffer.sample(1, 0)


def test_the_pipelines_refuse_the_sequence_buffer():
    with pytest.raises(ConfigError, match="type='sequence'.*use advanced or naive"):
        compile_config({"policy": {"other": {"replay_buffer": {"type": "sequence"}}}})
