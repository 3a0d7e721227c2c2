"""MuJoCo continuous control (issue #24): TD3, the random warm-up, and the shipped configs end to end with tiny
budgets (the learning curves are benchmarks: benchmarks/mujoco.py)."""

import re

import numpy as np
import pytest
import torch

from parallel_rl.config import compile_config
from parallel_rl.envs.env_manager import EnvManager
from parallel_rl.errors import ConfigError
from parallel_rl.policy import create_policy
from parallel_rl.collector.serial import SampleSerialCollector
from tests.test_cluster import start_run
from tests.test_coordinator import slaves  # noqa: F401 (a fixture)
from tests.test_serial import run_cli

# 50-step episodes: evaluations (1,000-step HalfCheetah episodes otherwise) cost a few hundred env steps
SHORT = [
    "--set",
    'env.env_kwargs={"max_episode_steps": 50}',
    "--set",
    "env.n_evaluator_episode=1",
    "--set",
    "env.evaluator_env_num=1",
]


def _td3(**learn):
    cfg = compile_config(
        {
            "env": {"env_id": "Pendulum-v1"},
            "policy": {
                "type": "td3",
                "learn": {"batch_size": 32, **learn},
                "model": {"actor_hidden_size_list": [16], "critic_hidden_size_list": [16]},
            },
        }
    )
    return cfg


def _params(module):
    return torch.cat([p.detach().flatten().clone() for p in module.parameters()])


def test_td3_moves_actor_and_targets_only_every_policy_delay_updates():
    cfg = _td3(policy_delay=3)
    with EnvManager("Pendulum-v1", 2, seed=0) as env:
        policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0, device="cpu")
        batch = SampleSerialCollector(None, env, policy.collect_mode, nstep=1, discount_factor=0.99).collect(32)
    nets = ("actor", "actor_target", "q1", "target_q1")
    for update in range(1, 7):
        before = {name: _params(getattr(policy, name)) for name in nets}
        info = policy.forward_learn(batch)
        moved = {name: not torch.equal(before[name], _params(getattr(policy, name))) for name in nets}
        delayed = update % 3 == 0
        assert moved == {"actor": delayed, "actor_target": delayed, "q1": True, "target_q1": delayed}, update
        assert info["actor_updated"] == float(delayed)


def test_td3_explores_with_bounded_gaussian_noise_and_evaluates_deterministically():
    cfg = _td3()
    with EnvManager("Pendulum-v1", 1, seed=0) as env:
        policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0, device="cpu")
        obs = np.repeat(env.reset(), 2000, axis=0)
    greedy = policy.forward_eval(obs)
    assert np.array_equal(greedy, policy.forward_eval(obs))
    noisy = policy.forward_collect(obs)
    assert noisy.shape == greedy.shape and noisy.dtype == np.float32
    assert np.all(np.abs(noisy) <= 2.0)  # Pendulum's bounds
    # exploration_noise 0.1 in the [-1, 1] scale is 0.2 in Pendulum's torque (scale 2), away from the bounds
    inside = np.abs(greedy[:, 0]) < 1.0
    assert abs(np.std(noisy[inside, 0] - greedy[inside, 0]) - 0.2) < 0.03


@pytest.mark.parametrize(
    "learn, match", [({"policy_delay": 0}, "policy_delay=0"), ({"noise_clip": -1.0}, "noise_clip=-1.0")]
)
def test_td3_bad_settings_name_the_value(learn, match):
    with EnvManager("Pendulum-v1", 1, seed=0) as env, pytest.raises(ConfigError, match=match):
        create_policy(_td3(**learn).policy, env.obs_dim, env.action_spec, seed=0, device="cpu")  # compile refuses it


