"""Files someone planted or damaged on a run's disk (issues 40 and 41): what is served, loaded or plotted from them.

The videos API serves only regular files inside the store (no link, FIFO, directory), `load_policy` never runs
TorchScript it was not told to run (a planted archive's code runs while loading: it writes a marker file here),
damaged checkpoints and exports are refused with one line, `plot` reads a run without writing into it, and names
with a trailing newline are not names."""

from __future__ import annotations

import os

import numpy as np
import pytest
import requests
import torch
from typing import Tuple

from parallel_rl.errors import ConfigError
from tests.test_after_training import CARTPOLE, run_cli, untrained_run


class Planted(torch.nn.Module):
    """A TorchScript module whose ``__setstate__`` (run by ``torch.jit.load``) writes b"AAAA" into ``marker``."""

    def __init__(self, marker: str):
        super().__init__()
        self.marker = marker
        self.w = torch.zeros(4, dtype=torch.uint8)

    def forward(self, x):
        return x

    @torch.jit.export
    def __getstate__(self) -> Tuple[str, bool]:
        return (self.marker, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[str, bool]) -> None:
        self.marker = state[0]
        self.training = state[1]
        self.w = torch.from_file(state[0], True, 4, dtype=torch.uint8).fill_(65)


def plant_torchscript(path, marker) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.jit.save(torch.jit.script(Planted(str(marker))), str(path))


def test_the_planted_archive_runs_its_code_when_torchscript_loads_it(tmp_path):
    """The test's own premise: loading the planted archive as TorchScript is observable (the marker appears)."""
    plant_torchscript(tmp_path / "planted.pt", tmp_path / "marker")
    assert not (tmp_path / "marker").exists()
    torch.jit.load(str(tmp_path / "planted.pt"))
    assert (tmp_path / "marker").read_bytes() == b"AAAA"


def one_line(text: str) -> bool:
    return "Traceback" not in text and len(text.strip().splitlines()) == 1


@pytest.fixture
def cluster_run(tmp_path):
    """A cluster run's directory of configs/cartpole_dqn.py: its config.json and a shared store whose newest policy
    checkpoint (policy/policy_000000100.pt) is a planted TorchScript archive."""
    from parallel_rl.config import load_config, save_run_config

    run = tmp_path / "run"
    cfg = load_config(CARTPOLE, [f"exp_name={run}"])
    os.makedirs(run)
    save_run_config(cfg, str(run))
    planted = run / "shared" / "policy" / "policy_000000100.pt"
    plant_torchscript(planted, tmp_path / "marker")
    return run, planted, tmp_path / "marker"


def test_load_policy_never_runs_torchscript_planted_as_a_checkpoint(cluster_run):
    import parallel_rl

    run, planted, marker = cluster_run
    for path in (planted, run):  # the file, and the run whose newest checkpoint it is
        with pytest.raises(ConfigError) as refused:
            parallel_rl.load_policy(str(path))
        assert one_line(str(refused.value)) and "policy_000000100.pt" in str(refused.value)
        assert not marker.exists(), f"load_policy({path}) ran the archive's code"


def test_eval_never_runs_torchscript_planted_as_a_checkpoint(cluster_run):
    run, planted, marker = cluster_run
    for source in (["--checkpoint", str(planted)], ["--run", str(run / "shared")]):
        out = run_cli("eval", "-c", CARTPOLE, *source, "--episodes", "1")
        assert out.returncode == 2 and one_line(out.stderr), out.stdout + out.stderr
        assert "policy_000000100.pt" in out.stderr
        assert not marker.exists(), f"eval {source} ran the archive's code"


def cartpole_acting():
    from parallel_rl.after.acting import acting_module
    from parallel_rl.after.checkpoints import spaces_env
    from parallel_rl.config import load_config
    from parallel_rl.policy import create_policy

    cfg = load_config(CARTPOLE)
    env = spaces_env(cfg)
    try:
        return acting_module(create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0)), env.obs_shape
    finally:
        env.close()


