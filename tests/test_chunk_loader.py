"""The chunk family's one door (issue #41, finding 3): every chunk read from the shared store goes through
``parallel_rl.storage.chunks.load_chunk`` (the coordinator's check through ``chunk_layout``, its headers only),
which hands back a chunk every reader can use as it is, or raises the store's damage error (StorageError), never
another exception, and never allocates more than the file's size warrants, whatever its headers declare.
Real files on a real store; hypothesis mutates valid plain and packed chunk files."""
import io
import tracemalloc
import warnings
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from parallel_rl.data.frames import POOL, is_packed, pack_frames, unpack_frames
from parallel_rl.errors import StorageError, StorageFaultError
from parallel_rl.learner.pipeline import RowStore
from parallel_rl.storage import SharedStorage
from tests.support import damaged

ROWS = 6


def plain_columns():
    rng = np.random.default_rng(0)
    return {"obs": rng.random((ROWS, 3), dtype=np.float32), "action": np.arange(ROWS, dtype=np.int64),
            "reward": np.ones(ROWS, np.float32), "done": np.arange(ROWS) % 4 == 3}


def packed_columns(side=2):
    """A frame-stacked env's rows (stacks of 3 frames of side x side uint8, consecutive rows sharing frames),
    packed."""
    frames = np.arange(ROWS + 4, dtype=np.uint8)[:, None, None] * np.ones((1, side, side), np.uint8)
    obs = np.stack([frames[i:i + 3] for i in range(ROWS)])
    next_obs = np.stack([frames[i + 1:i + 4] for i in range(ROWS)])
    return pack_frames({"obs": obs, "next_obs": next_obs, "action": np.arange(ROWS) % 2,
                        "done": np.zeros(ROWS, bool)})


