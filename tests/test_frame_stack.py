"""Frame stacks stored as single frames and rebuilt on read (parallel_rl.data.frames): the stacks a learner
reads back from chunks equal the env's own, across lost lives, game overs (resets) and chunk boundaries, for
DQN's replay samples (rows of many chunks) and PPO's segments (whole chunks)."""

import runpy

import numpy as np
import pytest

from parallel_rl.collector.cluster import ClusterCollector
from parallel_rl.config import compile_config
from parallel_rl.data.frames import BASE, POOL, pack_frames, unpack_frames
from parallel_rl.learner.pipeline import RowStore
from parallel_rl.storage import SharedStorage
from parallel_rl.storage.formats import load_npz
from parallel_rl.storage.names import chunk_name


def collector_for(tmp_path, config, **env):
    user = runpy.run_path(config)["main_config"]
    user["env"].update(env)
    cfg = compile_config({**user, "exp_name": str(tmp_path / "exp")})
    storage = SharedStorage(str(tmp_path / "shared"))
    return ClusterCollector(cfg, storage, seed=0), storage


def write_chunks(collector, storage, n_chunks, rows):
    """``n_chunks`` chunks of random play (Breakout: lives lost every few dozen steps, games over every few
    hundred); the rows as collected (the env's own stacks), chunk by chunk."""
    written = []
    for i in range(n_chunks):
        data, _ = collector.collect(rows, eps=1.0, random_collect=True)
        collector.send_stepdata(f"c1-{i:07d}", data)
        written.append(data)
    return written


def test_dqn_replay_samples_rebuild_the_envs_stacks_across_episode_and_chunk_boundaries(tmp_path):
    collector, storage = collector_for(tmp_path, "configs/breakout_dqn.py", collector_env_num=3)
    try:
        written = write_chunks(collector, storage, 12, 64)
    finally:
        collector.close()
    rows = np.concatenate([w["done"] for w in written])
    assert rows.sum() >= 3  # lives were lost (terminations): stacks run on across them
    on_disk = storage.chunks.read("c1-0000003")
    assert POOL in on_disk and "obs" not in on_disk and on_disk["obs_frames"].shape == (64, 4)
    store = RowStore(storage, slots=16, slot_rows=64)
    names = [f"c1-{i:07d}" for i in range(len(written))]
    rng = np.random.default_rng(0)
    for _ in range(20):  # replay samples: 32 rows of any chunks, as the coordinator hands them out
        local = rng.integers(0, len(names), 32)
        row = rng.integers(0, 64, 32)
        batch, keep = store.gather(names, local, row)
        assert keep.all()
        for key in ("obs", "next_obs", "action", "reward", "done"):
            expected = np.stack([written[c][key][r] for c, r in zip(local, row)])
            assert np.array_equal(batch[key], expected), key
        assert batch["obs"].dtype == np.uint8 and "obs_frames" not in batch


def test_episode_starts_rebuild_as_the_env_pads_them(tmp_path):
    """A game over resets the env: the new game's first stacks (ALE pads them) come back as the env gave them;
    the next step's stack after a lost life shifts on (the game goes on)."""
    collector, storage = collector_for(tmp_path, "configs/breakout_dqn.py", collector_env_num=1)
    try:
        written = write_chunks(collector, storage, 8, 128)  # 1,024 steps of one lane: games end
    finally:
        collector.close()
    names = [f"c1-{i:07d}" for i in range(len(written))]
    store = RowStore(storage, slots=8, slot_rows=128)
    everything = {k: np.concatenate([w[k] for w in written]) for k in written[0]}
    obs = everything["obs"]  # one lane, in time order
    shifted = (obs[1:, :3] == obs[:-1, 1:]).all(axis=(1, 2, 3))
    assert (~shifted).sum() >= 1  # a new game began: its first stack is not the previous one shifted on
    local, row = np.divmod(np.arange(len(everything["obs"])), 128)
    batch, keep = store.gather(names, local, row)
    assert keep.all()
    assert np.array_equal(batch["obs"], everything["obs"]) and np.array_equal(batch["next_obs"], everything["next_obs"])


