"""Fuzzing every file family read from the shared store (issue #41): each has one validating loader, and whatever
bytes lie at a name (a valid file truncated, bytes flipped, values of the wrong type, sizes declared huge), its
loader returns what its readers can use or raises the store's damage error, StorageError (for the run's
``config.json``, beside the store: ConfigError), never another exception, and allocates no more than the file's
size warrants. Chunks have theirs in tests/test_chunk_loader.py. Real files on a real store; hypothesis mutates
valid files of each family."""

from __future__ import annotations

import io
import json
import resource
import struct
import tracemalloc
import zipfile

import pytest
import torch
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from parallel_rl.config import read_run_config, save_run_config
from parallel_rl.coordinator import Coordinator
from parallel_rl.errors import ConfigError, StorageError, StorageFaultError
from parallel_rl.storage import SharedStorage
from tests.support import damaged, toy_cluster_config

JSON = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.sampled_from([2**64, -(10**30)]), st.floats(), st.text(max_size=12)
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8,
)
byte_change = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True)),
    st.tuples(
        st.just("flip"),
        st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=6),
    ),
)


def bounded(read, size: int):
    """``read()``'s result, or the StorageError it raised (never a fault of the store: the store is fine),
    checking what it allocated: Python's heap (tracemalloc) and the process's peak (C allocations: torch's)."""
    bound = 4 * size + (4 << 20)
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    try:
        return read()
    except StorageError as exc:
        assert not isinstance(exc, StorageFaultError), exc
        assert "\n" not in str(exc), exc
        return exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak <= bound, f"a {size}-byte file made {read} allocate {peak} bytes"
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) * 1024
        assert grown <= 256 << 20, f"a {size}-byte file grew the process's peak by {grown} bytes"


# ---- checkpoints: policy, learner state, league snapshot ----------------------------------------------------
def torch_bytes(obj, **kw) -> bytes:
    out = io.BytesIO()
    torch.save(obj, out, **kw)
    return out.getvalue()


def model():
    return {"model": {"w": torch.arange(0x1234, dtype=torch.float32), "b": torch.ones(3)}}


def with_record_size(blob: bytes, member: str, size: int) -> bytes:
    """``blob`` (a zip) whose central directory says ``member`` holds ``size`` bytes."""
    blob = bytearray(blob)
    at = blob.find(b"PK\x01\x02")
    while at != -1:
        length = struct.unpack_from("<H", blob, at + 28)[0]
        if blob[at + 46 : at + 46 + length].decode(errors="replace").endswith(member):
            struct.pack_into("<II", blob, at + 20, size, size)
        at = blob.find(b"PK\x01\x02", at + 1)
    return bytes(blob)


def with_pickle(blob: bytes, old: bytes, new: bytes) -> bytes:
    """``blob`` (torch.save's zip) with ``old`` replaced by ``new`` in its pickle (a declared length, a type)."""
    source = zipfile.ZipFile(io.BytesIO(blob))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for info in source.infolist():
            data = source.read(info)
            archive.writestr(info.filename, data.replace(old, new) if info.filename.endswith("data.pkl") else data)
    return out.getvalue()


