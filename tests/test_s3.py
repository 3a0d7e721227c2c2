"""The shared store on S3: real S3 servers over HTTP on 127.0.0.1, moto's emulator and SeaweedFS (a production
store), and our real code talking to them; every test that takes ``s3_server`` (or ``s3_env``, ``bucket``) runs on
both (:mod:`tests.support.s3`)."""

import logging
import os
import re
from pathlib import Path

import numpy as np
import pytest

from parallel_rl.errors import PathOutsideRootError, StorageError, StorageFaultError, StorageUnavailableError
from parallel_rl.storage import SharedStorage
from tests.support.s3 import (
    S3_SERVERS,
    bucket,  # noqa: F401 (a fixture)
    objects,
    point_at,
    s3_env,  # noqa: F401 (a fixture)
    s3_requests,  # noqa: F401 (a fixture)
    s3_server,  # noqa: F401 (fixtures)
    start_s3,
)
from tests.test_operations import ENV as TOKEN_ENV, free_port

REPO = Path(__file__).resolve().parent.parent


def columns(n=8):
    return {
        "obs": np.arange(n * 4, dtype=np.float32).reshape(n, 4),
        "action": np.arange(n) % 2,
        "done": np.zeros(n, dtype=bool),
    }


# ---- the storage module on S3 --------------------------------------------------------------------
def test_chunks_round_trip_and_leave_the_bucket_when_deleted(bucket):
    store = SharedStorage(f"s3://{bucket}/run")
    assert store.root == f"s3://{bucket}/run" and store.remote
    store.chunks.write("c1", columns())
    assert objects(bucket) == ["run/data/c1.npz"]  # one object, no temp object left behind
    got = store.chunks.read("c1")
    assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in columns().items()}
    assert store.chunks.names() == ["c1"] and store.chunks.exists("c1") and not store.chunks.exists("c2")
    assert store.chunks.delete("c1")
    assert objects(bucket) == []
    with pytest.raises(FileNotFoundError):
        store.chunks.read("c1")


def new_bucket() -> str:
    import uuid

    import boto3

    name = f"rl-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def requests_to(log, bucket):
    """The requests ``log`` recorded since it was last asked, as (method, key) (the query left out); a listing
    of the bucket as ("LIST", its prefix)."""
    from urllib.parse import parse_qs, urlsplit

    found = []
    for method, target in log.taken():
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        if method == "GET" and "list-type" in query:
            found.append(("LIST", query.get("prefix", [""])[0]))
        else:
            found.append((method, parts.path.removeprefix(f"/{bucket}/")))
    return found


def test_reading_an_object_is_one_get_request(s3_requests):
    """A chunk, a round of chunks, a checkpoint: one GET per object and nothing else. s3fs asks an object's size
    (a HEAD) before each GET unless told to read it in one piece; that doubled the requests of the learner's
    batches and of the collectors' policy loads."""
    import torch

    bucket = new_bucket()
    store = SharedStorage(f"s3://{bucket}/run")
    store.chunks.write("c1", columns())
    store.chunks.write("c2", columns())
    store.policies.save(1, {"w": torch.zeros(2)})
    s3_requests.clear()
    store.chunks.read("c1")
    assert requests_to(s3_requests, bucket) == [("GET", "run/data/c1.npz")]
    store.chunks.read_many(["c1", "c2"])
    assert sorted(requests_to(s3_requests, bucket)) == [("GET", "run/data/c1.npz"), ("GET", "run/data/c2.npz")]
    store.policies.load(1)
    assert requests_to(s3_requests, bucket) == [("GET", "run/policy/policy_000000001.pt")]


def test_a_collector_looks_for_a_new_policy_with_one_list_request(s3_requests, tmp_path):
    """A collector asks for new policy checkpoints after every batch of steps. On S3 that is one LIST (at most
    every 0.25 s) whose names serve; it used to list a second time for the names whenever they had changed."""
    from parallel_rl.collector.cluster import ClusterCollector
    from tests.support import toy_cluster_config

    bucket = new_bucket()
    store = SharedStorage(f"s3://{bucket}/run")
    collector = ClusterCollector(toy_cluster_config(tmp_path), store, seed=0)
    try:
        store.policies.save(20, collector.policy.model_state_dict())
        s3_requests.clear()
        assert collector.get_policy_update_info() == 20
        assert requests_to(s3_requests, bucket) == [("LIST", "run/policy/")]
    finally:
        collector.close()


