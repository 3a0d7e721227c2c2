import os
import pickle

import numpy as np
import pytest
import torch

from parallel_rl.errors import PathOutsideRootError, StorageError, StorageFaultError
from parallel_rl.storage import Backend, FsspecBackend, LocalBackend, SharedStorage, atomic_save_npz, load_npz


@pytest.fixture
def storage(tmp_path):
    return SharedStorage(str(tmp_path / "shared"))


def test_chunk_round_trip(storage):
    cols = {"obs": np.arange(6, dtype=np.float32).reshape(3, 2), "done": np.array([False, True, False])}
    path = storage.chunks.write("c1-0000001", cols)
    assert path.startswith(storage.data_dir)
    back = storage.chunks.read("c1-0000001")
    np.testing.assert_array_equal(back["obs"], cols["obs"])
    assert storage.chunks.names() == ["c1-0000001"]
    assert storage.chunks.delete("c1-0000001") and not storage.chunks.delete("c1-0000001")


def test_failed_write_leaves_no_file_and_no_temp(storage, monkeypatch):
    def explode(f, **arrays):
        f.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", explode)
    with pytest.raises(StorageFaultError, match="writing a chunk failed on the shared store .*disk full"):
        storage.chunks.write("c1-0000002", {"x": np.zeros(3)})
    assert os.listdir(storage.data_dir) == []


def test_readers_never_see_a_partial_file(storage):
    """The final name appears only once the content is complete (rename, not write in place)."""
    big = {"obs": np.random.rand(20000, 4).astype(np.float32)}
    storage.chunks.write("big", big)
    seen = storage.chunks.read("big")
    assert seen["obs"].shape == (20000, 4)
    assert not [f for f in os.listdir(storage.data_dir) if f.startswith(".tmp-")]


def test_a_chunks_rows_come_from_every_columns_header(storage, tmp_path):
    """Rows come from each column's own header, also when chunks share headers (they are parsed once); columns
    of different lengths, a damaged header or a header length past numpy's limit make no chunk."""
    for name, n in (("a", 3), ("b", 5), ("a2", 3)):
        storage.chunks.write(name, {"obs": np.zeros((n, 4), np.float32), "action": np.zeros(n, np.int64)})
    assert [storage.chunks.layout(name)[0] for name in ("a", "b", "a2", "b")] == [3, 5, 3, 5]
    storage.chunks.write("uneven", {"obs": np.zeros((3, 4), np.float32), "action": np.zeros(4, np.int64)})
    with pytest.raises(StorageError, match="columns of different or no lengths"):
        storage.chunks.layout("uneven")
    import zipfile

    for name, member in (
        ("garbage", b"not a numpy file at all"),
        ("huge-header", b"\x93NUMPY\x01\x00\xff\xff" + b" " * 100),
        ("bad-dict", b"\x93NUMPY\x01\x00\x10\x00{'shape': oops}\n"),
    ):
        with zipfile.ZipFile(storage.chunks.path(name), "w") as archive:
            archive.writestr("obs.npy", member)
        with pytest.raises(StorageError, match="not a valid step-data chunk"):
            storage.chunks.layout(name)
    with pytest.raises(FileNotFoundError):
        storage.chunks.layout("absent")


def test_a_chunks_layout_counts_its_file_bytes_and_its_bytes_per_row(storage):
    """Fixed bytes + bytes per row x rows is the file's size, for every row count of one set of columns: what
    lets the coordinator check a chunk's rows with one lstat (chunks.size) once it has read one chunk."""
    layouts = {}
    for n in (1, 3, 64, 1000, 12345):
        storage.chunks.write(
            f"c{n}", {"obs": np.zeros((n, 4), np.float32), "action": np.zeros(n, np.int64), "done": np.zeros(n, bool)}
        )
        rows, nbytes, per_row = storage.chunks.layout(f"c{n}")
        assert (rows, per_row) == (n, 4 * 4 + 8 + 1)
        assert nbytes == storage.chunks.size(f"c{n}") == os.path.getsize(storage.chunks.path(f"c{n}"))
        layouts[n] = nbytes - per_row * rows
    assert len(set(layouts.values())) == 1, layouts  # the fixed part does not move with the row count
    with pytest.raises(FileNotFoundError):
        storage.chunks.size("absent")


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/b", "..", "", "x" * 200, "a..b", ".hidden"])
def test_bad_chunk_names_are_rejected(storage, name):
    with pytest.raises(PathOutsideRootError):
        storage.chunks.path(name)


def test_resolve_refuses_escapes_including_symlinks(storage, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, os.path.join(storage.data_dir, "link"))
    with pytest.raises(PathOutsideRootError):
        storage.resolve("data/link/x.npz")
    with pytest.raises(PathOutsideRootError):
        storage.resolve("../outside/x")
    assert storage.resolve("data/ok.npz").startswith(storage.root)


