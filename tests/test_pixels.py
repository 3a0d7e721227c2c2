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
from tests.test_cluster import start_run
from tests.test_serial import run_cli

DQN_CONFIG = "configs/minatar_breakout_dqn.py"
# evaluations of one short episode; warm-up and budget small enough for a few seconds of training
TINY = ["--set", "env.n_evaluator_episode=1", "--set", "env.evaluator_env_num=1",
        "--set", "policy.random_collect_size=200"]


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


@pytest.mark.parametrize("kind, shape, conv_dim, out_dim", [
    ("minatar", (10, 10, 4), 16 * 8 * 8, 128),
    ("nature", (4, 84, 84), 64 * 7 * 7, 512),
])
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


@pytest.mark.parametrize("policy_type, kind, shape, dtype", [
    ("dqn", "minatar", (10, 10, 4), np.bool_), ("ppo", "minatar", (10, 10, 4), np.bool_),
    ("dqn", "nature", (4, 84, 84), np.uint8), ("ppo", "nature", (84, 84, 4), np.uint8),
])
def test_policies_scale_uint8_and_read_bool_as_0_1(policy_type, kind, shape, dtype):
    cfg = compile_config({"policy": {"type": policy_type,
                                     "model": {"hidden_size_list": [], "encoder": {"type": kind, "shape": list(shape)}}}})
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
    proc = run_cli("serial", "-c", DQN_CONFIG, "--set", f"exp_name={tmp_path / 'exp'}", *TINY,
                   "--set", "serial.max_env_step=600", "--set", "policy.eval.evaluator.eval_freq=200")
    assert proc.returncode == 3, proc.stderr[-2000:]  # 3: budget used up before the stop value
    assert re.search(r"env_steps=60\d train_iter=400 ", proc.stdout), proc.stdout[-500:]


def test_collector_chunks_keep_bool_observations(tmp_path):
    """A cluster collector's chunk holds the boards as bool: ~2 x 400 bytes of observations a transition, not
    the 3.2 KB of float32 (826 bytes measured with 8 envs; the bound leaves room for the small columns)."""
    from parallel_rl.collector.cluster import ClusterCollector
    from parallel_rl.storage import SharedStorage

    cfg = compile_config({**runpy.run_path("configs/minatar_breakout_dqn_parallel.py")["main_config"],
                          "exp_name": str(tmp_path / "exp")})
    storage = SharedStorage(str(tmp_path / "shared"))
    collector = ClusterCollector(cfg, storage, seed=0)
    try:
        data, _stats = collector.collect(256, eps=1.0)
        collector.send_stepdata("c1-0000001", data)
    finally:
        collector.close()
    back = storage.read_chunk("c1-0000001")
    rows = len(back["obs"])
    assert rows >= 256 and back["obs"].dtype == back["next_obs"].dtype == np.bool_
    assert back["obs"].shape[1:] == (10, 10, 4)
    assert storage.chunks.size("c1-0000001") / rows < 1000


def test_minatar_dqn_config_trains_in_the_cluster(cli, tmp_path):
    """Collectors, learner and evaluator handle MinAtar's bool frames: a policy the learner trained and published
    (version 20 or later) is evaluated."""
    run, url = start_run(cli, tmp_path, "configs/minatar_breakout_dqn_parallel.py", "--collectors", "1", *TINY,
                         "--set", "parallel.commander.eval_freq=20")
    run.wait_line(r"eval of policy ([1-9]\d+): mean return -?\d", timeout=150)
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(60) == 130, run.output()[-3000:]
