"""gSDE for PPO's Box actions (policy.model.use_sde; policy/gsde.py), and the PPO keys RL Zoo's recurrent
settings need (model.activation, learn.clip_anneal, learn.adam_eps), and eval.sample."""

import numpy as np
import pytest
import torch

from parallel_rl.config import compile_config
from parallel_rl.envs.env_manager import EnvManager
from parallel_rl.errors import ConfigError
from parallel_rl.policy import create_policy
from parallel_rl.collector.serial import SampleSerialCollector
from tests.test_serial import run_cli


def _ppo(env, model=None, **learn):
    cfg = compile_config(
        {
            "env": {"env_id": "Pendulum-v1"},
            "policy": {
                "type": "ppo",
                "model": {"hidden_size_list": [16], **(model or {})},
                "learn": {"batch_size": 32, "epoch_per_collect": 2, **learn},
            },
        }
    )
    return create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0, device="cpu")


def test_gsde_noise_holds_for_sample_freq_steps_then_is_drawn_again():
    with EnvManager("Pendulum-v1", 3, seed=0) as env:
        policy = _ppo(env, {"use_sde": True, "sde_sample_freq": 4})
        obs = env.reset()
    actions = [policy.forward_collect(obs)["action"] for _ in range(8)]
    mean = policy.forward_eval(obs)
    # the same lanes' features give the same noise while the matrices hold: steps 0-3, then 4-7
    for step in (1, 2, 3):
        np.testing.assert_array_equal(actions[step], actions[0])
        np.testing.assert_array_equal(actions[4 + step], actions[4])
    assert not np.allclose(actions[4], actions[0])
    assert not np.allclose(actions[0], mean)  # noise, not the mean
    # each lane has its own matrix: three lanes with one observation explore differently
    same = np.repeat(obs[:1], 3, axis=0)
    spread = policy.forward_collect(same)["action"]
    assert len(np.unique(spread.round(6), axis=0)) == 3


def test_gsde_logp_is_the_state_dependent_gaussian_of_the_features():
    with EnvManager("Pendulum-v1", 2, seed=0) as env:
        policy = _ppo(env, {"use_sde": True, "sde_sample_freq": 2, "init_log_std": -1.0})
        obs = env.reset()
    out = policy.forward_collect(obs)
    model = policy.model
    x = torch.as_tensor(obs, dtype=torch.float32)
    with torch.no_grad():
        z = model.actor[:-1](x)  # the actor's last hidden features
        mean = torch.tanh(model.actor[-1](z)) * 2.0  # Pendulum: bounds +-2
        sigma = model.state_dict()["sde.log_std"].exp()
        std = torch.sqrt(z.pow(2) @ sigma.pow(2) + 1e-6) * 2.0
        expected = torch.distributions.Normal(mean, std).log_prob(torch.as_tensor(out["action"])).sum(-1)
    np.testing.assert_allclose(out["logp"], expected.numpy(), rtol=1e-5, atol=1e-5)


def test_gsde_learns_its_log_std_matrix_and_no_state_independent_one():
    with EnvManager("Pendulum-v1", 2, seed=0) as env:
        policy = _ppo(env, {"use_sde": True, "sde_sample_freq": 4})
        segment = SampleSerialCollector(None, env, policy.collect_mode, nstep=1, discount_factor=0.99).collect(64)
    state = policy.model.state_dict()
    assert "log_std" not in state and state["sde.log_std"].shape == (16, 1)
    before = state["sde.log_std"].clone()
    policy.forward_learn(segment)
    assert not torch.equal(before, policy.model.state_dict()["sde.log_std"])


def test_clip_anneals_with_the_learning_rate_and_adam_eps_and_activation_are_set():
    with EnvManager("Pendulum-v1", 2, seed=0) as env:
        policy = _ppo(
            env, {"activation": "relu"}, learning_rate=1e-3, lr_anneal_env_steps=256, clip_anneal=True, adam_eps=1e-5
        )
        segment = SampleSerialCollector(None, env, policy.collect_mode, nstep=1, discount_factor=0.99).collect(64)
    assert any(isinstance(m, torch.nn.ReLU) for m in policy.model.actor.modules())
    assert policy.optimizer.eps == 1e-5
    assert policy.clip_ratio() == pytest.approx(0.2)
    policy.forward_learn(segment)  # 64 of 256 env steps trained on: a quarter of the way
    assert policy.clip_ratio() == pytest.approx(0.2 * 0.75)
    assert policy.optimizer.lr == pytest.approx(1e-3)  # set before the update, from the steps trained before it
    with pytest.raises(ConfigError, match="policy.model.activation"):
        with EnvManager("Pendulum-v1", 1, seed=0) as env:
            _ppo(env, {"activation": "gelu"})