LEARNER = {"policy": model(), "train_iter": 7}
CHECKPOINT_BASES = {
    "policy": ("policies", torch_bytes(model())),
    "league": ("league", torch_bytes(model())),
    "learner": ("learner_states", torch_bytes(LEARNER)),
}
# whole files of the wrong kind: valid torch files of other types and shapes, the legacy format, sizes declared huge
WRONG = {
    "a list": torch_bytes([1, 2]),
    "a tensor": torch_bytes(torch.zeros(2)),
    "int keys": torch_bytes({1: torch.zeros(1)}),
    "a learner state without its policy": torch_bytes({"train_iter": 3}),
    "a learner state whose policy is a number": torch_bytes({"policy": 3, "train_iter": 3}),
    "a negative iteration": torch_bytes({"policy": model(), "train_iter": -1}),
    "an iteration that is a float": torch_bytes({"policy": model(), "train_iter": 1.5}),
    "an iteration that is a tensor": torch_bytes({"policy": model(), "train_iter": torch.tensor(2)}),
    "nested deep": torch_bytes(__import__("functools").reduce(lambda acc, _: {"a": acc}, range(200), {})),
    "legacy format": torch_bytes(model(), _use_new_zipfile_serialization=False),
    "a record declared 4 GiB": with_record_size(torch_bytes(model()), "data/0", 0xFFFFFFF0),
    "a storage declared 2**31 elements": with_pickle(torch_bytes(model()), b"M\x34\x12", b"J\xff\xff\xff\x7f"),
    "a storage declared of another type": with_pickle(torch_bytes(model()), b"FloatStorage", b"LongStorage"),
    "empty": b"",
    "json": b'{"model": {}}',
}


def zip_deflated(blob: bytes) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(blob))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            archive.writestr(info.filename, source.read(info))
    return out.getvalue()


WRONG["compressed members"] = zip_deflated(torch_bytes(model()))  # torch.save stores them


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return SharedStorage(str(tmp_path_factory.mktemp("fuzz") / "shared"))


def put(path: str, blob: bytes) -> None:
    import os

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(blob)


def usable_checkpoint(family: str, state) -> None:
    """What a checkpoint's readers count on: a dict of named parts; a learner state's policy and iteration."""
    assert isinstance(state, dict) and all(isinstance(k, str) for k in state), state
    if family == "learner":
        assert isinstance(state["policy"], dict) and type(state["train_iter"]) is int and state["train_iter"] >= 0


@pytest.mark.parametrize("family", sorted(CHECKPOINT_BASES))
@pytest.mark.parametrize("wrong", sorted(WRONG))
def test_a_checkpoint_of_the_wrong_kind_is_damage(store, family, wrong):
    attr, _ = CHECKPOINT_BASES[family]
    checkpoints = getattr(store, attr)
    put(checkpoints.path(5), WRONG[wrong])
    loaded = bounded(lambda: checkpoints.load(5), len(WRONG[wrong]))
    if family != "learner" and wrong in (
        "a learner state without its policy",
        "a negative iteration",
        "an iteration that is a float",
        "an iteration that is a tensor",
        "a learner state whose policy is a number",
    ):
        usable_checkpoint(family, loaded)  # a policy checkpoint of other names: the model's loader says what
        return
    assert isinstance(loaded, StorageError), f"{wrong}: loaded {loaded!r:.200}"
    assert f"{checkpoints.path(5)}: not a loadable checkpoint" in str(loaded), loaded
    assert store.health.healthy


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(family=st.sampled_from(sorted(CHECKPOINT_BASES)), changes=st.lists(byte_change, min_size=1, max_size=2))
@example(family="policy", changes=[("truncate", 0.5)])  # torch's EINVAL was taken for a fault of the store
def test_fuzz_a_damaged_checkpoint_loads_usable_or_is_damage(store, family, changes):
    attr, blob = CHECKPOINT_BASES[family]
    checkpoints = getattr(store, attr)
    blob = damaged(blob, changes)
    put(checkpoints.path(3), blob)
    loaded = bounded(lambda: checkpoints.load(3), len(blob))
    event("damage" if isinstance(loaded, StorageError) else "loaded")
    if not isinstance(loaded, StorageError):
        usable_checkpoint(family, loaded)
    assert store.health.healthy


# ---- coordinator state: state_<seq>.json (the commit point) and its arrays, state_<seq>.npz ----------------
@pytest.fixture(scope="module")
def saved_state(tmp_path_factory):
    """A real coordinator's snapshot (a task, counters, the replay index), as bytes: (json, npz)."""
    tmp = tmp_path_factory.mktemp("state")
    cfg = toy_cluster_config(tmp)
    storage = SharedStorage(str(tmp / "shared"))
    coordinator = Coordinator(cfg, storage, "test-token")
    coordinator.snapshots.save_state()
    json_path, npz_path = storage.states.paths(storage.states.seqs()[-1])
    with open(json_path, "rb") as f, open(npz_path, "rb") as g:
        return Saved(cfg, f.read(), g.read())