def test_object_arrays_are_never_written_or_unpickled(storage, tmp_path):
    with pytest.raises(StorageError, match="dtype object"):
        storage.chunks.write("obj", {"x": np.array([{"a": 1}], dtype=object)})
    # a hostile file with a pickled object array on the shared disk is refused on load
    path = os.path.join(storage.data_dir, "evil.npz")
    np.savez(path, x=np.array([object()], dtype=object))
    with pytest.raises(StorageError, match="not a valid step-data chunk"):
        storage.chunks.read("evil")


def test_checkpoints_load_weights_only(storage):
    storage.policies.save(3, {"model": {"w": torch.ones(2)}})
    assert torch.equal(storage.policies.load(3)["model"]["w"], torch.ones(2))
    assert os.path.basename(storage.policies.path(3)) == "policy_000000003.pt"

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    with open(storage.policies.path(4), "wb") as f:
        pickle.dump({"model": Evil()}, f, protocol=2)
    with pytest.raises(StorageError, match="not a loadable checkpoint"):
        storage.policies.load(4)


def test_versions_prune_and_reset(storage):
    for v in (1, 20, 300):
        storage.policies.save(v, {"v": torch.tensor(v)})
        storage.learner_states.save(v, {"v": torch.tensor(v)})
    storage.chunks.write("c-1", {"x": np.zeros(1)})
    assert storage.policies.versions() == [1, 20, 300]
    assert storage.policies.latest() == 300 and storage.learner_states.latest() == 300
    assert storage.prune_checkpoints(keep=2) == 2
    assert storage.policies.versions() == [20, 300]
    user_file = os.path.join(storage.data_dir, "README.txt")
    open(user_file, "w").close()
    assert storage.reset() == 5
    assert storage.policies.latest() is None and storage.chunks.names() == []
    assert os.path.exists(user_file)  # reset only removes our own files


def test_atomic_save_npz_and_load(tmp_path):
    path = str(tmp_path / "x.npz")
    atomic_save_npz(path, {"a": np.arange(3)})
    assert load_npz(path)["a"].tolist() == [0, 1, 2]


def test_stale_temp_file_from_a_crashed_writer_is_replaced(storage):
    import threading

    stale = os.path.join(storage.data_dir, f".tmp-{os.getpid()}-{threading.get_ident()}-c-stale.npz")
    with open(stale, "wb") as f:
        f.write(b"half")
    storage.chunks.write("c-stale", {"x": np.arange(2)})
    assert storage.chunks.read("c-stale")["x"].tolist() == [0, 1]
    assert not os.path.exists(stale)


def test_temp_files_left_by_killed_writers_are_swept_once_stale(storage):
    import time

    stale = [
        os.path.join(d, f".tmp-1-2-{name}")
        for d, name in ((storage.data_dir, "c-1.npz"), (storage.policy_dir, "policy_000000001.pt"))
    ]
    fresh = os.path.join(storage.data_dir, ".tmp-1-2-c-2.npz")  # maybe a write in progress
    for path in stale + [fresh]:
        open(path, "wb").close()
    hour_ago = time.time() - 3600
    for path in stale:
        os.utime(path, (hour_ago, hour_ago))
    storage.chunks.write("c-3", {"x": np.arange(3)})
    os.utime(storage.chunks.path("c-3"), (hour_ago, hour_ago))  # old, but a real chunk: kept
    assert storage.remove_stale_temp_files(600) == 2
    assert not any(os.path.exists(p) for p in stale)
    assert os.path.exists(fresh) and storage.chunks.names() == ["c-3"]


def test_the_coordinator_sweeps_stale_temp_files_when_it_starts(coordinator_factory, tmp_path):
    import time

    from tests.support import eventually

    left = SharedStorage(str(tmp_path / "shared"))  # the root the coordinator will use
    path = os.path.join(left.learner_dir, ".tmp-99-1-learner_000000200.pt")
    open(path, "wb").close()
    os.utime(path, (time.time() - 3600,) * 2)
    coordinator_factory()
    eventually(lambda: not os.path.exists(path), timeout=5, message="stale temp file removed")


def test_the_local_and_the_object_store_backends_are_backends(tmp_path):
    """Each backend has every member of the declared Backend protocol (what SharedStorage and its families ask of
    one; mypy checks the signatures, `make lint`), and a store is opened with one."""
    for backend in (LocalBackend(str(tmp_path)), FsspecBackend("memory://bucket/run")):
        assert isinstance(backend, Backend), f"{type(backend).__name__} lacks a member of storage.Backend"
    assert isinstance(SharedStorage(str(tmp_path / "shared")).backend, Backend)