def test_exports_are_told_by_their_own_suffix(tmp_path):
    """``export`` names a TorchScript file *.torchscript and an ONNX file *.onnx; load_policy runs a file by that
    suffix (or the kind its caller names), never a .pt."""
    import parallel_rl
    from parallel_rl.after.export import export_acting

    module, obs_shape = cartpole_acting()
    obs = np.random.default_rng(0).normal(size=(50, *obs_shape)).astype(np.float32)
    with torch.no_grad():
        expected = module(torch.from_numpy(obs)).numpy()
    path = export_acting(module, obs_shape, "discrete", "torchscript", str(tmp_path / "p.torchscript"))
    assert np.array_equal(parallel_rl.load_policy(path).act(obs), expected)
    with pytest.raises(ConfigError, match=r"\.torchscript") as refused:
        export_acting(module, obs_shape, "discrete", "torchscript", str(tmp_path / "p.pt"))
    assert one_line(str(refused.value)) and not (tmp_path / "p.pt").exists()
    with pytest.raises(ConfigError, match=r"\.onnx"):
        export_acting(module, obs_shape, "discrete", "onnx", str(tmp_path / "p.torchscript.bin"))
    os.replace(path, tmp_path / "renamed.pt")  # an export under a checkpoint's name: run only when named so
    with pytest.raises(ConfigError):
        parallel_rl.load_policy(str(tmp_path / "renamed.pt"))
    agent = parallel_rl.load_policy(str(tmp_path / "renamed.pt"), kind="torchscript")
    assert np.array_equal(agent.act(obs), expected)


@pytest.mark.parametrize("suffix", [".torchscript", ".onnx"])
@pytest.mark.parametrize("damage", ["random bytes", "truncated"])
def test_a_damaged_export_is_refused_with_one_line(tmp_path, suffix, damage):
    import parallel_rl
    from parallel_rl.after.export import export_acting

    if suffix == ".onnx":
        pytest.importorskip("onnx")
        pytest.importorskip("onnxruntime")
    path = tmp_path / f"p{suffix}"
    if damage == "random bytes":
        path.write_bytes(np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes())
    else:
        module, obs_shape = cartpole_acting()
        export_acting(module, obs_shape, "discrete", suffix[1:], str(path))
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ConfigError) as refused:
        parallel_rl.load_policy(str(path))
    assert one_line(str(refused.value)) and str(path) in str(refused.value)


@pytest.mark.parametrize("command", ["eval", "export"])
def test_a_truncated_checkpoint_is_one_line_and_exit_2(tmp_path, command):
    untrained_run(tmp_path / "run", "cartpole_dqn.py")
    checkpoint = tmp_path / "run" / "ckpt" / "ckpt_final.pt"
    checkpoint.write_bytes(checkpoint.read_bytes()[:10000])  # torch's zip reader fails with OSError EINVAL on it
    extra = ["--episodes", "1"] if command == "eval" else ["--format", "onnx", "-o", str(tmp_path / "x.onnx")]
    out = run_cli(command, "-c", CARTPOLE, "--checkpoint", str(checkpoint), *extra)
    assert out.returncode == 2 and one_line(out.stderr), out.stdout + out.stderr
    assert out.stderr.startswith(f"parallel-rl {command}: error: ") and str(checkpoint) in out.stderr


# ---- the videos API: regular files inside the store only ------------------------------------------------------------
def test_the_videos_api_serves_only_regular_files_inside_the_store(coordinator_factory, tmp_path):
    from parallel_rl.storage import SharedStorage

    coordinator, server = coordinator_factory()
    storage = SharedStorage(str(tmp_path / "shared"))
    video = bytes(range(256)) * 8
    storage.videos.save(1, video)
    videos = tmp_path / "shared" / "videos"
    secret = tmp_path / "secret.txt"
    secret.write_text("outside the store\n")
    os.symlink(secret, videos / storage.videos.name(2))
    os.mkfifo(videos / storage.videos.name(3))
    os.mkdir(videos / storage.videos.name(4))
    fifo = videos / storage.videos.name(3)
    try:
        listed = requests.get(server.url + "/api/v1/videos", timeout=5).json()["videos"]
        assert [v["policy_version"] for v in listed] == [1]
        for version in (2, 3, 4):
            answer = requests.get(f"{server.url}/api/v1/videos/{storage.videos.name(version)}", timeout=5)
            assert answer.status_code == 404, (version, answer.text)
            assert str(tmp_path) not in answer.text and "outside the store" not in answer.text
        whole = requests.get(f"{server.url}/api/v1/videos/{storage.videos.name(1)}", timeout=5)
        assert whole.status_code == 200 and whole.content == video
        assert whole.headers["Content-Length"] == str(len(video)) and "Last-Modified" in whole.headers
        part = requests.get(
            f"{server.url}/api/v1/videos/{storage.videos.name(1)}", headers={"Range": "bytes=10-19"}, timeout=5
        )
        assert part.status_code == 206 and part.content == video[10:20]
        assert requests.get(server.url + "/api/v1/health", timeout=5).json() == {"status": "ok"}
    finally:  # a reader blocked in open() of the FIFO (the bug) is let go, so the server can close
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # ENXIO: nobody was reading it
            pass


