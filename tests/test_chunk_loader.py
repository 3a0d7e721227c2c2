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

from parallel_rl.data.frames import BASE, POOL, FramePacker, is_packed, pack_frames, unpack_frames
from parallel_rl.errors import StorageError, StorageFaultError
from parallel_rl.learner.pipeline import RowStore
from parallel_rl.storage import SharedStorage
from parallel_rl.storage.names import chunk_name
from tests.support import damaged
from tests.test_s3 import bucket, s3_env, s3_server  # noqa: F401  (fixtures)

ROWS = 6


def plain_columns():
    rng = np.random.default_rng(0)
    return {
        "obs": rng.random((ROWS, 3), dtype=np.float32),
        "action": np.arange(ROWS, dtype=np.int64),
        "reward": np.ones(ROWS, np.float32),
        "done": np.arange(ROWS) % 4 == 3,
    }


def stacked_rows(side=2, start=0):
    """A frame-stacked env's rows from step ``start`` on (stacks of 3 frames of side x side uint8, consecutive
    rows sharing frames)."""
    frames = np.arange(start, start + ROWS + 4, dtype=np.uint8)[:, None, None] * np.ones((1, side, side), np.uint8)
    obs = np.stack([frames[i : i + 3] for i in range(ROWS)])
    next_obs = np.stack([frames[i + 1 : i + 4] for i in range(ROWS)])
    return {"obs": obs, "next_obs": next_obs, "action": np.arange(ROWS) % 2, "done": np.zeros(ROWS, bool)}


def packed_columns(side=2):
    return pack_frames(stacked_rows(side))


# a chunk referring to the frames of the chunk before it (FramePacker), and that chunk
BASE_NAME, REF_NAME = chunk_name("fz", 1), chunk_name("fz", 2)


def referring_columns():
    """(the base's columns, the columns of the chunk after it, which refer to the base's frames)."""
    packer = FramePacker()
    base = packer.pack(BASE_NAME, stacked_rows())
    packer.written(BASE_NAME)
    ref = packer.pack(REF_NAME, stacked_rows(start=ROWS - 2))
    assert ref[BASE].tolist() == [BASE_NAME] and (ref["obs_frames"] < 0).any()
    return base, ref


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
    header = {
        "descr": np.lib.format.dtype_to_descr(value.dtype) if descr is None else descr,
        "fortran_order": False,
        "shape": value.shape if shape is None else tuple(shape),
    }
    np.lib.format.write_array_header_1_0(out, header)
    out.write(np.ascontiguousarray(value).tobytes())
    return out.getvalue()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = SharedStorage(str(tmp_path_factory.mktemp("fuzz") / "shared"))
    store.chunks.write(BASE_NAME, referring_columns()[0])  # the base the fuzzer's referring chunk needs
    return store


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


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda c: {**c, "obs_frames": c["obs_frames"].astype(np.float32)}, "frame indices are integers"),
        (lambda c: {**c, "action": c["action"].astype("datetime64[s]")}, "has dtype datetime64"),
        (lambda c: {**c, "action": c["action"][:-1]}, "columns of different or no lengths"),
        (lambda c: {k: v[:0] for k, v in c.items()}, "columns of different or no lengths [0]"),
        (lambda c: {**c, POOL: c[POOL][:0]}, "no frames"),
    ],
)
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
        assert set(back) == set(columns) and all(
            np.array_equal(back[k], v) and back[k].dtype == v.dtype for k, v in columns.items()
        )
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