def test_the_sweep_for_stale_temp_files_asks_an_object_store_nothing(s3_requests):
    """The coordinator sweeps the store for temp files left by killed writers (at its start, then every minute);
    an object store's writes leave none, and the sweep listed its 7 directories (14 requests on the run's start
    path) to find that out."""
    bucket = new_bucket()
    store = SharedStorage(f"s3://{bucket}/run")
    store.chunks.write("c1", columns())
    s3_requests.clear()
    assert store.remove_stale_temp_files(0.0) == 0
    assert requests_to(s3_requests, bucket) == []
    assert store.chunks.names() == ["c1"]


def test_pruning_after_a_policy_alone_lists_the_policies_alone(s3_requests):
    """The learner prunes after every policy checkpoint it writes, and saves its whole state only every
    ``save_state_every``: between those the learner states' directory has nothing new to prune, and its listing
    (one request on the learner's publishing path, every checkpoint) is left out."""
    import torch

    bucket = new_bucket()
    store = SharedStorage(f"s3://{bucket}/run")
    for version in (1, 2, 3):
        store.policies.save(version, {"w": torch.zeros(1)})
    store.learner_states.save(1, {"policy": {}, "train_iter": 1})
    s3_requests.clear()
    assert store.prune_checkpoints(keep=2, states=False) == 1
    assert requests_to(s3_requests, bucket) == [("LIST", "run/policy/"), ("DELETE", "run/policy/policy_000000001.pt")]
    assert store.prune_checkpoints(keep=1) == 1  # both families, as after a learner state
    assert [key for _, key in requests_to(s3_requests, bucket)].count("run/learner/") == 1


def test_a_worker_given_the_store_opens_it_once(s3_requests, tmp_path, cli):
    """A worker started with --shared-dir opens the store at once (to fail fast), and the coordinator's config names
    the same store when it connects the worker: one opening, one probe object. It opened it again on every
    adoption: a second client, the bucket check and the probe again, on every worker's start path."""
    from coordinator_app import serve_coordinator
    from parallel_rl.coordinator import Coordinator
    from tests.support import toy_cluster_config

    bucket = new_bucket()
    root = f"s3://{bucket}/run"
    coordinator = Coordinator(toy_cluster_config(tmp_path), SharedStorage(root), "s3-token")
    server = serve_coordinator(coordinator, "127.0.0.1", 0).start()
    coordinator.start()
    try:
        env = {**s3_requests.env(), **TOKEN_ENV, "PARALLEL_RL_TOKEN": "s3-token"}
        worker = cli("collector", "collector", "--coordinator", server.url, "--shared-dir", root, env=env)
        worker.wait_line(r"collector: set up in", timeout=120)
        probes = [
            key for method, key in requests_to(s3_requests, bucket) if key.startswith(f"run/.probe-{worker.pid}-")
        ]
        assert [key.split("-")[1] for key in probes] == [str(worker.pid)] * 2  # one written, the same deleted
    finally:
        coordinator.close(notify_workers=False)
        server.close()


def test_a_directory_emptied_of_its_objects_lists_nothing(bucket):
    """SeaweedFS keeps the directory that a prefix's last object leaves (its filer is a file tree) and lists it as
    an empty object ``data/`` under ``data/``; moto (and AWS) forget the prefix. Either way nothing is in it."""
    store = SharedStorage(f"s3://{bucket}/run")
    store.chunks.write("c1", columns())
    store.policies.save(1, {})
    assert store.chunks.delete("c1") and store.reset() == 1
    for directory in ("data", "policy"):
        assert store.backend.listdir(store.resolve(directory)) == [], directory
    assert store.chunks.names() == [] and store.policies.versions() == []


def test_nothing_is_unpickled_from_the_bucket(bucket):
    import boto3

    store = SharedStorage(f"s3://{bucket}/run")
    with pytest.raises(StorageError, match="dtype object"):
        store.chunks.write("bad", {"obs": np.array([{"a": 1}], dtype=object)})
    import io

    pickled = io.BytesIO()
    np.savez(pickled, obs=np.array([{"a": 1}], dtype=object))  # what an attacker could put there
    boto3.client("s3").put_object(Bucket=bucket, Key="run/data/evil.npz", Body=pickled.getvalue())
    with pytest.raises(StorageError, match="not a valid step-data chunk"):
        store.chunks.read("evil")
    boto3.client("s3").put_object(Bucket=bucket, Key="run/policy/policy_000000001.pt", Body=b"not torch")
    with pytest.raises(StorageError, match="not a loadable checkpoint"):
        store.policies.load(1)