def npz_file(members, compress=zipfile.ZIP_STORED):
    """The bytes of a zip of ``(name, bytes)`` members."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=compress) as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Duplicate name": a damage some tests make on purpose
        for name, data in members:
            archive.writestr(name, data)
    return out.getvalue()


def npy(value, shape=None, descr=None):
    """An .npy member of ``value``; with ``shape`` / ``descr`` its header declares those over its own bytes."""
    out = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(value.dtype) if descr is None else descr,
              "fortran_order": False, "shape": value.shape if shape is None else tuple(shape)}
    np.lib.format.write_array_header_1_0(out, header)
    out.write(np.ascontiguousarray(value).tobytes())
    return out.getvalue()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return SharedStorage(str(tmp_path_factory.mktemp("fuzz") / "shared"))


def put(store, name, data: bytes):
    with open(store.chunks.path(name), "wb") as f:
        f.write(data)


def damage(store, name, members, **kw):
    """Chunk ``name`` written as the zip of ``members``; what reading it raises (StorageError expected)."""
    put(store, name, npz_file(members, **kw))
    with pytest.raises(StorageError) as read:
        store.chunks.read(name)
    assert not isinstance(read.value, StorageFaultError) and store.health.healthy
    return str(read.value)


# ---- the damage the issue found, one by one ---------------------------------------------------------------
def test_a_header_declaring_terabytes_over_a_small_file_is_damage_found_before_any_allocation(store):
    columns = packed_columns()
    members = [(k + ".npy", npy(v, shape=(800_000_000_000,) if k == POOL else None)) for k, v in columns.items()]
    why = damage(store, "huge", members)
    assert "'frame_pool' declares uint8[800000000000]" in why, why
    with pytest.raises(StorageError, match="declares"):  # the coordinator's check (headers only) refuses it too
        store.chunks.layout("huge")


def test_a_frame_index_past_the_pool_is_damage(store):
    columns = packed_columns()
    columns["next_obs_frames"] = columns["next_obs_frames"].copy()
    columns["next_obs_frames"][2, 1] = len(columns[POOL])
    store.chunks.write("past", columns)
    with pytest.raises(StorageError, match=r"'next_obs_frames' points at frame \d+ of a pool of \d+"):
        store.chunks.read("past")
    columns["next_obs_frames"][2, 1] = -1
    store.chunks.write("negative", columns)
    with pytest.raises(StorageError, match="points at frame -1"):
        store.chunks.read("negative")


@pytest.mark.parametrize("missing", [POOL, "obs_frames", "next_obs_frames"])
def test_a_packed_chunk_without_one_of_its_members_is_damage(store, missing):
    columns = {k: v for k, v in packed_columns().items() if k != missing}
    store.chunks.write("partial", columns)
    with pytest.raises(StorageError, match=f"a packed chunk without \\['{missing}'\\]"):
        store.chunks.read("partial")
    with pytest.raises(StorageError, match="a packed chunk without"):
        store.chunks.layout("partial")


@pytest.mark.parametrize("change, expected", [
    (lambda c: {**c, "obs_frames": c["obs_frames"].astype(np.float32)}, "frame indices are integers"),
    (lambda c: {**c, "action": c["action"].astype("datetime64[s]")}, "has dtype datetime64"),
    (lambda c: {**c, "action": c["action"][:-1]}, "columns of different or no lengths"),
    (lambda c: {k: v[:0] for k, v in c.items()}, "columns of different or no lengths [0]"),
    (lambda c: {**c, POOL: c[POOL][:0]}, "no frames"),
])
def test_columns_no_reader_could_use_are_damage(store, change, expected):
    store.chunks.write("odd", change(packed_columns()))
    with pytest.raises(StorageError, match="not a valid step-data chunk") as read:
        store.chunks.read("odd")
    assert expected in str(read.value)


def test_members_that_are_not_plain_stored_arrays_are_damage(store):
    members = [(k + ".npy", npy(v)) for k, v in plain_columns().items()]
    assert "is compressed" in damage(store, "deflated", members, compress=zipfile.ZIP_DEFLATED)
    assert "not a .npy array" in damage(store, "extra", members + [("notes.txt", b"hello")])
    assert "two arrays named 'obs'" in damage(store, "twice", members + members[:1])
    obs = plain_columns()["obs"]
    assert "holds 72 bytes of data" in damage(store, "short", [("obs.npy", npy(obs, shape=(ROWS, 4)))])
    assert "Python objects" in damage(store, "objects", [("obs.npy", npy(obs, descr="|O"))])


def test_a_damaged_zip_directory_offset_is_damage_not_a_fault_of_the_store(store):
    """A bit flipped in the zip's recorded directory offset (6 bytes from the end) puts its first member before
    the file's start: zipfile's seek there fails with EINVAL, which used to be taken for a fault of the store
    (the store shown unhealthy, the learner's task failed and backed off) instead of the file's damage (found by
    the property test below)."""
    blob = bytearray(npz_file([(k + ".npy", npy(v)) for k, v in plain_columns().items()]))
    blob[-6] ^= 0x80
    put(store, "offset", bytes(blob))
    for read in (store.chunks.read, store.chunks.layout):
        with pytest.raises(StorageError, match="offset.npz: not a valid step-data chunk") as damaged:
            read("offset")
        assert not isinstance(damaged.value, StorageFaultError) and store.health.healthy


def test_valid_chunks_come_back_as_written(store):
    for name, columns in (("plain", plain_columns()), ("packed", packed_columns())):
        store.chunks.write(name, columns)
        back = store.chunks.read(name)
        assert set(back) == set(columns) and all(np.array_equal(back[k], v) and back[k].dtype == v.dtype
                                                 for k, v in columns.items())
        assert store.chunks.layout(name)[0] == ROWS
    fortran = np.asfortranarray(np.arange(12, dtype=np.float64).reshape(ROWS, 2))
    store.chunks.write("fortran", {"obs": fortran})
    assert np.array_equal(store.chunks.read("fortran")["obs"], fortran)


def test_a_packed_chunk_whose_frames_differ_from_the_cached_ones_is_damaged_not_fatal(store):
    """One batch's stacks are rebuilt from several chunks' pools into one array: a chunk whose frames have
    another shape (valid in itself) made that fail with a ValueError, which killed the learner's data thread."""
    store.chunks.write("frames-2", packed_columns(side=2))
    store.chunks.write("frames-3", packed_columns(side=3))
    damaged = []
    rows = RowStore(store, slots=4, slot_rows=ROWS, on_damaged=lambda name, why: damaged.append((name, why)))
    batch, keep = rows.gather(["frames-2", "frames-3"], np.array([0, 1, 0]), np.array([0, 0, 5]))
    assert keep.tolist() == [True, False, True] and batch["obs"].shape == (2, 3, 2, 2)
    assert [name for name, _ in damaged] == ["frames-3"] and "frames of uint8[3, 3]" in damaged[0][1], damaged


# ---- the property: any mutation of a valid chunk file --------------------------------------------------------
BASES = {"plain": plain_columns(), "packed": packed_columns()}
DTYPES = ["|O", "<i8", "|V8", "<U0", ">f8", "|b1", "<M8[s]", "<f2", "|S3", "<u2", "<i4"]
SIZES = st.one_of(st.integers(-3, 16), st.integers(2**20, 2**28), st.integers(2**36, 2**45))

member_change = st.one_of(
    st.tuples(st.just("shape"), st.integers(0, 9), st.lists(SIZES, min_size=0, max_size=3)),
    st.tuples(st.just("dtype"), st.integers(0, 9), st.sampled_from(DTYPES)),
    st.tuples(st.just("drop"), st.integers(0, 9)),
    st.tuples(st.just("twice"), st.integers(0, 9)),
    st.tuples(st.just("value"), st.integers(0, 9), st.integers(-2**31, 2**31 - 1)),
)
byte_change = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True)),
    st.tuples(st.just("flip"), st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
                                        min_size=1, max_size=6)),
)


