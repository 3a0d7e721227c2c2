"""PPO and SAC: their updates on small deterministic problems, GAE by hand, spaces and devices."""

import numpy as np
import pytest
import torch

from parallel_rl.config import compile_config
from parallel_rl.envs import EnvManager
from parallel_rl.envs.fit import check_env_fits
from parallel_rl.errors import ConfigError
from parallel_rl.policy import create_policy
from parallel_rl.policy.ppo import gae_advantages
from parallel_rl.collector.serial import SampleSerialCollector


@pytest.fixture(autouse=True)
def one_torch_thread():
    """As every process of ours runs (system.torch_num_threads=1): many threads on a busy 2-core box crawl."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_gae_matches_hand_computed_example_with_truncation_and_termination():
    gamma, lam = 0.9, 0.5
    # env 0: rows t=0,1 (terminated at t=1); env 1: rows t=0,1 (truncated at t=0, then a new episode
    # that the segment cuts at t=1). Rows interleave time-major, as collectors write them.
    env_id = np.array([0, 1, 0, 1])
    reward = np.array([1.0, 2.0, 3.0, 4.0])
    value = np.array([0.5, 1.0, 1.5, 2.0])
    next_value = np.array([1.5, 10.0, 7.0, 3.0])  # 7.0 must be ignored: env 0 terminated there
    terminated = np.array([False, False, True, False])
    end = np.array([False, True, True, False])
    adv = gae_advantages(reward, value, next_value, terminated, end, env_id, gamma, lam)
    # env 0, t=1: terminal, delta = 3 - 1.5 = 1.5
    a01 = 3.0 - 1.5
    # env 0, t=0: delta = 1 + 0.9 * 1.5 - 0.5 = 1.85; A = 1.85 + 0.45 * 1.5
    a00 = 1.0 + 0.9 * 1.5 - 0.5 + 0.45 * a01
    # env 1, t=0: truncated -> bootstraps from V(next_obs) = 10, no recursion past the end
    a10 = 2.0 + 0.9 * 10.0 - 1.0
    # env 1, t=1: cut by the segment -> bootstraps from next_value = 3
    a11 = 4.0 + 0.9 * 3.0 - 2.0
    np.testing.assert_allclose(adv, [a00, a10, a01, a11], rtol=1e-6)


def _ppo(env, **learn):
    cfg = compile_config({"policy": {"type": "ppo", "learn": learn, "model": {"hidden_size_list": [16]}}})
    policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0, device="cpu")
    collector = SampleSerialCollector(None, env, policy.collect_mode, nstep=1, discount_factor=0.99)
    return cfg, policy, collector


def test_collector_records_what_ppo_needs():
    with EnvManager("parallel_rl/Counting-v0", 2, seed=0, env_kwargs={"episode_length": 3}) as env:
        _, _, collector = _ppo(env)
        data = collector.collect(8)
    assert {"logp", "value", "env_id", "end"} <= set(data)
    assert data["action"].dtype == np.int64 and data["logp"].dtype == np.float32
    # each env's rows are in time order and every third one ends an episode
    for e in (0, 1):
        np.testing.assert_array_equal(data["end"][data["env_id"] == e], [False, False, True, False])


def test_ppo_discrete_update_learns_and_keeps_the_ratio_inside_the_clip_range():
    with EnvManager("parallel_rl/Counting-v0", 4, seed=0, env_kwargs={"episode_length": 5}) as env:
        # the default learning rate, 4 epochs of 4 minibatches
        cfg, policy, collector = _ppo(env, epoch_per_collect=4, batch_size=32)
        segment = collector.collect(128)
        info = policy.forward_learn(segment)
        ratio = torch.exp(policy.log_prob(segment["obs"], segment["action"]) - torch.as_tensor(segment["logp"]))
        assert float((ratio - 1.0).abs().max()) <= cfg.policy.learn.clip_ratio
        assert float((ratio - 1.0).abs().max()) > 0.01  # it did move
        assert info["updates"] == 4 * 4
        policy.optimizer.lr = 3e-3
        first_value_loss = float(info["value_loss"])
        for _ in range(15):
            info = policy.forward_learn(collector.collect(128))
        assert float(info["value_loss"]) < first_value_loss
        # reward 1 for action 1: the policy now picks it nearly always
        assert (policy.forward_eval(env.reset()) == 1).all()
        assert collector.collect(128)["action"].mean() > 0.9


def test_ppo_box_actions_move_toward_the_best_action():
    with EnvManager(
        "parallel_rl/Spaces-v0",
        4,
        seed=0,
        env_kwargs={"action_space": "box", "obs_space": "box2d", "episode_length": 5},
    ) as env:
        _, policy, collector = _ppo(env, epoch_per_collect=4, batch_size=32, learning_rate=3e-3)
        obs = env.reset()
        start = np.abs(policy.forward_eval(obs) - 0.5).mean()
        for _ in range(30):
            info = policy.forward_learn(collector.collect(128))
        assert collector.collect(8)["action"].dtype == np.float32
        end = np.abs(policy.forward_eval(obs) - 0.5).mean()
        assert end < start / 2, (start, end)
        assert np.isfinite(float(info["loss"]))


def test_sac_temperature_moves_toward_target_entropy_and_critic_loss_falls():
    cfg = compile_config(
        {
            "policy": {
                "type": "sac",
                "learn": {"batch_size": 64, "init_alpha": 1.0},
                "model": {"actor_hidden_size_list": [32], "critic_hidden_size_list": [32]},
            }
        }
    )
    with EnvManager("parallel_rl/Spaces-v0", 4, seed=0, env_kwargs={"action_space": "box", "episode_length": 5}) as env:
        policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0, device="cpu")
        collector = SampleSerialCollector(None, env, policy.collect_mode, nstep=1, discount_factor=0.99)
        batch = collector.collect(64)
        assert batch["action"].dtype == np.float32 and batch["action"].shape == (64, 2)
        first = policy.forward_learn(batch)
        # the initial policy's entropy is far above the target (-2): the temperature must fall
        assert float(first["entropy"]) > policy.target_entropy
        for _ in range(200):
            info = policy.forward_learn(batch)
        assert float(info["alpha"]) < float(first["alpha"])
        assert float(info["critic_loss"]) < float(first["critic_loss"])


@pytest.mark.parametrize(
    "user, match",
    [
        (
            {"env": {"env_id": "Pendulum-v1"}},
            r"policy.type='dqn' does not fit env 'Pendulum-v1'.*Box.*fit: appo, impala, ppo, sac, td3",
        ),
        (
            {"policy": {"type": "sac"}},
            r"policy.type='sac' does not fit env 'CartPole-v1'.*Discrete.*fit: appo, dqn, impala, ppo",
        ),
        (
            {"env": {"env_id": "parallel_rl/Spaces-v0", "env_kwargs": {"action_space": "multidiscrete"}}},
            r"'parallel_rl/Spaces-v0' has action space MultiDiscrete.*Discrete \(algorithms: appo, dqn, impala, ppo, r2d2\)",
        ),
        ({"policy": {"type": "ppo", "device": "gpu"}}, r"policy.device must be one of"),
        ({"policy": {"type": "ppx"}}, r"unknown policy.type 'ppx'; did you mean 'ppo'"),
        ({"policy": {"type": "ppo", "other": {"eps": {"start": 1.0}}}}, r"unknown config key 'policy.other.eps'"),
    ],
)
def test_bad_pairings_are_config_errors(user, match):
    with pytest.raises(ConfigError, match=match):
        check_env_fits(compile_config(user))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error path")
@pytest.mark.parametrize("setting, key", [({"cuda": True}, "policy.cuda=True"), ({"device": "cuda"}, "policy.device")])
def test_cuda_without_a_gpu_names_the_key(setting, key):
    with pytest.raises(ConfigError, match=key):
        check_env_fits(compile_config({"policy": {"type": "ppo", **setting}}))
    assert compile_config({"policy": {"type": "ppo", "device": "auto"}}).policy.device == "auto"
    check_env_fits(compile_config({"policy": {"type": "ppo", "device": "auto"}}))


def test_policy_keys_follow_policy_type():
    ppo = compile_config({"policy": {"type": "ppo", "learn": {"epoch_per_collect": 3}}})
    assert ppo.policy.on_policy and ppo.policy.learn.epoch_per_collect == 3 and "eps" not in ppo.policy.other
    sac = compile_config({"policy": {"type": "sac"}})
    assert not sac.policy.on_policy and sac.policy.learn.target_theta == 0.005
    with pytest.raises(ConfigError, match="unknown config key 'policy.learn.epoch_per_collect'"):
        compile_config({"policy": {"type": "sac", "learn": {"epoch_per_collect": 3}}})


def test_checkpoints_hold_cpu_tensors_and_round_trip(tmp_path):
    from parallel_rl.storage import SharedStorage

    cfg = compile_config({"policy": {"type": "sac", "device": "cpu"}})
    with EnvManager("Pendulum-v1", 1, seed=0) as env:
        policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0)
        other = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=1)
        obs = env.reset()
    storage = SharedStorage(str(tmp_path))
    storage.policies.save(1, policy.collect_mode.state_dict())
    state = storage.policies.load(1)
    assert all(t.device.type == "cpu" for t in state["actor"].values())
    other.collect_mode.load_state_dict(state)
    np.testing.assert_allclose(other.forward_eval(obs), policy.forward_eval(obs))


def test_rmsprop_steps_as_torchs_centered_rmsprop_and_its_state_round_trips():
    """DQN's papers' optimizer (policy.learn.optimizer="rmsprop"): the same steps as torch.optim.RMSprop with
    the same settings, and a run resumed from its state_dict goes on as one that never stopped."""
    from parallel_rl.policy.optim import RMSprop

    torch.manual_seed(0)
    nets = [torch.nn.Linear(4, 3) for _ in range(3)]
    for net in nets[1:]:
        net.load_state_dict(nets[0].state_dict())
    settings = dict(lr=1e-2, alpha=0.95, eps=0.01, momentum=0.95, centered=True)
    ours, resumed = RMSprop(nets[0].parameters(), **settings), RMSprop(nets[2].parameters(), **settings)
    reference = torch.optim.RMSprop(nets[1].parameters(), **settings)
    batches = [torch.randn(8, 4) for _ in range(6)]
    for i, x in enumerate(batches):
        if i == 3:  # the resumed run starts here, from the state of the one that never stopped
            nets[2].load_state_dict(nets[0].state_dict())
            resumed.load_state_dict(ours.state_dict())
        for net, opt in zip(nets, (ours, reference, resumed)):
            if opt is resumed and i < 3:
                continue
            opt.zero_grad()
            (net(x) ** 2).mean().backward()
            opt.step()
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        torch.testing.assert_close(a, b)
    for a, b in zip(nets[0].parameters(), nets[2].parameters()):
        torch.testing.assert_close(a, b)
    assert not torch.equal(nets[0].weight, torch.nn.Linear(4, 3).weight)


def test_rmsprop_defaults_step_as_young_and_tians_optimizer():
    """``learn.optimizer="rmsprop"`` with its default settings is the optimizer of Young & Tian's MinAtar DQN
    (their examples/dqn.py: ``optim.RMSprop(params, lr, alpha=0.95, centered=True, eps=0.01)``, no momentum)."""
    from parallel_rl.policy.optim import RMSprop

    cfg = compile_config({"policy": {"type": "dqn", "learn": {"optimizer": "rmsprop", "learning_rate": 2.5e-4}}})
    torch.manual_seed(0)
    ours_net, their_net = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    their_net.load_state_dict(ours_net.state_dict())
    ours = RMSprop(ours_net.parameters(), lr=cfg.policy.learn.learning_rate, **cfg.policy.learn.rmsprop)
    theirs = torch.optim.RMSprop(their_net.parameters(), lr=2.5e-4, alpha=0.95, centered=True, eps=0.01)
    for _ in range(5):
        x = torch.randn(8, 4)
        for net, opt in ((ours_net, ours), (their_net, theirs)):
            opt.zero_grad()
            (net(x) ** 2).mean().backward()
            opt.step()
    for a, b in zip(ours_net.parameters(), their_net.parameters()):
        torch.testing.assert_close(a, b)


def test_dqn_takes_the_optimizer_its_config_names():
    from parallel_rl.policy.optim import Adam, RMSprop

    for name, cls in (("adam", Adam), ("rmsprop", RMSprop)):
        cfg = compile_config({"policy": {"type": "dqn", "learn": {"optimizer": name}}})
        assert type(create_policy(cfg.policy, 4, 2, seed=0).optimizer) is cls
    with pytest.raises(ConfigError, match="policy.learn.optimizer must be one of adam, rmsprop, got 'sgd'"):
        compile_config({"policy": {"type": "dqn", "learn": {"optimizer": "sgd"}}})