def test_names_from_messages_cannot_leave_the_prefix(bucket):
    store = SharedStorage(f"s3://{bucket}/run")
    for bad in ("../other", "a/../../x", "..", ""):
        with pytest.raises(PathOutsideRootError):
            store.chunks.path(bad)
    with pytest.raises(PathOutsideRootError):
        store.resolve("data/../../elsewhere/x")


def test_checkpoints_are_versioned_pruned_and_announced(bucket):
    import torch

    store = SharedStorage(f"s3://{bucket}/run")
    stamp = store.policies.dir_stamp()
    for version in (3, 10, 7):
        store.policies.save(version, {"w": torch.full((2,), float(version))})
        store.learner_states.save(version, {"policy": {}, "train_iter": version})
    assert store.policies.versions() == [3, 7, 10] and store.policies.latest() == 10
    assert store.policies.load(7)["w"].tolist() == [7.0, 7.0]
    assert store.learner_states.load(store.learner_states.latest()) == {"policy": {}, "train_iter": 10}
    assert store.prune_checkpoints(keep=1) == 4
    assert objects(bucket) == ["run/learner/learner_000000010.pt", "run/policy/policy_000000010.pt"]
    from tests.support import eventually

    eventually(lambda: store.policies.dir_stamp() != stamp, timeout=5, message="the policy listing's stamp changed")


def test_reset_removes_only_our_objects(bucket):
    import boto3

    store = SharedStorage(f"s3://{bucket}/run")
    store.chunks.write("c1", columns())
    store.policies.save(1, {})
    boto3.client("s3").put_object(Bucket=bucket, Key="run/notes.txt", Body=b"mine")
    assert store.reset() == 2
    assert objects(bucket) == ["run/notes.txt"]


def test_endpoint_and_credentials_may_come_from_config_keys(bucket, s3_env, monkeypatch):
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    store = SharedStorage(
        f"s3://{bucket}/run",
        {
            "endpoint_url": s3_env["AWS_ENDPOINT_URL"],
            "key": s3_env["AWS_ACCESS_KEY_ID"],
            "secret": s3_env["AWS_SECRET_ACCESS_KEY"],
        },
    )
    store.chunks.write("c1", columns())
    assert store.chunks.names() == ["c1"] and store.chunks.read("c1")["action"].tolist() == columns()["action"].tolist()


@pytest.mark.parametrize(
    "url, cause",
    [
        ("ftp://example.org/shared", "unsupported protocol 'ftp'"),
        ("nosuchprotocol://x/y", "unsupported protocol 'nosuchprotocol'"),
        ("s3://", "no bucket in the URL"),
    ],
)
def test_unusable_urls_are_refused_with_their_cause(url, cause):
    with pytest.raises(StorageUnavailableError, match=re.escape(cause)):
        SharedStorage(url)


def test_a_missing_bucket_is_refused_at_construction(s3_env):
    with pytest.raises(StorageUnavailableError, match=r"shared store s3://no-such-bucket-here/x: .*bucket"):
        SharedStorage("s3://no-such-bucket-here/x")


# ---- the CLI: bad input fails fast, before any child process starts -------------------------------
@pytest.fixture
def s3_auth_enforced(s3_server, monkeypatch):
    """The S3 server checks credentials: unknown keys get 403 (moto accepts any by default; SeaweedFS checks
    them always)."""
    if s3_server.name == "moto":
        from moto import settings

        monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)


def assert_fails_fast(cli, tmp_path, url, cause, env, *command):
    proc = cli(
        "bad",
        *(command or ("run",)),
        "-c",
        str(REPO / "configs" / "cartpole_dqn_parallel.py"),
        "--shared-dir",
        url,
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        env=env,
    )
    assert proc.wait(60) == 2, proc.output()[-2000:]
    lines = proc.output().strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.output(), proc.output()[-2000:]
    assert url.rstrip("/") in lines[0] and re.search(cause, lines[0]), lines[0]
    assert "REST API" not in proc.output()  # nothing was served, no child was started


@pytest.mark.parametrize("command", ["run", "coordinator", "learner", "collector"])
def test_cli_refuses_a_missing_bucket(cli, tmp_path, s3_env, command):
    assert_fails_fast(cli, tmp_path, "s3://no-such-bucket-here/run", "bucket does not exist", s3_env, command)