def test_ppo_segments_rebuild_the_envs_stacks(tmp_path):
    collector, storage = collector_for(tmp_path, "configs/breakout_ppo.py", collector_env_num=2)
    try:
        data, _ = collector.collect(256, eps=0.0)
        collector.send_stepdata("c1-0000000", data)
    finally:
        collector.close()
    store = RowStore(storage, slots=2, slot_rows=256)
    segment, keep = store.gather(["c1-0000000"], np.zeros(256, np.int64), np.arange(256))
    assert keep.all()
    for key in data:
        assert np.array_equal(segment[key], data[key]), key


def test_packing_keeps_every_frame_once_and_non_stacked_envs_as_they_were(tmp_path):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (10, 84, 84), dtype=np.uint8)
    # two lanes' rows, time-major: a stack is the last 4 frames, next_obs one frame on
    obs = np.stack([frames[t : t + 4] for t in range(6)])
    rows = {
        "obs": obs,
        "next_obs": np.stack([frames[t + 1 : t + 5] for t in range(6)]),
        "action": np.arange(6),
        "done": np.zeros(6, bool),
    }
    packed = pack_frames(rows)
    assert len(packed[POOL]) == 10 and packed["obs_frames"].dtype == np.int32
    back = unpack_frames(packed)
    assert all(np.array_equal(back[k], rows[k]) for k in rows)
    collector, storage = collector_for(tmp_path, "configs/minatar_breakout_dqn_parallel.py", collector_env_num=2)
    try:
        assert collector.env.frame_stack == 0
        data, _ = collector.collect(32, eps=1.0, random_collect=True)
        collector.send_stepdata("c1-0000000", data)
    finally:
        collector.close()
    assert set(storage.chunks.read("c1-0000000")) == set(data)


@pytest.mark.parametrize("config", ["configs/pong_dqn_parallel.py", "configs/pong_ppo_parallel.py"])
def test_pong_chunks_cost_at_most_8_5_kb_a_transition(tmp_path, config):
    """#25's bound: 1.2 x one 84x84 frame (7,056 B) a transition, the config's own chunk size and envs."""
    collector, storage = collector_for(tmp_path, config)
    rows = collector.cfg.parallel.collector.chunk_size
    try:
        data, _ = collector.collect(rows, eps=1.0, random_collect=True)
        collector.send_stepdata("c1-0000000", data)
    finally:
        collector.close()
    assert storage.chunks.size("c1-0000000") / len(data["action"]) <= 8500


@pytest.mark.parametrize("config", ["configs/pong_dqn_parallel.py", "configs/pong_ppo_parallel.py"])
def test_short_pong_chunks_refer_to_the_chunk_before_and_cost_about_one_frame_a_transition(tmp_path, config):
    """Issue 43 item 7: a learner-paced collector cuts short chunks (an allowance grant of 64 rows; one vector
    step for a new policy's first chunk), and each self-contained chunk repeated its lanes' stack context (k - 1
    older and n - 1 look-ahead frames a lane): ~14 KB a transition. Each chunk refers to the frames of the chunk
    before it instead; the stacks read back, one chunk at a time and gathered by the learner's cache across
    chunks, equal the env's own."""
    collector, storage = collector_for(tmp_path, config)
    envs = collector.env.num_envs
    written = []
    try:  # a new policy's first chunk: one vector step (its lanes' context: in the chunk before it)
        for seq, rows in enumerate([64, envs, 2 * envs] + [64] * 9, start=1):
            data, _ = collector.collect(rows, eps=1.0, random_collect=True)
            collector.send_stepdata(chunk_name("c1", seq), data)
            written.append((chunk_name("c1", seq), data))
    finally:
        collector.close()
    for name, data in written:
        back = unpack_frames(storage.chunks.read(name))
        assert set(back) == set(data) and all(np.array_equal(back[k], data[k]) for k in data), name
    # the first chunk holds its lanes' context once; every later one about a frame a transition
    later = written[1:]
    per_row = sum(storage.chunks.size(name) for name, _ in later) / sum(len(d["action"]) for _, d in later)
    assert per_row <= 8500, f"{per_row:.0f} bytes a transition"
    names = [name for name, _ in written]
    store = RowStore(storage, slots=len(names), slot_rows=max(len(d["action"]) for _, d in written))
    rng = np.random.default_rng(0)
    local = rng.integers(0, len(names), 256)
    rows = np.array([rng.integers(0, len(written[i][1]["action"])) for i in local])
    batch, keep = store.gather(names, local, rows)
    assert keep.all()
    for key in ("obs", "next_obs"):
        assert np.array_equal(batch[key], np.stack([written[i][1][key][r] for i, r in zip(local, rows)])), key