def test_a_videos_directory_that_is_a_link_is_not_served(tmp_path):
    from parallel_rl.storage import SharedStorage

    elsewhere = SharedStorage(str(tmp_path / "elsewhere"))
    elsewhere.videos.save(5, b"not in the store")
    storage = SharedStorage(str(tmp_path / "shared"))
    os.symlink(tmp_path / "elsewhere" / "videos", tmp_path / "shared" / "videos")
    assert storage.videos.listing() == []
    with pytest.raises(FileNotFoundError):
        storage.videos.source(storage.videos.name(5))


# ---- names: a trailing newline is not part of a valid name ----------------------------------------------------------
def test_names_with_a_trailing_newline_are_refused():
    from parallel_rl.coordinator.workers import WorkerRegistry
    from parallel_rl.errors import PathOutsideRootError
    from parallel_rl.storage.names import POLICY, VIDEO, check_name
    from parallel_rl.transport import ApiError

    assert check_name("collector-1-0000001") == "collector-1-0000001"
    with pytest.raises(PathOutsideRootError):
        check_name("collector-1-0000001\n")
    assert POLICY.version("policy_000000007.pt") == 7
    assert POLICY.version("policy_000000007.pt\n") is None and VIDEO.version("video_000000007.mp4\n") is None
    with pytest.raises(ApiError) as refused:
        WorkerRegistry().register("collector", "http://127.0.0.1:9", None, "collector-1\n")
    assert refused.value.status == 400


# ---- plot reads a run and writes nothing into it --------------------------------------------------------------------
def cluster_state(root, eval_history) -> None:
    """A coordinator snapshot with ``eval_history`` in the store at ``root``, and no other directory there."""
    from parallel_rl.storage import SharedStorage

    SharedStorage(str(root)).states.save(1, {"eval_history": eval_history}, {"x": np.zeros(2)})
    for name in ("data", "policy", "learner"):
        os.rmdir(root / name)


POINTS = [
    {"t": 1.0, "env_steps": 10, "train_iter": 1, "eval_return": 5.0},
    {"t": 2.0, "env_steps": 20, "train_iter": 2, "eval_return": 7.0},
]


def test_plot_writes_nothing_into_the_runs_it_reads(tmp_path):
    cluster_state(tmp_path / "run", POINTS)
    before = sorted(os.listdir(tmp_path / "run"))
    out = run_cli("plot", str(tmp_path / "run"), "-o", str(tmp_path / "curves.png"))
    assert out.returncode == 0, out.stderr
    assert sorted(os.listdir(tmp_path / "run")) == before == ["coordinator"]


@pytest.mark.parametrize(
    "damage", ["history not a list", "a point without env_steps", "a return not a number", "config.json"]
)
def test_plot_of_a_damaged_run_is_one_line_and_exit_2(tmp_path, damage):
    history = {
        "history not a list": 5,
        "a point without env_steps": [{"t": 1.0, "eval_return": 1.0}],
        "a return not a number": [{**POINTS[0], "eval_return": "high"}],
    }.get(damage, POINTS)
    cluster_state(tmp_path / "run", history)
    if damage == "config.json":
        (tmp_path / "run" / "config.json").write_text('{"env')
    out = run_cli("plot", str(tmp_path / "run"), "-o", str(tmp_path / "curves.png"))
    assert out.returncode == 2 and one_line(out.stderr), out.stdout + out.stderr
    assert out.stderr.startswith("parallel-rl plot: error: ") and str(tmp_path / "run") in out.stderr
