"""Reliability III (issue #23), the data path: damaged chunks, store faults while a chunk is checked, metadata
batches larger than the buffer, the learners' rendezvous. Real coordinators over HTTP on 127.0.0.1, real slave
shells, real files; one regression test per finding."""
import numpy as np

from parallel_rl.coordinator.replay import ReplayIndex
from parallel_rl.data.buffer import AdvancedReplayBuffer, NaiveReplayBuffer
from parallel_rl.storage import SharedStorage


# ---- 14. a batch larger than the buffer -------------------------------------------------------------
def test_rows_a_push_drops_at_once_are_evicted_rows():
    evicted = []
    for cls in (NaiveReplayBuffer, AdvancedReplayBuffer):
        evicted.clear()
        buf = cls({"replay_buffer_size": 4}, on_evict=evicted.append)
        buf.push({"action": np.arange(2)})
        buf.push({"action": np.arange(10, 17)})  # 7 rows into 4 slots: 3 never stored, 2 older ones overwritten
        stats = buf.stats()
        assert (stats.size, stats.pushed, stats.evicted) == (4, 9, 5)
        assert stats.pushed - stats.evicted == stats.size
        assert sorted(np.concatenate([e["action"] for e in evicted]).tolist()) == [0, 1, 10, 11, 12]


def test_chunks_of_a_metadata_batch_larger_than_the_buffer_are_deleted(tmp_path):
    storage = SharedStorage(str(tmp_path / "shared"))
    replay = ReplayIndex({"type": "advanced", "replay_buffer_size": 8}, storage, grace_seconds=0.0)
    names = [f"big-{i}" for i in range(3)]
    for name in names:
        storage.write_chunk(name, {"action": np.zeros(4, np.int64)})
    assert replay.add_chunks([(name, 4, 0) for name in names], "collector-1") == [True, True, True]
    replay.collect_garbage(force=True)
    stats = replay.stats()
    # the first chunk's rows never fit: its file goes as an evicted chunk's does; the two others stay
    assert storage.list_chunks() == names[1:]
    assert (stats["size"], stats["pushed"], stats["evicted"], stats["chunks"], stats["chunks_deleted"]) == (
        8, 12, 4, 2, 1)
