"""Learning from pixels (issue #25): MinAtar and ALE envs keep their uint8/bool observations from env to chunk,
the minatar and nature encoders read them channels first or last, and the MinAtar configs run end to end with
tiny budgets (the learning curves are benchmarks, not tests)."""

import re
import runpy
import signal
import warnings

import numpy as np
import pytest
import torch

from parallel_rl.collector.serial import SampleSerialCollector
from parallel_rl.config import compile_config
from parallel_rl.envs.env_manager import EnvManager
from parallel_rl.envs.registrars import import_env_modules
from parallel_rl.errors import ConfigError
from parallel_rl.policy import create_policy
from parallel_rl.policy.nets import ConvEncoder, encoder_layers
from parallel_rl.storage import SharedStorage
from tests.test_cluster import start_run
from tests.test_serial import run_cli

DQN_CONFIG = "configs/minatar_breakout_dqn.py"
# evaluations of one short episode; warm-up and budget small enough for a few seconds of training
TINY = [
    "--set",
    "env.n_evaluator_episode=1",
    "--set",
    "env.evaluator_env_num=1",
    "--set",
    "policy.random_collect_size=200",
]


def minatar_dqn_cfg(**policy):
    user = runpy.run_path(DQN_CONFIG)["main_config"]
    user["policy"].update(policy)
    return compile_config(user)


def test_minatar_envs_register_once_and_keep_bool_observations():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # gymnasium warns about every id registered twice
        import_env_modules(["minatar"])
        import_env_modules(["minatar"])
    cfg = minatar_dqn_cfg()
    with EnvManager.from_cfg(cfg.env, 2, seed=0) as env:
        assert env.obs_shape == (10, 10, 4) and env.action_num == 3
        obs = env.reset()
        assert obs.dtype == np.bool_ and obs.shape == (2, 10, 10, 4)
        rng = np.random.default_rng(0)
        ended = False
        for _ in range(300):
            step = env.step(rng.integers(0, 3, 2))
            assert step.obs.dtype == np.bool_ and env.obs.dtype == np.bool_
            ended |= step.episode_ended
        assert ended  # auto-resets on the way kept the dtype too


def test_ale_frame_stacks_stay_uint8_and_float_envs_stay_float32():
    import_env_modules(["ale_py"])
    with EnvManager("ALE/Pong-v5", 1, seed=0) as env:  # ALE's own vector env: 4x84x84 stacks
        assert env.reset().dtype == np.uint8
        assert env.step(np.zeros(1, np.int64)).obs.dtype == np.uint8
    with EnvManager("Pendulum-v1", 1, seed=0) as env:
        assert env.reset().dtype == np.float32


def test_unregistered_env_id_says_which_import_names_to_add():
    with pytest.raises(ConfigError, match=r'import_names.*\["minatar"\]'):
        EnvManager("MinAtar/NoSuchGame-v1", 1)


@pytest.mark.parametrize(
    "kind, shape, conv_dim, out_dim",
    [
        ("minatar", (10, 10, 4), 16 * 8 * 8, 128),
        ("nature", (4, 84, 84), 64 * 7 * 7, 512),
    ],
)
def test_encoders_read_channels_first_and_last_alike(kind, shape, conv_dim, out_dim):
    first = shape if shape[0] < shape[-1] else (shape[2], shape[0], shape[1])  # (C, H, W)
    last = (first[1], first[2], first[0])  # (H, W, C)
    n = int(np.prod(shape))
    [chw], dim_chw = encoder_layers(n, {"type": kind, "shape": list(first), "layout": "chw"})
    [hwc], dim_hwc = encoder_layers(n, {"type": kind, "shape": list(last)})  # auto: channels last here
    [auto], _ = encoder_layers(n, {"type": kind, "shape": list(first)})  # auto: channels first here
    assert dim_chw == dim_hwc == out_dim and auto.channels_first and not hwc.channels_first
    assert chw.fc[0].in_features == conv_dim
    hwc.load_state_dict(chw.state_dict())
    frames = torch.rand(3, *first)
    out = chw(frames.flatten(1))
    assert out.shape == (3, out_dim)
    torch.testing.assert_close(hwc(frames.permute(0, 2, 3, 1).flatten(1)), out)


