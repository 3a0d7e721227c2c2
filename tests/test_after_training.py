"""After training: `parallel-rl eval / plot / export` as real CLI processes on a tiny serial run's checkpoints,
exported files against the torch policy, the notebook API's documented example."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARTPOLE = os.path.join(REPO, "configs", "cartpole_dqn.py")


def run_cli(*args: str, cwd=None, timeout: float = 120.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "parallel_rl", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd
    )


def untrained_run(run_dir, config_name: str) -> str:
    """A run directory holding an untrained policy of ``configs/<config_name>`` as its final checkpoint (what
    ``--run`` reads); returns the config's path."""
    from parallel_rl.after.checkpoints import spaces_env
    from parallel_rl.config import load_config
    from parallel_rl.policy import create_policy
    from parallel_rl.storage import torch_save_atomic

    config = os.path.join(REPO, "configs", config_name)
    cfg = load_config(config)
    env = spaces_env(cfg)
    policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0)
    env.close()
    os.makedirs(os.path.join(run_dir, "ckpt"))
    torch_save_atomic(os.path.join(run_dir, "ckpt", "ckpt_final.pt"), {"policy": policy.state_dict(), "train_iter": 0})
    return config


def train_cartpole(exp_dir, seed: int = 0, steps: int = 600) -> str:
    done = run_cli(
        "serial",
        "-c",
        CARTPOLE,
        "--set",
        f"exp_name={exp_dir}",
        "--set",
        f"seed={seed}",
        "--set",
        f"serial.max_env_step={steps}",
        "--set",
        "policy.eval.evaluator.eval_freq=10",
    )
    assert done.returncode == 3, done.stdout + done.stderr  # the budget ran out before the stop value
    return str(exp_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two seeds of a tiny CartPole DQN serial run (checkpoints, TensorBoard scalars, config.json)."""
    base = tmp_path_factory.mktemp("runs")
    return [train_cartpole(base / f"cartpole_s{seed}", seed) for seed in (0, 1)]


def test_eval_prints_a_table_and_json(runs):
    table = run_cli("eval", "-c", CARTPOLE, "--run", runs[0], "--episodes", "12")
    assert table.returncode == 0, table.stderr
    assert re.search(r"^return\s+\d", table.stdout, re.M) and "12 episodes" in table.stdout
    out = run_cli("--json", "eval", "-c", CARTPOLE, "--set", f"exp_name={runs[0]}", "--episodes", "12")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["episodes"] == 12 and result["policy"] == "dqn" and result["checkpoint"].startswith(runs[0])
    assert 8 <= result["return_mean"] <= 500 and result["env_steps"] >= 12 * 8


def test_eval_records_videos(runs, tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    out = run_cli(
        "eval",
        "-c",
        CARTPOLE,
        "--run",
        runs[0],
        "--episodes",
        "4",
        "--video",
        str(tmp_path / "v"),
        "--video-episodes",
        "2",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    videos = json.loads(out.stdout)["videos"]
    assert [os.path.basename(v) for v in videos] == ["episode-0.mp4", "episode-1.mp4"]
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(videos[0])
    meta = next(reader)
    frames = sum(1 for _ in reader)
    assert meta["size"] == (600, 400) and frames >= 8  # CartPole's 600x400 frames, one per step and the last


def test_eval_video_is_the_evaluated_episode(runs, tmp_path):
    """The recording runs beside the evaluation, in its own process: its MP4s are still the evaluation's first
    episodes (sync vector envs: env i starts from seed + i, as the recording's episode i does)."""
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    out = run_cli(
        "eval",
        "-c",
        CARTPOLE,
        "--run",
        runs[0],
        "--episodes",
        "3",
        "--seed",
        "5",
        "--video",
        str(tmp_path / "v"),
        "--video-episodes",
        "3",
        "--set",
        "env.vector_mode=sync",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    lengths = []
    for path in result["videos"]:
        reader = imageio_ffmpeg.read_frames(path)
        assert next(reader)["size"] == (600, 400)
        lengths.append(sum(1 for _ in reader) - 1)  # a frame per step and one of the last state
    # CartPole pays 1 a step: three returns are three lengths, fixed by their mean, min and max
    assert (sum(lengths) / 3, min(lengths), max(lengths)) == pytest.approx(
        (result["return_mean"], result["return_min"], result["return_max"])
    ), (lengths, result)


def test_eval_records_videos_of_atari_configs(tmp_path):
    """ALE's vector env (the Atari configs) renders no frames: the MP4 shows the game's RGB screen (210x160, at
    60 Hz / frame skip 4 = 15 fps) while the policy plays on the 4x84x84 stacks it was trained on; games cut at
    400 emulator frames: 100 agent steps."""
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    pytest.importorskip("ale_py")
    config = untrained_run(tmp_path, "pong_dqn.py")
    short = ["--set", "env.eval_env_kwargs.max_num_frames_per_episode=400"]
    out = run_cli(
        "eval",
        "-c",
        config,
        "--run",
        str(tmp_path),
        "--episodes",
        "1",
        "--video",
        str(tmp_path / "v"),
        *short,
        "--json",
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["length_mean"] == 100, result
    reader = imageio_ffmpeg.read_frames(result["videos"][0])
    meta = next(reader)
    assert meta["size"] == (160, 210) and meta["fps"] == 15, meta
    frames = np.stack([np.frombuffer(f, np.uint8).reshape(210, 160, 3) for f in reader])
    assert len(frames) == 101  # a frame per step and one of the last state
    red, green, blue = frames.reshape(-1, 3).mean(axis=0)
    assert red > green + 30 and green > blue + 30, (red, green, blue)  # Pong's brown court: colour, not grey


def test_a_failed_recording_is_one_line_and_exit_2(runs, tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    out = run_cli("eval", "-c", CARTPOLE, "--run", runs[0], "--episodes", "2", "--video", str(not_a_dir))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("parallel-rl eval: error: --video: ") and str(not_a_dir) in out.stderr


@pytest.mark.parametrize("case", ["no checkpoint", "unreadable file", "wrong env", "wrong algorithm", "bad episodes"])
def test_bad_input_is_one_line_and_exit_2(runs, tmp_path, case):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    ckpt = sorted((p for p in os.listdir(os.path.join(runs[0], "ckpt"))))[0]
    ckpt = os.path.join(runs[0], "ckpt", ckpt)
    args = {
        "no checkpoint": ["eval", "-c", CARTPOLE, "--run", str(tmp_path)],
        "unreadable file": [
            "export",
            "-c",
            CARTPOLE,
            "--checkpoint",
            str(garbage),
            "--format",
            "torchscript",
            "-o",
            str(tmp_path / "x.torchscript"),
        ],
        "wrong env": ["eval", "-c", os.path.join(REPO, "configs", "pendulum_sac.py"), "--checkpoint", ckpt],
        "wrong algorithm": ["eval", "-c", os.path.join(REPO, "configs", "cartpole_ppo.py"), "--checkpoint", ckpt],
        "bad episodes": ["eval", "-c", CARTPOLE, "--run", runs[0], "--episodes", "0"],
    }[case]
    out = run_cli(*args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith(f"parallel-rl {args[0]}: error: ")


@pytest.mark.parametrize("command", ["eval", "plot", "export"])
def test_help_shows_an_example(command):
    out = run_cli(command, "--help")
    assert out.returncode == 0 and "example:\n  parallel-rl " in out.stdout, out.stdout


def test_plot_groups_seeds_and_draws_references(runs, tmp_path):
    reference = tmp_path / "ref.csv"
    reference.write_text("x,return,label\n300,20,paper\n600,40,paper\n")
    for x, name in (("env_steps", "curves.png"), ("updates", "curves.svg"), ("wall", "wall.png")):
        out = run_cli("plot", *runs, "-o", str(tmp_path / name), "--x", x, "--reference", str(reference))
        assert out.returncode == 0, out.stderr
        assert "cartpole: 2 run(s): cartpole_s0, cartpole_s1" in out.stdout
        assert (tmp_path / name).stat().st_size > 5_000
    assert (tmp_path / "curves.svg").read_text().lstrip().startswith("<?xml")
    bad = run_cli("plot", str(tmp_path), "-o", str(tmp_path / "x.png"))
    assert bad.returncode == 2 and "no eval history" in bad.stderr


def test_band_is_mean_min_max_over_the_runs():
    from parallel_rl.after.plot import band

    a = [{"env_steps": 0, "return": 0.0}, {"env_steps": 10, "return": 10.0}]
    b = [{"env_steps": 0, "return": 2.0}, {"env_steps": 5, "return": 4.0}]
    xs, mean, low, high = band([a, b], "env_steps")
    assert xs.tolist() == [0, 5, 10]
    assert mean.tolist() == [1.0, 4.5, 10.0] and low.tolist() == [0.0, 4.0, 10.0] and high.tolist() == [2.0, 5.0, 10.0]


# ---- export: TorchScript and ONNX against the torch policy --------------------------------------------------
POLICIES = {
    "dqn": ("CartPole-v1", {"type": "dqn", "model": {"hidden_size_list": [32, 32]}}),
    "ppo_discrete": ("CartPole-v1", {"type": "ppo", "model": {"hidden_size_list": [32], "obs_norm": True}}),
    "ppo_continuous": ("Pendulum-v1", {"type": "ppo", "model": {"hidden_size_list": [32], "obs_norm": True}}),
    "sac": ("Pendulum-v1", {"type": "sac"}),
    "td3": ("Pendulum-v1", {"type": "td3"}),
}


def built_policy(name: str):
    from parallel_rl.config import compile_config
    from parallel_rl.envs import EnvManager
    from parallel_rl.policy import create_policy

    env_id, policy = POLICIES[name]
    cfg = compile_config({"env": {"env_id": env_id}, "policy": policy})
    env = EnvManager.from_cfg(cfg.env, 1, seed=0)
    policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0)
    env.close()
    if getattr(policy.model if hasattr(policy, "model") else None, "obs_rms", None) is not None:
        rng = np.random.default_rng(1)  # statistics that are not the identity: the export must carry them
        policy.model.obs_rms.update(rng.normal(3.0, 2.0, size=(500, env.obs_dim)))
    return cfg, env.obs_shape, env.action_spec.kind, policy


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_exported_policies_act_like_the_torch_policy(name, tmp_path):
    from parallel_rl.after.acting import acting_module
    from parallel_rl.after.api import load_policy
    from parallel_rl.after.export import export_acting

    cfg, obs_shape, kind, policy = built_policy(name)
    obs = np.random.default_rng(7).normal(0.0, 3.0, size=(1000, *obs_shape)).astype(np.float32)
    expected = policy.eval_mode.forward(obs)
    module = acting_module(policy)
    with torch.no_grad():
        ours = module(torch.from_numpy(obs)).numpy()
    formats = ["torchscript"] + (["onnx"] if _has("onnx") and _has("onnxruntime") else [])
    outputs = {"acting": ours}
    for fmt in formats:
        path = export_acting(module, obs_shape, kind, fmt, str(tmp_path / f"policy.{fmt}"))
        agent = load_policy(path)
        outputs[fmt] = agent.act(obs)
        assert np.asarray(agent.act(obs[0])).shape == np.asarray(expected[0]).shape
    for fmt, actions in outputs.items():
        if kind == "discrete":
            assert np.array_equal(actions, expected), fmt
        else:
            np.testing.assert_allclose(actions.reshape(expected.shape), expected, rtol=1e-5, atol=1e-5, err_msg=fmt)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_export_cli_and_load_policy_of_a_run(runs, tmp_path):
    out = run_cli(
        "export", "-c", CARTPOLE, "--run", runs[0], "--format", "torchscript", "-o", str(tmp_path / "p.torchscript")
    )
    assert out.returncode == 0, out.stderr
    import parallel_rl

    exported = parallel_rl.load_policy(str(tmp_path / "p.torchscript"))
    from_run = parallel_rl.load_policy(runs[0])  # the newest checkpoint, with the config.json the run wrote
    obs = np.random.default_rng(3).normal(size=(1000, 4)).astype(np.float32)
    assert np.array_equal(exported.act(obs), from_run.act(obs))
    assert from_run.act(obs[0]) in (0, 1)


def test_readme_notebook_example_runs(tmp_path, monkeypatch):
    """The notebook example of the docs' "After training" page, as written (in a scratch directory)."""
    text = open(os.path.join(REPO, "docs", "after-training.md")).read()
    section = text[text.index("# After training") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(REPO)
    os.symlink(os.path.join(REPO, "configs"), tmp_path / "configs")
    namespace: dict = {}
    exec(compile(code, "docs/after-training.md", "exec"), namespace)  # noqa: S102 (our own documentation)
    assert namespace["action"] in (0, 1)


# ---- videos in the cluster: the evaluator records into the shared store; the API lists them; the dashboard plays
def random_act(obs):
    return np.random.default_rng(0).integers(0, 2, size=len(obs))


def test_cluster_evaluator_records_every_n_evaluations(tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    from parallel_rl.config import compile_config
    from parallel_rl.storage import SharedStorage
    from parallel_rl.collector.cluster import ClusterCollector

    cfg = compile_config(
        {
            "exp_name": str(tmp_path / "exp"),
            "env": {"env_id": "CartPole-v1", "collector_env_num": 1, "evaluator_env_num": 2},
            "policy": {"model": {"hidden_size_list": [16]}, "eval": {"evaluator": {"record_every": 2}}},
        }
    )
    storage = SharedStorage(str(tmp_path / "shared"))
    collector = ClusterCollector(cfg, storage, seed=0)
    try:
        for version in range(3):
            storage.policies.save(version, collector.policy.model_state_dict())
            info = collector.evaluate(version, 2)
            assert info.get("video") == (storage.videos.name(version) if version != 1 else None)
    finally:
        collector.close()
    assert [v["policy_version"] for v in storage.videos.listing()] == [2, 0]  # newest first


def test_videos_api_and_dashboard_plays_the_newest(coordinator_factory, tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    import requests

    from parallel_rl.envs.video import encoded_bytes
    from parallel_rl.config import compile_config
    from parallel_rl.storage import SharedStorage
    from tests.support import eventually
    from tests.test_observability import chrome

    coordinator, server = coordinator_factory()
    data, info = encoded_bytes(compile_config({"env": {"env_id": "CartPole-v1"}}).env, random_act, seed=0)
    assert info["frames"] >= 8
    SharedStorage(str(tmp_path / "shared")).videos.save(7, data)
    listed = requests.get(server.url + "/api/v1/videos", timeout=5).json()["videos"]
    assert [(v["name"], v["policy_version"], v["url"]) for v in listed] == [
        ("video_000000007.mp4", 7, "/api/v1/videos/video_000000007.mp4")
    ]
    whole = requests.get(server.url + listed[0]["url"], timeout=5)
    assert whole.status_code == 200 and whole.headers["Content-Type"] == "video/mp4" and whole.content == data
    part = requests.get(server.url + listed[0]["url"], headers={"Range": "bytes=0-99"}, timeout=5)
    assert part.status_code == 206 and part.content == data[:100]
    assert requests.get(server.url + "/api/v1/videos/../run.lock", timeout=5).status_code == 404
    assert requests.get(server.url + "/api/v1/videos/video_000000008.mp4", timeout=5).status_code == 404
    browser = chrome()
    try:
        browser.set_page_load_timeout(30)
        browser.get(server.url + "/")
        duration = eventually(
            lambda: browser.execute_script(
                "const v = document.getElementById('episode-video');"
                "return v && !v.closest('[hidden]') && v.readyState >= 1 && v.duration > 0 ? v.duration : 0;"
            ),
            timeout=20,
            message="the dashboard's <video> loaded with a duration",
        )
        assert abs(duration - info["frames"] / 50) < 0.2  # CartPole renders at 50 fps
        assert "policy v7" in browser.find_element("id", "video-caption").text
    finally:
        browser.quit()


def test_eval_of_a_two_player_game_plays_the_configured_opponents(tmp_path):
    config = untrained_run(tmp_path, "tictactoe_selfplay.py")
    out = run_cli("eval", "-c", config, "--run", str(tmp_path), "--episodes", "4", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    from parallel_rl.config import load_config

    assert set(result["win_rate"]) == set(load_config(config).policy.eval.evaluator.opponents)
    assert all(r[side]["games"] == 4 for r in result["results"].values() for side in ("first", "second"))
    refused = run_cli("export", "-c", config, "--run", str(tmp_path), "--format", "onnx", "-o", str(tmp_path / "x"))
    assert refused.returncode == 2 and "action mask" in refused.stderr


@pytest.mark.slow
def test_cluster_run_records_videos_into_its_shared_store(cli, tmp_path):
    """`parallel-rl run` end to end with record_every=1: the first evaluation's episode is in videos/."""
    pytest.importorskip("imageio_ffmpeg")
    from parallel_rl.storage import SharedStorage

    run = cli(
        "run",
        "run",
        "-c",
        os.path.join(REPO, "configs", "cartpole_dqn_parallel.py"),
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "env.stop_value=5",
        "--collectors",
        "1",
        "--set",
        "policy.eval.evaluator.record_every=1",
        "--port",
        "0",
        env={"PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )
    assert run.wait(180) == 0, run.output()[-3000:]
    videos = SharedStorage(str(tmp_path / "exp" / "shared")).videos.listing()
    assert videos and videos[0]["name"].endswith(".mp4"), run.output()[-3000:]


@pytest.mark.slow
def test_train_api_runs_a_cluster_and_load_policy_reads_its_store(tmp_path, monkeypatch):
    import parallel_rl
    from tests.test_cluster import TOY_CONFIG

    config = tmp_path / "toy.py"
    config.write_text(TOY_CONFIG)
    monkeypatch.setenv("PYTHONPATH", REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = parallel_rl.train(str(config), cluster=True, collectors=1, exp_name=str(tmp_path / "exp"))
    assert run.solved and run.result == 0 and run.run_dir == str(tmp_path / "exp")
    agent = parallel_rl.load_policy(run.run_dir)  # the shared store's newest checkpoint, with the run's config.json
    assert agent.source.startswith(str(tmp_path / "exp" / "shared" / "policy"))
    assert agent.act(np.zeros(agent.obs_shape, dtype=np.float32)) in range(2)