# ---- a chunk that refers to the frames of the chunk before it -------------------------------------------------
def test_a_chunk_referring_to_the_chunk_before_comes_back_self_contained(store, tmp_path):
    base, ref = referring_columns()
    store.chunks.write(REF_NAME, ref)
    back = store.chunks.read(REF_NAME)
    assert BASE not in back and (back["obs_frames"] >= 0).all()
    rebuilt, rows = unpack_frames(back), stacked_rows(start=ROWS - 2)
    assert all(np.array_equal(rebuilt[k], rows[k]) for k in rows)
    # int8 indices over an own pool of 128 frames: the base's frame lands at 128, past int8 (it wrapped to -128)
    narrow = {
        "frame_pool": np.arange(10, 138, dtype=np.uint8)[:, None, None] * np.ones((1, 2, 2), np.uint8),
        "obs_frames": np.append(np.arange(128), -1).astype(np.int8)[:, None],
        BASE: np.array([BASE_NAME]),
    }
    narrow["next_obs_frames"] = narrow["obs_frames"]
    store.chunks.write(REF_NAME, narrow)
    obs = unpack_frames(store.chunks.read(REF_NAME))["obs"][:, 0, 0, 0]
    assert obs.tolist() == list(range(10, 138)) + [base[POOL][0, 0, 0]]
    # unsigned indices (none into the base): as valid (they raised OverflowError, past the door)
    unsigned = {**packed_columns(), BASE: np.array([BASE_NAME])}
    unsigned.update({k: unsigned[k].astype(np.uint16) for k in ("obs_frames", "next_obs_frames")})
    store.chunks.write(REF_NAME, unsigned)
    assert np.array_equal(unpack_frames(store.chunks.read(REF_NAME))["obs"], stacked_rows()["obs"])
    store.chunks.write(REF_NAME, ref)
    assert store.chunks.layout(REF_NAME)[0] == ROWS
    # fetched together from an object store's read: the same
    assert np.array_equal(unpack_frames(store.chunks.read_many([REF_NAME])[REF_NAME])["obs"], rows["obs"])


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda c: {**c, BASE: np.array([chunk_name("fz", 0)])}, "a chunk may only refer to the chunk its collector"),
        (lambda c: {**c, BASE: np.array([REF_NAME])}, "a chunk may only refer to the chunk its collector"),
        (lambda c: {**c, BASE: np.array(["../../etc/passwd"])}, "a chunk may only refer to the chunk its collector"),
        (lambda c: {**c, "obs_frames": np.minimum(c["obs_frames"], -99)}, "points at frame 98 of chunk"),
        (
            lambda c: {**c, "obs_frames": c["obs_frames"].astype(np.uint16)},
            "'obs_frames' points at frame 655",
        ),  # -1: 65535
        (lambda c: {**c, BASE: np.array([1])}, "'frame_base' is int64[1]"),
        (lambda c: {**c, BASE: np.array([BASE_NAME] * 2)}, "'frame_base' is <U10[2]"),
        (
            lambda c: {k: v for k, v in plain_columns().items()} | {BASE: np.array([BASE_NAME])},
            "in a chunk without frames",
        ),
    ],
)
def test_a_reference_no_reader_could_follow_is_damage(store, change, expected):
    store.chunks.write(REF_NAME, change(referring_columns()[1]))
    with pytest.raises(StorageError, match=f"{REF_NAME}.npz: not a valid step-data chunk") as read:
        store.chunks.read(REF_NAME)
    assert expected in str(read.value), read.value


def test_chunks_fetched_together_from_an_object_store_resolve_their_bases(bucket):  # noqa: F811
    """The learner's reads on an object store fetch a round of chunks at once (read_many): a referring chunk's
    base comes from the same round when it is in it, from the bucket when not; gone, the chunk is damaged."""
    store = SharedStorage(f"s3://{bucket}/run")
    base, ref = referring_columns()
    store.chunks.write(BASE_NAME, base)
    store.chunks.write(REF_NAME, ref)
    rows = stacked_rows(start=ROWS - 2)
    for names in ([REF_NAME], [BASE_NAME, REF_NAME]):
        got = store.chunks.read_many(names)
        assert np.array_equal(unpack_frames(got[REF_NAME])["next_obs"], rows["next_obs"]), names
    store.chunks.delete(BASE_NAME)
    got = store.chunks.read_many([REF_NAME])[REF_NAME]
    assert isinstance(got, StorageError) and "which is not on the store" in str(got), got


def test_the_learners_cache_gives_a_chunk_the_frames_of_its_cached_base(tmp_path):
    """A chunk after a cached one takes that one's own frames from the learner's cache: its base is not read from
    the store again (its file removed here to show it), and the stacks rebuild the same."""
    store = SharedStorage(str(tmp_path / "shared"))
    base, ref = referring_columns()
    store.chunks.write(BASE_NAME, base)
    store.chunks.write(REF_NAME, ref)
    rows = RowStore(store, slots=4, slot_rows=ROWS, on_damaged=lambda name, why: pytest.fail(why))
    first, keep = rows.gather([BASE_NAME], np.zeros(ROWS, np.int64), np.arange(ROWS))
    assert keep.all() and np.array_equal(first["obs"], stacked_rows()["obs"])
    store.chunks.delete(BASE_NAME)
    batch, keep = rows.gather([BASE_NAME, REF_NAME], np.array([1, 1, 0]), np.array([0, ROWS - 1, 2]))
    expected = stacked_rows(start=ROWS - 2)
    assert keep.all() and np.array_equal(
        batch["obs"], np.stack([expected["obs"][0], expected["obs"][-1], stacked_rows()["obs"][2]])
    )