@pytest.mark.parametrize(
    "policy_type, kind, shape, dtype",
    [
        ("dqn", "minatar", (10, 10, 4), np.bool_),
        ("ppo", "minatar", (10, 10, 4), np.bool_),
        ("dqn", "nature", (4, 84, 84), np.uint8),
        ("ppo", "nature", (84, 84, 4), np.uint8),
    ],
)
def test_policies_scale_uint8_and_read_bool_as_0_1(policy_type, kind, shape, dtype):
    cfg = compile_config(
        {
            "policy": {
                "type": policy_type,
                "model": {"hidden_size_list": [], "encoder": {"type": kind, "shape": list(shape)}},
            }
        }
    )
    policy = create_policy(cfg.policy, int(np.prod(shape)), 4, seed=0)
    assert any(isinstance(m, ConvEncoder) for m in policy.model.modules())
    raw = np.random.default_rng(0).integers(0, 256 if dtype == np.uint8 else 2, (6, *shape)).astype(dtype)
    as_float = raw.astype(np.float32) / (255.0 if dtype == np.uint8 else 1.0)
    assert np.array_equal(policy.forward_eval(raw), policy.forward_eval(as_float))


def test_hidden_layers_may_be_empty_only_after_an_encoder_with_its_own_layer():
    with pytest.raises(ConfigError, match="hidden_size_list must not be empty"):
        create_policy(compile_config({"policy": {"model": {"hidden_size_list": []}}}).policy, 4, 2)
    with pytest.raises(ConfigError, match="layout"):
        encoder_layers(400, {"type": "minatar", "shape": [10, 10, 4], "layout": "nhwc"})


def test_dqn_trains_on_minatar_breakout_with_its_network():
    cfg = minatar_dqn_cfg()
    with EnvManager.from_cfg(cfg.env, 2, seed=0) as env:
        policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0)
        collector = SampleSerialCollector(None, env, policy.collect_mode, nstep=1, discount_factor=0.99)
        batch = collector.collect(300, policy_kwargs={"eps": 1.0})
    assert batch["obs"].dtype == batch["next_obs"].dtype == np.bool_
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(50):
        rows = rng.integers(0, len(batch["obs"]), 32)
        losses.append(float(policy.forward_learn({k: v[rows] for k, v in batch.items()})["loss"]))
    assert np.all(np.isfinite(losses)) and losses[-1] != losses[0]


def test_serial_minatar_dqn_config_runs_end_to_end(tmp_path):
    proc = run_cli(
        "serial",
        "-c",
        DQN_CONFIG,
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        *TINY,
        "--set",
        "serial.max_env_step=600",
        "--set",
        "policy.eval.evaluator.eval_freq=200",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]  # no stop value: the budget is the goal
    assert re.search(r"env_steps=60\d train_iter=400 ", proc.stdout), proc.stdout[-500:]


def test_collector_chunks_keep_bool_observations(tmp_path):
    """A cluster collector's chunk holds the boards as bool: ~2 x 400 bytes of observations a transition, not
    the 3.2 KB of float32 (826 bytes measured with 8 envs; the bound leaves room for the small columns)."""
    from parallel_rl.collector.cluster import ClusterCollector
    from parallel_rl.storage import SharedStorage

    cfg = compile_config(
        {**runpy.run_path("configs/minatar_breakout_dqn_parallel.py")["main_config"], "exp_name": str(tmp_path / "exp")}
    )
    storage = SharedStorage(str(tmp_path / "shared"))
    collector = ClusterCollector(cfg, storage, seed=0)
    try:
        data, _stats = collector.collect(256, eps=1.0)
        collector.send_stepdata("c1-0000001", data)
    finally:
        collector.close()
    back = storage.chunks.read("c1-0000001")
    rows = len(back["obs"])
    assert rows >= 256 and back["obs"].dtype == back["next_obs"].dtype == np.bool_
    assert back["obs"].shape[1:] == (10, 10, 4)
    assert storage.chunks.size("c1-0000001") / rows < 1000