def test_serial_warm_up_collects_random_steps_before_the_first_update(tmp_path):
    """policy.random_collect_size env steps come first, with no update: the rest of the budget is trained at
    the config's ratio (4 env steps, 4 updates per collect), so the updates are exactly budget - warm-up."""
    proc = run_cli(
        "serial",
        "-c",
        "configs/pendulum_td3.py",
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "policy.random_collect_size=400",
        "--set",
        "serial.max_env_step=480",
        "--set",
        "policy.learn.batch_size=16",
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "collecting 400 transitions with random actions" in proc.stderr
    assert re.search(r"env_steps=480 train_iter=80 ", proc.stdout), proc.stdout[-500:]


def test_coordinator_hands_out_random_warm_up_then_batches_only_once_it_is_in(coordinator_factory, slaves, tmp_path):
    """Collectors are told to act randomly until the cluster has policy.random_collect_size env steps, may run
    that far ahead of the learner, and the learner gets no batch before the warm-up is in the buffer (its own
    min_buffer_size, 8, is below it)."""
    from tests.support import toy_cluster_config

    cfg = toy_cluster_config(
        tmp_path, learner={"min_buffer_size": 8}, commander={"max_env_steps_per_update": 1.0, "warmup_env_steps": 4}
    )
    cfg.policy.random_collect_size = 20
    coordinator, server = coordinator_factory(cfg)
    collector = slaves("collector", server.url)
    assert collector.got_task.wait(5)
    task_id = collector.received[0].task_id

    def control():
        return collector.coordinator.post(f"/api/v1/workers/{collector.worker_id}/metadata", {"messages": []})[
            "control"
        ]

    def batches():
        return learner.coordinator.post(
            "/api/v1/buffers/default/sample",
            {"worker_id": learner.worker_id, "batch_size": 4, "batches": 2, "wait": 0.2},
        )["batches"]

    first = control()
    assert first["random_collect"] is True and first["allowed_env_steps"] == 20
    learner = slaves("learner", server.url, run=False)
    collector.write_chunk(task_id, "warm-1", n=16)
    assert control()["random_collect"] is True
    assert batches() == []  # 16 rows: above min_buffer_size, below the warm-up
    collector.write_chunk(task_id, "warm-2", n=8)
    assert control()["random_collect"] is False
    assert len(batches()) == 2


@pytest.mark.parametrize(
    "config, env_id",
    [
        ("halfcheetah_td3", "HalfCheetah-v5"),
        ("hopper_sac", "Hopper-v5"),
        ("halfcheetah_sac", "Walker2d-v5"),
        ("halfcheetah_td3", "Ant-v5"),
    ],
)
def test_mujoco_configs_train_serial(tmp_path, config, env_id):
    proc = run_cli(
        "serial",
        "-c",
        f"configs/{config}.py",
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        f"env.env_id={env_id}",
        *SHORT,
        "--set",
        "policy.random_collect_size=500",
        "--set",
        "serial.max_env_step=700",
        "--set",
        "policy.eval.evaluator.eval_freq=100",
        "--set",
        "policy.learn.batch_size=64",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]  # no stop value: the budget is the goal
    assert re.search(r"env_steps=700 train_iter=200 ", proc.stdout), proc.stdout[-500:]


def test_mujoco_sac_config_trains_in_the_cluster(cli, tmp_path):
    run, url = start_run(
        cli,
        tmp_path,
        "configs/halfcheetah_sac_parallel.py",
        "--collectors",
        "1",
        "--set",
        "policy.random_collect_size=300",
        "--set",
        "parallel.commander.max_env_step=600",
        "--set",
        "parallel.commander.eval_freq=100",
        # collectors wait for the learner past the 300 random steps (the default warm-up, 1,000, is more than
        # the budget: on a loaded box the collector could use all 600 before the learner's first update)
        "--set",
        "parallel.commander.warmup_env_steps=300",
        *SHORT,
        "--set",
        "policy.learn.batch_size=64",
    )
    assert run.wait(120) == 0, run.output()[-3000:]  # no stop value: the budget is the goal
    assert re.search(r"env step budget 600 used up", run.output())
    assert re.search(r"eval of policy \d+: mean return -?\d", run.output())


# ---- PPO as published for MuJoCo: normalisation that works across processes ---------------------------
from parallel_rl.policy.nets import RunningMeanStd  # noqa: E402
from parallel_rl.policy.ppo import discounted_returns  # noqa: E402


def test_running_statistics_merged_batch_by_batch_equal_those_of_all_the_data():
    data = np.random.default_rng(0).normal(3.0, 2.0, size=(1000, 4))
    rms = RunningMeanStd((4,))
    for part in np.split(data, [10, 11, 500, 640]):
        rms.update(part)
    np.testing.assert_allclose(rms.mean.numpy(), data.mean(0), rtol=1e-12)
    np.testing.assert_allclose(rms.var.numpy(), data.var(0), rtol=1e-10)
    assert float(rms.count) == 1000


def test_discounted_returns_restart_at_episode_ends_and_per_lane():
    reward = np.array([1.0, 10.0, 1.0, 10.0, 1.0, 10.0])
    env_id = np.array([0, 1, 0, 1, 0, 1])
    end = np.array([False, False, True, False, False, False])
    got = discounted_returns(reward, end, env_id, 0.5)
    np.testing.assert_allclose(got, [1.0, 10.0, 1.5, 15.0, 1.0, 17.5])


def _ppo_mujoco(env, **learn):
    cfg = compile_config(
        {
            "env": {"env_id": "Hopper-v5"},
            "policy": {
                "type": "ppo",
                "model": {"hidden_size_list": [16], "obs_norm": True, "orthogonal_init": True},
                "learn": {"epoch_per_collect": 1, "batch_size": 64, "reward_norm": True, **learn},
            },
        }
    )
    policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0, device="cpu")
    return cfg, policy, SampleSerialCollector(None, env, policy.collect_mode, nstep=1, discount_factor=0.99)