def test_an_on_policy_collectors_new_version_starts_a_self_contained_chunk(tmp_path):
    """A version's rows leave an on-policy replay once trained on: the next version's chunks must not refer to
    them (an off-policy collector's chunks go on referring across versions)."""
    collector, storage = collector_for(tmp_path, "configs/pong_ppo_parallel.py", collector_env_num=2)
    try:
        for seq in (1, 2):
            data, _ = collector.collect(8, eps=0.0)
            collector.send_stepdata(chunk_name("c1", seq), data)
        storage.policies.save(1, collector.policy.model_state_dict())
        assert collector.update_policy(1)
        data, _ = collector.collect(8, eps=0.0)
        collector.send_stepdata(chunk_name("c1", 3), data)
    finally:
        collector.close()
    bases = [load_npz(storage.chunks.path(chunk_name("c1", seq))).get(BASE) for seq in (1, 2, 3)]
    assert [None if b is None else b.tolist() for b in bases] == [None, [chunk_name("c1", 1)], None]
    assert np.array_equal(unpack_frames(storage.chunks.read(chunk_name("c1", 3)))["obs"], data["obs"])


def test_serial_replay_stores_frames_once_and_rebuilds_the_envs_stacks():
    """The serial pipeline's in-memory replay (store_frames_once): about one frame a transition, samples equal
    to the rows pushed (across pushes, lost lives and game overs), and rows whose frames the ring lapped leave."""
    from parallel_rl.collector.serial import SampleSerialCollector
    from parallel_rl.config import load_config
    from parallel_rl.data import create_buffer
    from parallel_rl.envs.env_manager import EnvManager

    cfg = load_config("configs/breakout_dqn.py", [])
    env = EnvManager.from_cfg(cfg.env, 3, seed=0)
    collector = SampleSerialCollector(None, env, None, nstep=3, discount_factor=0.99)
    buffer = create_buffer({"type": "naive", "replay_buffer_size": 300})
    buffer.store_frames_once()
    pushed = []
    try:
        for _ in range(60):  # 1,800 rows through a 300-row replay: it wraps, and so does its frame ring
            data = collector.collect(30, random_collect=True)
            buffer.push(data)
            pushed.append(data)
    finally:
        collector.close()
    rows = {k: np.concatenate([p[k] for p in pushed]) for k in pushed[0]}
    state = buffer.state_dict()
    assert len(state["frames/data"]) <= 2.5 * 300  # frames held: the ring's, not 2 x 4 a row
    assert int(state["frames/next_id"]) > len(state["frames/data"])  # it wrapped
    assert buffer.count() >= 270  # rows evicted early because the ring lapped their frames: few
    for _ in range(10):
        batch = buffer.sample(32)
        for i, uid in enumerate(batch["uid"]):
            for key in ("obs", "next_obs", "action", "reward", "done"):
                assert np.array_equal(batch[key][i], rows[key][uid]), key