def test_minatar_dqn_config_trains_in_the_cluster(cli, tmp_path):
    """Collectors, learner and evaluator handle MinAtar's bool frames: a policy the learner trained and published
    (version 20 or later) is evaluated."""
    run, url = start_run(
        cli,
        tmp_path,
        "configs/minatar_breakout_dqn_parallel.py",
        "--collectors",
        "1",
        *TINY,
        "--set",
        "parallel.commander.eval_freq=20",
    )
    run.wait_line(r"eval of policy ([1-9]\d+): mean return -?\d", timeout=150)
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(60) == 130, run.output()[-3000:]


ALE_ENV = {"env_id": "ALE/Pong-v5", "import_names": ["ale_py"]}


def test_every_role_reads_the_spaces_of_the_same_ale_env():
    """The learner's spaces (env_spaces) are those of the collectors' and evaluators' envs: ALE's 4x84x84 stacks,
    not gym.make's 210x160x3 frames; so a collector loads the learner's checkpoint."""
    from parallel_rl.envs.fit import env_spaces

    cfg = compile_config(
        {
            "env": {**ALE_ENV, "eval_env_kwargs": {"reward_clipping": False}},
            "policy": {
                "type": "dqn",
                "model": {"hidden_size_list": [], "encoder": {"type": "nature", "shape": [4, 84, 84]}},
            },
        }
    )
    obs_shape, spec = env_spaces(cfg.env, "dqn")
    assert obs_shape == (4, 84, 84) and spec.n == 6
    learner = create_policy(cfg.policy, int(np.prod(obs_shape)), spec, seed=0, device="cpu")
    for evaluating in (False, True):
        with EnvManager.from_cfg(cfg.env, 1, seed=0, evaluating=evaluating) as env:
            assert env.obs_shape == obs_shape and env.action_spec.n == spec.n
            collector = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=1, device="cpu")
            collector.load_model_state_dict(learner.model_state_dict())


PIXEL_CONFIGS = sorted(
    p
    for pattern in ("configs/minatar_*.py", "configs/pong_*.py", "configs/breakout_*.py")
    for p in __import__("glob").glob(pattern)
)


@pytest.mark.parametrize("path", PIXEL_CONFIGS)
def test_pixel_configs_build_their_policy_on_their_env(path):
    """Every MinAtar and Atari config's encoder shape fits its env's observations (4 MinAtar games x DQN/PPO
    derive from the Breakout ones, Atari Breakout from Pong)."""
    from parallel_rl.config import load_config

    cfg = load_config(path, [])
    with EnvManager.from_cfg(cfg.env, 1, seed=0) as env:
        policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0, device="cpu")
        obs = env.reset()
        out = policy.collect_mode.forward(obs, **({"eps": 0.0} if cfg.policy.type == "dqn" else {}))
        action = out["action"] if isinstance(out, dict) else out
        assert np.asarray(action).shape == (1,)


def test_atari_training_envs_play_whole_games_past_lost_lives_and_evaluators_see_raw_returns():
    """With life_loss_info a lost life is ``terminated`` (no bootstrap) but the game goes on: the next step is a real
    transition and the episode (return, length) is the whole game. Evaluators' envs (eval_env_kwargs) end only at
    game over, with unclipped rewards."""
    from parallel_rl.config import load_config

    cfg = load_config("configs/breakout_dqn.py", [])
    rng = np.random.default_rng(0)
    with EnvManager.from_cfg(cfg.env, 2, seed=0) as env:
        env.reset()
        lives_lost = games = 0
        game_over = np.zeros(2, dtype=bool)
        while games < 2:
            step = env.step(rng.integers(0, 4, 2))
            assert (step.valid == ~game_over).all()  # only a game over resets the env: a lost life drops no step
            game_over = step.episode_length > 0
            lost = step.terminated & (step.episode_length == 0)
            lives_lost += int(lost.sum())
            ended = step.episode_length > 0
            games += int(ended.sum())
            assert not np.isnan(step.episode_return[ended]).any()
        assert lives_lost >= 4 * games - 2  # Breakout: 5 lives a game, 4 lost before the game ends
    with EnvManager.from_cfg(cfg.env, 1, seed=0, evaluating=True) as env:
        env.reset()
        while True:
            step = env.step(rng.integers(0, 4, 1))
            if step.terminated[0]:
                assert step.episode_length[0] > 0  # the game, not a life
                break