def mutated(base: str, members_changes, byte_changes) -> bytes:
    columns = BASES[base]
    members = [(k + ".npy", npy(v)) for k, v in columns.items()]
    for change in members_changes:
        i = change[1] % len(members) if members else 0
        if not members:
            break
        name, data = members[i]
        value = columns[name[:-4]]
        if change[0] == "shape":
            members[i] = (name, npy(value, shape=change[2]))
        elif change[0] == "dtype":
            members[i] = (name, npy(value, descr=change[2]))
        elif change[0] == "drop":
            del members[i]
        elif change[0] == "twice":
            members.append(members[i])
        else:  # one entry of the array rewritten (an index past the pool, a negative one, any number)
            flat = value.reshape(-1).copy()
            if flat.size:
                flat[change[2] % flat.size] = np.array(change[2]).astype(value.dtype)
            members[i] = (name, npy(flat.reshape(value.shape)))
    return damaged(npz_file(members), byte_changes)


def usable(columns):
    """A chunk every reader can use: rows of one length (>= 1); a packed chunk's stacks rebuild."""
    rows = {len(v) for k, v in columns.items() if k != POOL}
    assert len(rows) == 1 and min(rows) >= 1
    if is_packed(columns):
        rebuilt = unpack_frames(columns)
        assert len(rebuilt["obs"]) == len(rebuilt["next_obs"]) == min(rows)
    return min(rows)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)  # examples: the profile's
@given(base=st.sampled_from(sorted(BASES)), members_changes=st.lists(member_change, max_size=3),
       byte_changes=st.lists(byte_change, max_size=2))
def test_fuzz_a_mutated_chunk_loads_valid_or_is_damage_within_its_size(store, base, members_changes,
                                                                       byte_changes):
    blob = mutated(base, members_changes, byte_changes)
    put(store, "fuzz", blob)
    bound = 4 * len(blob) + (1 << 20)  # the file's bytes, a copy, and zipfile's buffers: never what headers claim
    results = []
    for read in (store.chunks.read, store.chunks.layout):
        tracemalloc.start()
        try:
            results.append(read("fuzz"))
        except StorageError as exc:
            assert not isinstance(exc, StorageFaultError), exc
            assert "fuzz.npz: not a valid step-data chunk" in str(exc), exc
            results.append(None)
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        assert peak <= bound, f"{read.__name__} of a {len(blob)}-byte file allocated {peak} bytes"
    columns, layout = results
    event("loaded" if columns is not None else
          "damage seen by the headers" if layout is None else "damage seen in the data")
    if columns is not None:  # what loads is usable, and the coordinator's check agrees on its rows
        assert layout is not None and layout[:2] == (usable(columns), len(blob))
    assert store.health.healthy