def test_recurrent_ppo_with_gsde_trains_serially_end_to_end(tmp_path):
    proc = run_cli(
        "serial",
        "-c",
        "configs/pendulum_novel_ppo_lstm.py",
        "--set",
        f"exp_name={tmp_path}/exp",
        "--set",
        "serial.max_env_step=2048",
        "--set",
        "policy.collect.n_sample=512",
        "--set",
        "env.n_evaluator_episode=1",
        "--set",
        "env.evaluator_env_num=1",
    )
    assert proc.returncode == 3, proc.stderr[-2000:]  # 3: the budget ended it before the stop value
    assert "env step budget 2048 used up" in proc.stdout


@pytest.mark.parametrize("bias, expected", [(0.25, 0.5), (5.0, 2.0)])  # Pendulum: action = 2 * out, clipped to +-2
def test_a_linear_mean_is_not_squashed_and_eval_and_export_clip_it_to_the_bounds(bias, expected):
    from parallel_rl.after.acting import acting_module

    with EnvManager("Pendulum-v1", 2, seed=0) as env:
        policy = _ppo(env, {"squash_mean": False})
        obs = env.reset()
    state = policy.model.state_dict()
    last = max(k for k in state if k.startswith("actor.") and k.endswith(".weight"))
    state[last].zero_()
    state[last.replace("weight", "bias")].fill_(bias)
    policy.model.load_state_dict(state)
    np.testing.assert_allclose(policy.forward_eval(obs), expected, rtol=1e-6)  # tanh would give 0.49 / 2.0
    with torch.no_grad():
        exported = acting_module(policy)(torch.as_tensor(obs)).numpy()
    np.testing.assert_allclose(exported, expected, rtol=1e-6)
    collected = policy.forward_collect(np.repeat(obs[:1], 2000, axis=0))["action"]
    assert abs(float(np.mean(collected)) - 2.0 * bias) < 0.2  # sampled around the linear mean, not clipped


def test_gsde_on_discrete_actions_is_a_config_error():
    with EnvManager("CartPole-v1", 1, seed=0) as env:
        cfg = compile_config(
            {
                "env": {"env_id": "CartPole-v1"},
                "policy": {"type": "ppo", "model": {"use_sde": True, "sde_sample_freq": 4}},
            }
        )
        with pytest.raises(ConfigError, match="use_sde"):
            create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0, device="cpu")


@pytest.mark.parametrize(
    "env_id,model", [("CartPole-v1", {}), ("Pendulum-v1", {}), ("Pendulum-v1", {"squash_mean": False})]
)
def test_eval_sample_draws_evaluation_actions_from_the_policy(env_id, model):
    """policy.eval.sample: the evaluator's actions are drawn from the policy (in the action bounds), not its most
    likely action; the default stays greedy (the same action for the same observation every time)."""
    with EnvManager(env_id, 64, seed=0) as env:
        obs = env.reset()
        spec = env.action_spec
    cfgs = {
        sample: compile_config(
            {
                "env": {"env_id": env_id},
                "policy": {"type": "ppo", "model": {"hidden_size_list": [16], **model}, "eval": {"sample": sample}},
            }
        )
        for sample in (False, True)
    }
    greedy, sampling = (create_policy(cfgs[s].policy, obs.shape[1], spec, seed=0, device="cpu") for s in (False, True))
    sampling.load_state_dict(greedy.state_dict())
    first = greedy.forward_eval(obs)
    np.testing.assert_array_equal(greedy.forward_eval(obs), first)
    draws = [sampling.forward_eval(obs) for _ in range(3)]
    assert not np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[1], draws[2])
    if spec.kind == "box":
        for draw in draws:
            assert draw.shape == first.shape and (draw >= spec.low).all() and (draw <= spec.high).all()
    else:
        assert set(np.concatenate(draws).tolist()) == {0, 1}