# a Pong cluster in seconds: one collector of 4 envs, evaluations of 100 agent steps (400 frames), small chunks
PONG_TINY = [
    "--collectors",
    "1",
    "--set",
    "env.collector_env_num=4",
    "--set",
    "env.evaluator_env_num=1",
    "--set",
    "env.n_evaluator_episode=1",
    "--set",
    "env.eval_env_kwargs.max_num_frames_per_episode=400",
    "--set",
    "parallel.commander.collector_task_env_steps=1024",
]


@pytest.mark.slow
@pytest.mark.long  # make test-long: MinAtar's DQN config (above) trains pixels in the cluster in make test
@pytest.mark.parametrize(
    "config, extra",
    [
        (
            "configs/pong_dqn_parallel.py",
            [
                "--set",
                "policy.random_collect_size=500",
                "--set",
                "parallel.commander.eval_freq=100",
                "--set",
                "parallel.collector.chunk_size=64",
                "--set",
                "policy.other.replay_buffer.replay_buffer_size=1000",
            ],
        ),
        (
            "configs/pong_ppo_parallel.py",
            [
                "--set",
                "policy.collect.n_sample=256",
                "--set",
                "policy.learn.batch_size=64",
                "--set",
                "policy.learn.epoch_per_collect=1",  # 4 updates a segment, not 16: the plumbing is the test
                "--set",
                "parallel.commander.eval_freq=2",
                "--set",
                "parallel.collector.chunk_size=256",
            ],
        ),
    ],
)
def test_pong_configs_train_in_the_cluster(cli, tmp_path, config, extra):
    """ALE's frame stacks end to end: packed chunks (each referring to the frames of the chunk before it), a
    learner whose checkpoints the collectors and evaluators load (the same spaces), whole-game evaluations; the
    run stops at its env step budget (exit 3: stop value not met). DQN's replay of 1,000 rows evicts chunks whose
    frames the chunks after them refer to: the learner finds none damaged."""
    run, _url = start_run(cli, tmp_path, config, *PONG_TINY, *extra, "--set", "parallel.commander.max_env_step=2000")
    assert run.wait(240) == 3, run.output()[-3000:]
    assert re.search(r"eval of policy [1-9]\d*: mean return -?\d", run.output())
    found = re.search(r"^stopped: env step budget 2000 used up; .* policy_version=(\d+)", run.output(), re.M)
    assert found and int(found.group(1)) >= 2, run.output()[-3000:]
    assert "Traceback" not in run.output()
    state, _arrays = SharedStorage(str(tmp_path / "exp" / "shared")).states.latest()
    assert state["learn_info"]["damaged_chunks"] == 0, state["learn_info"]
    assert "is damaged" not in run.output(), run.output()[-3000:]


@pytest.mark.parametrize("config", ["configs/pong_ppo.py", "configs/minatar_breakout_dqn.py"])
def test_exported_pixel_policies_take_the_envs_own_observations(config, tmp_path):
    """An exported pixel policy takes uint8 frames (bool boards) as the env gives them and acts as the policy does
    (scaling by 1/255 inside, once), in TorchScript and ONNX."""
    import parallel_rl
    from parallel_rl.after.acting import acting_module
    from parallel_rl.after.export import export_acting
    from parallel_rl.config import load_config

    cfg = load_config(config, [])
    with EnvManager.from_cfg(cfg.env, 1, seed=0) as env:
        policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0, device="cpu")
        shape, dtype, kind = env.obs_shape, env.obs_dtype, env.action_spec.kind
    rng = np.random.default_rng(0)
    obs = (rng.integers(0, 256, (64, *shape)) if dtype == np.uint8 else rng.random((64, *shape)) < 0.3).astype(dtype)
    expected = policy.eval_mode.forward(obs)
    for fmt in ("torchscript", "onnx"):
        path = export_acting(acting_module(policy), shape, kind, fmt, str(tmp_path / f"p.{fmt}"), dtype.name)
        agent = parallel_rl.load_policy(path)
        assert agent.obs_dtype == dtype
        assert np.array_equal(agent.act(obs), expected), fmt
        assert np.array_equal(agent.act(obs[0]), expected[0])