def test_cli_refuses_wrong_credentials(cli, tmp_path, bucket, s3_env, s3_auth_enforced):
    env = dict(s3_env, AWS_ACCESS_KEY_ID="AKIAWRONGWRONGWRONG1", AWS_SECRET_ACCESS_KEY="wrong")
    # moto: "The AWS Access Key Id you provided ...", SeaweedFS: "The access key ID you provided ..."
    assert_fails_fast(
        cli,
        tmp_path,
        f"s3://{bucket}/run",
        "(?i)PermissionError: The (AWS )?Access Key Id you provided does not exist",
        env,
    )


def test_cli_refuses_an_unreachable_endpoint(cli, tmp_path):
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    assert_fails_fast(cli, tmp_path, "s3://some-bucket/run", "Could not connect", env)


def test_cli_refuses_an_unsupported_protocol(cli, tmp_path):
    assert_fails_fast(cli, tmp_path, "ftp://example.org/shared", "unsupported protocol 'ftp'", {})


# ---- whole clusters against S3, no shared local directory -------------------------------------------
def own_dirs(tmp_path, name):
    """A process's own working directory and temp dir (nothing on the local disk is shared)."""
    cwd = tmp_path / name
    (cwd / "tmp").mkdir(parents=True)
    return cwd, {"TMPDIR": str(cwd / "tmp")}


def run_roles_on_s3(cli, tmp_path, bucket, s3_env, config, *settings, timeout=120):
    """Coordinator, learner and two collectors as separate processes, each in its own directory; the
    workers learn the store's URL from the coordinator. Returns the coordinator's process."""
    port = str(free_port())
    url = f"http://127.0.0.1:{port}"
    workers = []
    for name, role in (("learner", "learner"), ("collector-0", "collector"), ("collector-1", "collector")):
        cwd, env = own_dirs(tmp_path, name)
        workers.append(cli(name, role, "--coordinator", url, env={**s3_env, **TOKEN_ENV, **env}, cwd=cwd))
    for worker in workers:
        worker.wait_line(r"serving on http://")
    cwd, env = own_dirs(tmp_path, "coordinator")
    coordinator = cli(
        "coordinator",
        "coordinator",
        "-c",
        str(config),
        "--port",
        port,
        "--shared-dir",
        f"s3://{bucket}/run",
        "--set",
        "exp_name=exp",
        *settings,
        env={**s3_env, **TOKEN_ENV, **env},
        cwd=cwd,
    )
    assert coordinator.wait(timeout) == 0, coordinator.output()[-3000:]
    assert len(set(re.findall(r"registered ((?:learner|collector)-\d+)", coordinator.output()))) == 3
    for worker in workers:
        assert worker.wait(30) == 0, worker.output()[-2000:]
    return coordinator


@pytest.mark.slow  # 40-60 s
def test_role_processes_solve_the_toy_env_on_s3(cli, tmp_path, bucket, s3_env):
    from tests.test_operations import TOY_CONFIG

    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    coordinator = run_roles_on_s3(cli, tmp_path, bucket, s3_env, config)
    assert re.search(r"^coordinator: solved: eval return", coordinator.output(), re.M)
    keys = objects(bucket, "run/")
    assert any(k.startswith("run/policy/policy_") for k in keys), keys
    assert not any("/.tmp-" in k or "/.probe-" in k for k in keys), keys
    # TensorBoard stays on each worker's own disk (an object store has no appendable files)
    assert list((tmp_path / "learner" / "exp" / "tensorboard" / "learner-1").iterdir())


@pytest.mark.slow
@pytest.mark.long  # make test-long: the toy-env test above takes the same path in make test
# CartPole through the production store only: the role processes' S3 paths run on both servers in the toy-env test
# above, and this one adds a real learning run (about 20 s of CPU) rather than another server's answers
@pytest.mark.parametrize("s3_server", ["seaweedfs"], indirect=True)
def test_role_processes_solve_cartpole_on_s3(cli, tmp_path, bucket, s3_env):
    coordinator = run_roles_on_s3(
        cli,
        tmp_path,
        bucket,
        s3_env,
        REPO / "configs" / "cartpole_dqn_parallel.py",
        "--set",
        "parallel.commander.max_seconds=150",
        timeout=200,
    )
    assert re.search(r"^coordinator: solved: eval return \d+\.\d >= stop value 195", coordinator.output(), re.M)