def test_ppo_normalizes_with_the_statistics_its_collectors_used_then_ships_the_new_ones():
    with EnvManager("Hopper-v5", 2, seed=0) as env:
        cfg, learner, collector = _ppo_mujoco(env)
        _, actor, _ = _ppo_mujoco(env)  # a collector process's copy
        segment = collector.collect(256, drop_extra=False)
        obs = segment["obs"].reshape(len(segment["obs"]), -1)
        assert float(learner.model.obs_rms.count) == 0  # the first segment was collected with empty statistics
        learner.forward_learn(segment)
        np.testing.assert_allclose(learner.model.obs_rms.mean.numpy(), obs.mean(0), rtol=1e-6, atol=1e-9)
        assert float(learner.model.ret_rms.count) == len(obs)
        actor.load_model_state_dict(learner.collect_mode.state_dict())  # what a checkpoint carries
        probe = obs[:8]
        np.testing.assert_array_equal(actor.forward_eval(probe), learner.forward_eval(probe))
        expected = np.clip((probe - obs.mean(0)) / np.sqrt(obs.var(0) + 1e-8), -10, 10)
        seen = actor.model.obs_rms.normalize(torch.as_tensor(probe, dtype=torch.float32), 10.0)
        np.testing.assert_allclose(seen.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_ppo_learning_rate_anneals_linearly_over_the_configured_env_steps():
    with EnvManager("Hopper-v5", 1, seed=0) as env:
        _, policy, collector = _ppo_mujoco(env, lr_anneal_env_steps=512, learning_rate=1e-3)
        rates = [policy.forward_learn(collector.collect(128, drop_extra=False))["learning_rate"] for _ in range(5)]
    np.testing.assert_allclose(rates, [1e-3, 0.75e-3, 0.5e-3, 0.25e-3, 0.0])


def test_ppo_mujoco_config_trains_serial_on_ant(tmp_path):
    proc = run_cli(
        "serial",
        "-c",
        "configs/hopper_ppo.py",
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "env.env_id=Ant-v5",
        "--set",
        "policy.collect.n_sample=256",
        "--set",
        "serial.max_env_step=512",
        "--set",
        "policy.learn.epoch_per_collect=1",
        *SHORT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]  # no stop value: the budget is the goal
    assert re.search(r"env_steps=512 train_iter=2 ", proc.stdout), proc.stdout[-500:]


def test_observation_statistics_of_every_collector_reach_the_learner_and_its_checkpoints(cli, tmp_path):
    from parallel_rl.storage import SharedStorage

    run, url = start_run(
        cli,
        tmp_path,
        "configs/hopper_ppo_parallel.py",
        "--collectors",
        "2",
        "--set",
        "policy.collect.n_sample=256",
        "--set",
        "parallel.commander.max_env_step=1024",
        "--set",
        "policy.learn.epoch_per_collect=1",
        "--set",
        "parallel.commander.eval_freq=2",
        *SHORT,
    )
    assert run.wait(120) == 0, run.output()[-3000:]  # no stop value: the budget is the goal
    storage = SharedStorage(str(tmp_path / "exp" / "shared"))
    version = storage.policies.latest()
    model = storage.policies.load(version)["model"]
    # version V was trained on V segments of 256 rows, each collected by the two collectors together
    assert version >= 3 and float(model["obs_rms.count"]) == 256 * version
    assert float(model["obs_rms.var"].min()) > 0


def test_a_warm_up_larger_than_the_replay_buffer_is_a_config_error():
    """The learner starts once random_collect_size rows are in the buffer: a smaller buffer would never start it."""
    with pytest.raises(ConfigError, match=r"random_collect_size.*got 2000.*replay_buffer_size=1000"):
        compile_config(
            {
                "env": {"env_id": "Pendulum-v1"},
                "policy": {
                    "type": "sac",
                    "random_collect_size": 2000,
                    "other": {"replay_buffer": {"replay_buffer_size": 1000}},
                },
            }
        )