# ---- videos of ALE configs: ALE's vector env cannot render; the policy plays on its stacks, a twin shows the screen
def pong_eval_cfg(frames: int = 400):
    """pong_dqn.py's env with games cut at ``frames`` emulator frames (``frames / 4`` agent steps)."""
    from parallel_rl.config import load_config

    return load_config("configs/pong_dqn.py", [f"env.eval_env_kwargs.max_num_frames_per_episode={frames}"])


def test_ale_recording_acts_on_the_evaluators_frame_stacks(tmp_path):
    """A cluster evaluator's recording (record_every) of an ALE config: the policy is handed, step by step, the
    observations an evaluator's env gives for the same seed and actions (4x84x84 uint8 stacks, whole games, raw
    rewards), and the video lands in the shared store."""
    pytest.importorskip("imageio_ffmpeg")
    from parallel_rl.envs.video import record_to_store
    from parallel_rl.storage import SharedStorage

    cfg = pong_eval_cfg()
    seen, rng = [], np.random.default_rng(0)

    def act(obs):
        seen.append(obs.copy())
        return rng.integers(0, 6, size=len(obs))

    storage = SharedStorage(str(tmp_path / "shared"))
    assert record_to_store(storage, cfg, act, 3, seed=7) == storage.videos.name(3)
    assert [v["policy_version"] for v in storage.videos.listing()] == [3]
    assert len(seen) == 100 and seen[0].shape == (1, 4, 84, 84) and seen[0].dtype == np.uint8
    assert not seen[0][0, :3].any() and seen[0][0, 3].any()  # ALE's first stack: three zero frames, then the screen
    rng = np.random.default_rng(0)
    with EnvManager.from_cfg(cfg.env, 1, seed=7, evaluating=True) as env:
        obs = env.reset()
        for t, recorded in enumerate(seen):
            assert np.array_equal(recorded, obs), f"step {t}"
            obs = env.step(rng.integers(0, 6, size=1)).obs


def test_ale_video_frames_show_the_game_the_policy_plays():
    """The video's RGB frames are the screen of the policy's game, step for step: what moves on the frame (grey,
    sampled down to 84x84) moves where the newest frame of the policy's stack changes, at the same step and not
    at a neighbouring one."""
    from parallel_rl.envs.video import AleScreen, recording_env

    assert AleScreen.screen_size("ALE/Carnival-v5") == {"img_height": 214, "img_width": 160}  # not every game 210
    manager, screen = recording_env(pong_eval_cfg(2000).env, seed=3)
    newest, shown = [], []
    rows, cols = ((np.arange(84) + 0.5) * 210 / 84).astype(int), ((np.arange(84) + 0.5) * 160 / 84).astype(int)
    try:
        manager.reset(seed=3)
        screen.reset(3)
        assert screen.render().shape == (210, 160, 3) and screen.render().dtype == np.uint8 and screen.fps == 15
        rng = np.random.default_rng(1)
        for _ in range(300):
            actions = rng.integers(0, 6, size=1)
            step = manager.step(actions)
            screen.step(actions, step)
            newest.append(step.obs[0, -1].astype(np.float64))
            shown.append((screen.render().astype(np.float64) @ [0.299, 0.587, 0.114])[np.ix_(rows, cols)])
    finally:
        screen.close()
        manager.close()

    def motion_match(lag: int) -> float:
        pairs = [(newest[t] - newest[t - 1], shown[t + lag] - shown[t + lag - 1]) for t in range(10, 290)]
        return float(np.mean([np.corrcoef(a.ravel(), b.ravel())[0, 1] for a, b in pairs if a.any() and b.any()]))

    same, before, after = motion_match(0), motion_match(-1), motion_match(1)
    assert same > 0.5 and max(before, after) < 0.2, (same, before, after)