@pytest.mark.slow  # ~70 s against moto on this machine; the toy config's 90 s budget is tight under load
def test_run_on_s3_solves_the_toy_env(cli, tmp_path, bucket, s3_env):
    from tests.test_cluster import TOY_CONFIG

    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    cwd, env = own_dirs(tmp_path, "run")
    run = cli(
        "run",
        "run",
        "-c",
        str(config),
        "--shared-dir",
        f"s3://{bucket}/run",
        "--set",
        "exp_name=exp",
        env={**s3_env, **env},
        cwd=cwd,
    )
    assert run.wait(120) == 0, run.output()[-3000:]
    assert re.search(r"^solved: eval return", run.output(), re.M)
    assert not (cwd / "exp" / "shared").exists()
    assert os.listdir(cwd / "exp" / "tensorboard")


def test_read_chunks_fetches_several_and_reports_the_gone(bucket, tmp_path):
    for store in (SharedStorage(str(tmp_path / "shared")), SharedStorage(f"s3://{bucket}/run")):
        read_chunks_fetches_several_and_reports_the_gone(store)


def read_chunks_fetches_several_and_reports_the_gone(store):
    store.chunks.write("c1", columns(3))
    store.chunks.write("c2", columns(5))
    got = store.chunks.read_many(["c1", "c2", "gone"])
    assert {name: None if cols is None else len(cols["obs"]) for name, cols in got.items()} == {
        "c1": 3,
        "c2": 5,
        "gone": None,
    }
    assert store.chunks.read_many([]) == {}  # a batch whose chunks are all cached asks for none


def test_coordinator_state_is_saved_to_and_resumed_from_s3(bucket, tmp_path, caplog):
    """A coordinator whose store is a bucket snapshots there and a new one resumes from it; a damaged newest
    snapshot object falls back to the one before, as on a local disk."""
    import boto3

    from parallel_rl.coordinator import Coordinator, create_parallel_commander
    from tests.support import toy_cluster_config

    cfg = toy_cluster_config(tmp_path)
    url = f"s3://{bucket}/run"

    def coordinator():
        return Coordinator(cfg, SharedStorage(url), token="t", commander=create_parallel_commander(cfg))

    first = coordinator()
    first.storage.chunks.write("c-a", columns(8))
    assert first.replay.add_chunk("c-a", 8, 0, "collector-1")
    first.eval_history.append({"t": 1.0, "policy_version": 0, "env_steps": 8, "train_iter": 0, "eval_return": 2.5})
    path = first.snapshots.save_state()
    assert path.startswith(f"{bucket}/run/coordinator/state_") and path.endswith(".json")
    first.storage.chunks.write("c-b", columns(4))
    assert first.replay.add_chunk("c-b", 4, 0, "collector-1")
    first.snapshots.save_state()
    older, newest = first.storage.states.seqs()
    assert [k for k in objects(bucket, "run/coordinator/")] == [
        f"run/coordinator/state_{seq:09d}.{ext}" for seq in (older, newest) for ext in ("json", "npz")
    ]

    second = coordinator()
    assert second.snapshots.resume() and second.snapshots.resumed_from == newest
    assert second.replay.count() == 12 and second.eval_history == first.eval_history
    assert sorted(second.replay.sample(4, 4, 0)["chunks"]) in (["c-a"], ["c-b"], ["c-a", "c-b"])

    boto3.client("s3").put_object(Bucket=bucket, Key=f"run/coordinator/state_{newest:09d}.npz", Body=b"truncated")
    third = coordinator()
    with caplog.at_level(logging.WARNING, logger="parallel_rl.storage"):
        assert third.snapshots.resume() and third.snapshots.resumed_from == older
    assert third.replay.count() == 8
    assert f"state_{newest:09d}.npz" in caplog.text


@pytest.mark.parametrize("kind", S3_SERVERS)
def test_a_store_that_goes_away_is_a_fault_of_the_store(kind, tmp_path, monkeypatch):
    """An object store down mid-run (here: its server stopped) fails reads and writes as StorageFaultError, which
    workers back off from, not as a bad file or a bug of the task."""
    import boto3

    server = start_s3(kind, tmp_path)
    try:
        point_at(server, monkeypatch)
        boto3.client("s3").create_bucket(Bucket="going-away")
        store = SharedStorage("s3://going-away/run")
        store.chunks.write("c1", columns())
    finally:
        server.stop()
    with pytest.raises(StorageFaultError, match=r"writing a chunk failed on the shared store s3://going-away/run: "):
        store.chunks.write("c2", columns())
    with pytest.raises(StorageFaultError, match=r"reading a chunk failed"):
        store.chunks.read("c1")
    # "is it there?" is no answer either (it said False: a policy announced meanwhile was refused as a lie)
    with pytest.raises(StorageFaultError, match=r"looking for a policy checkpoint failed"):
        store.policies.exists(1)
    assert not store.health.healthy and store.health.faults == 3