class Saved(tuple):
    """(config, json bytes, npz bytes) of a snapshot, shown short (a failing example prints its arguments)."""

    def __new__(cls, *parts):
        return super().__new__(cls, parts)

    def __repr__(self):
        return f"Saved(<config>, <{len(self[1])} bytes of JSON>, <{len(self[2])} bytes of arrays>)"


def json_mutation():
    """A change of the snapshot's JSON: one value (found by its path of keys) replaced, or a key dropped."""
    return st.tuples(st.lists(st.integers(0, 50), min_size=1, max_size=4), st.one_of(JSON, st.just(KeyError)))


def mutate_json(meta, path, value):
    node = meta
    for step, n in enumerate(path):
        if isinstance(node, dict) and node:
            key = sorted(node)[n % len(node)]
        elif isinstance(node, list) and node:
            key = n % len(node)
        else:
            return meta
        if step == len(path) - 1 or not isinstance(node[key], (dict, list)) or not node[key]:
            if value is KeyError:
                del node[key]
            else:
                node[key] = value
            return meta
        node = node[key]
    return meta


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    json_changes=st.lists(json_mutation(), max_size=3),
    json_bytes=st.lists(byte_change, max_size=1),
    npz_bytes=st.lists(byte_change, max_size=1),
)
@example(json_changes=[([1], "seq")], json_bytes=[], npz_bytes=[])
def test_fuzz_a_damaged_coordinator_state_resumes_or_is_damage(
    tmp_path, saved_state, json_changes, json_bytes, npz_bytes
):
    cfg, json_blob, npz_blob = saved_state
    meta = json.loads(json_blob)
    for path, value in json_changes:
        meta = mutate_json(meta, path, value)
    json_blob = damaged(json.dumps(meta).encode(), json_bytes)
    npz_blob = damaged(npz_blob, npz_bytes)
    storage = SharedStorage(str(tmp_path / "shared"))
    json_path, npz_path = storage.states.paths(1)
    put(json_path, json_blob)
    put(npz_path, npz_blob)
    loaded = bounded(storage.states.latest, len(json_blob) + len(npz_blob))
    coordinator = Coordinator(cfg, storage, "test-token")
    try:
        resumed = coordinator.snapshots.resume()
    except StorageError as exc:
        assert not isinstance(exc, StorageFaultError) and "\n" not in str(exc), exc
        resumed = exc
    event(
        "state damage"
        if isinstance(loaded, StorageError)
        else "restored"
        if resumed is True
        else "refused when restored"
    )
    if isinstance(loaded, StorageError):
        assert isinstance(resumed, StorageError), resumed
    if resumed is True:  # what was restored answers as a coordinator's state does
        json.dumps(coordinator.summary())


# ---- the run's config.json (beside the store: what load_policy and plot read) ------------------------------
@settings(deadline=None)
@given(
    changes=st.lists(json_mutation(), max_size=3),
    raw=st.lists(byte_change, max_size=1),
    whole=st.one_of(st.none(), JSON),
)
def test_fuzz_a_damaged_run_config_is_one_config_error(tmp_path_factory, changes, raw, whole):
    directory = tmp_path_factory.mktemp("run")
    cfg = toy_cluster_config(directory)
    path = save_run_config(cfg, str(directory))
    with open(path, "rb") as f:
        meta = json.loads(f.read()) if whole is None else whole
    for where, value in changes:
        meta = mutate_json(meta, where, value)
    blob = damaged(json.dumps(meta).encode(), raw)
    put(path, blob)
    try:
        loaded = read_run_config(path)
    except ConfigError as exc:
        assert path in str(exc) and "\n" not in str(exc), exc
        return
    assert isinstance(loaded, dict)