def test_a_chunk_whose_base_is_gone_or_damaged_is_damaged_and_quarantined_by_the_learner(tmp_path):
    """The base is evicted and deleted, or lost; or damaged: the referring chunk cannot be rebuilt, and is
    the learner's damage to quarantine (its rows dropped, the coordinator told), never a crash."""
    store = SharedStorage(str(tmp_path / "shared"))
    base, ref = referring_columns()
    store.chunks.write(REF_NAME, ref)
    damaged = []
    rows = RowStore(store, slots=4, slot_rows=ROWS, on_damaged=lambda name, why: damaged.append((name, why)))
    batch, keep = rows.gather([REF_NAME], np.zeros(2, np.int64), np.array([0, 1]))
    assert batch is None and not keep.any()
    assert [name for name, _ in damaged] == [REF_NAME] and "which is not on the store" in damaged[0][1], damaged
    put(store, BASE_NAME, npz_file([("frame_pool.npy", npy(base[POOL], shape=(10**9, 2, 2)))]))
    with pytest.raises(StorageError, match=f"refer to chunk '{BASE_NAME}', which cannot be read: .*declares"):
        store.chunks.read(REF_NAME)
    store.chunks.write(BASE_NAME, {"action": np.zeros(ROWS, np.int64)})  # a chunk, but without frames
    with pytest.raises(StorageError, match="which cannot be read: .*with frames"):
        store.chunks.read(REF_NAME)


# ---- the property: any mutation of a valid chunk file --------------------------------------------------------
BASES = {"plain": plain_columns(), "packed": packed_columns(), "referring": referring_columns()[1]}
DTYPES = ["|O", "<i8", "|V8", "<U0", ">f8", "|b1", "<M8[s]", "<f2", "|S3", "<u2", "<i4"]
SIZES = st.one_of(st.integers(-3, 16), st.integers(2**20, 2**28), st.integers(2**36, 2**45))

member_change = st.one_of(
    st.tuples(st.just("shape"), st.integers(0, 9), st.lists(SIZES, min_size=0, max_size=3)),
    st.tuples(st.just("dtype"), st.integers(0, 9), st.sampled_from(DTYPES)),
    st.tuples(st.just("drop"), st.integers(0, 9)),
    st.tuples(st.just("twice"), st.integers(0, 9)),
    st.tuples(st.just("value"), st.integers(0, 9), st.integers(-(2**31), 2**31 - 1)),
)
byte_change = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True)),
    st.tuples(
        st.just("flip"),
        st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=6),
    ),
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
@given(
    base=st.sampled_from(sorted(BASES)),
    members_changes=st.lists(member_change, max_size=3),
    byte_changes=st.lists(byte_change, max_size=2),
)
def test_fuzz_a_mutated_chunk_loads_valid_or_is_damage_within_its_size(store, base, members_changes, byte_changes):
    blob = mutated(base, members_changes, byte_changes)
    put(store, REF_NAME, blob)  # the referring chunk's name: its base is on the store
    bound = 4 * len(blob) + (1 << 20)  # the file's bytes, a copy, and zipfile's buffers: never what headers claim
    results = []
    for read in (store.chunks.read, store.chunks.layout):
        tracemalloc.start()
        try:
            results.append(read(REF_NAME))
        except StorageError as exc:
            assert not isinstance(exc, StorageFaultError), exc
            assert f"{REF_NAME}.npz: not a valid step-data chunk" in str(exc), exc
            results.append(None)
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        assert peak <= bound, f"{read.__name__} of a {len(blob)}-byte file allocated {peak} bytes"
    columns, layout = results
    event(
        "loaded"
        if columns is not None
        else "damage seen by the headers"
        if layout is None
        else "damage seen in the data"
    )
    if columns is not None:  # what loads is usable, and the coordinator's check agrees on its rows
        assert layout is not None and layout[:2] == (usable(columns), len(blob))
    assert store.health.healthy
