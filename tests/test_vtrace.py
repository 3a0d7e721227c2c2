"""V-trace (policy/vtrace.py) against the paper's definition, and the IMPALA / APPO policies built on it."""

import math
import subprocess
import sys

import numpy as np
import pytest

from parallel_rl.config import compile_config
from parallel_rl.errors import ConfigError
from parallel_rl.policy.ppo import gae_advantages
from parallel_rl.policy.vtrace import vtrace


def episode_pieces(env_id, end):
    """Row indices of each lane's episodes (time order within a lane is row order), the last one maybe cut."""
    pieces = []
    for lane in np.unique(env_id):
        piece = []
        for i in np.flatnonzero(env_id == lane):
            piece.append(i)
            if end[i]:
                pieces.append(piece)
                piece = []
        if piece:
            pieces.append(piece)
    return pieces


def reference_vtrace(rows, gamma, rho_bar, c_bar, lam):
    """Espeholt et al. 2018, eq. (1) and section 4.2, one episode piece at a time, with the sums written out:
    v_s = V(x_s) + sum_{t=s}^{k-1} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t and the advantage
    rho_s (r_s + gamma v_{s+1} - V(x_s)); past the piece's last row V is 0 (terminated) or the bootstrap value."""
    n = len(rows["reward"])
    vs, adv = np.zeros(n), np.zeros(n)
    for piece in episode_pieces(rows["env_id"], rows["end"]):
        last = piece[-1]
        values = [rows["value"][i] for i in piece] + [0.0 if rows["terminated"][last] else rows["next_value"][last]]
        ratio = [math.exp(rows["target_logp"][i] - rows["behaviour_logp"][i]) for i in piece]
        rho = [min(rho_bar, r) for r in ratio]
        c = [lam * min(c_bar, r) for r in ratio]
        reward = [rows["reward"][i] for i in piece]
        k = len(piece)
        delta = [rho[t] * (reward[t] + gamma * values[t + 1] - values[t]) for t in range(k)]
        piece_vs = []
        for s in range(k):
            total = 0.0
            for t in range(s, k):
                trace = 1.0
                for i in range(s, t):
                    trace *= c[i]
                total += gamma ** (t - s) * trace * delta[t]
            piece_vs.append(values[s] + total)
        for s in range(k):
            vs_next = piece_vs[s + 1] if s + 1 < k else values[k]
            vs[piece[s]] = piece_vs[s]
            adv[piece[s]] = rho[s] * (reward[s] + gamma * vs_next - values[s])
    return vs, adv


def random_rows(seed, n=300, lanes=5, logp_spread=0.7):
    """Interleaved lanes, episode ends (terminated and truncated) and importance ratios on both sides of 1.
    A row's next value is its lane's next row's value where the episode goes on (one critic, as the learner's)."""
    rng = np.random.default_rng(seed)
    env_id = rng.integers(0, lanes, n)
    end = rng.random(n) < 0.1
    terminated = end & (rng.random(n) < 0.5)
    rows = dict(
        env_id=env_id,
        end=end,
        terminated=terminated,
        reward=rng.normal(size=n),
        value=rng.normal(size=n),
        next_value=rng.normal(size=n),
        behaviour_logp=rng.normal(-1.0, 0.5, n),
    )
    rows["target_logp"] = rows["behaviour_logp"] + rng.normal(0.0, logp_spread, n)
    for piece in episode_pieces(env_id, end):
        for a, b in zip(piece, piece[1:]):
            rows["next_value"][a] = rows["value"][b]
    return rows


def run_vtrace(rows, gamma, **kw):
    return vtrace(
        rows["behaviour_logp"],
        rows["target_logp"],
        rows["reward"],
        rows["value"],
        rows["next_value"],
        rows["terminated"],
        rows["end"],
        rows["env_id"],
        gamma,
        **kw,
    )


@pytest.mark.parametrize(
    "seed, rho_bar, c_bar, lam",
    [
        (0, 1.0, 1.0, 1.0),
        (1, 0.8, 0.5, 1.0),
        (2, 2.0, 1.0, 0.9),
        (3, 1.0, 1.0, 0.95),
        (4, 0.3, 0.3, 1.0),
    ],
)
def test_vtrace_equals_the_papers_definition(seed, rho_bar, c_bar, lam):
    rows = random_rows(seed)
    ratio = np.exp(rows["target_logp"] - rows["behaviour_logp"])
    assert (ratio > max(rho_bar, c_bar)).any() and (ratio < min(rho_bar, c_bar)).any()  # clipping happens
    assert rows["terminated"].any() and (rows["end"] & ~rows["terminated"]).any()  # both kinds of ends
    out = run_vtrace(rows, 0.97, rho_bar=rho_bar, c_bar=c_bar, lam=lam)
    want_vs, want_adv = reference_vtrace(rows, 0.97, rho_bar, c_bar, lam)
    np.testing.assert_allclose(out.vs, want_vs, rtol=0, atol=1e-6)
    np.testing.assert_allclose(out.pg_advantage, want_adv, rtol=0, atol=1e-6)
    np.testing.assert_allclose(out.rho, np.minimum(rho_bar, ratio), rtol=0, atol=1e-12)


def test_on_policy_vtrace_is_the_bootstrapped_discounted_return_and_gae():
    """rho = 1 (target = behaviour), rho_bar = c_bar = 1, lambda = 1: v_s is the discounted return of the rest of
    the piece, bootstrapped from V past its last row (0 after termination); with lambda < 1, v_s - V(x_s) is
    GAE(lambda)."""
    rows = random_rows(5, logp_spread=0.0)
    gamma = 0.9
    want = np.zeros(len(rows["reward"]))
    for piece in episode_pieces(rows["env_id"], rows["end"]):
        last = piece[-1]
        ret = 0.0 if rows["terminated"][last] else rows["next_value"][last]
        for i in reversed(piece):
            ret = rows["reward"][i] + gamma * ret
            want[i] = ret
    out = run_vtrace(rows, gamma, rho_bar=1.0, c_bar=1.0, lam=1.0)
    np.testing.assert_allclose(out.vs, want, rtol=0, atol=1e-6)
    args = (rows["reward"], rows["value"], rows["next_value"], rows["terminated"], rows["end"], rows["env_id"], gamma)
    np.testing.assert_allclose(out.pg_advantage, gae_advantages(*args, 1.0), rtol=0, atol=1e-5)
    np.testing.assert_allclose(
        run_vtrace(rows, gamma, lam=0.8).vs - rows["value"], gae_advantages(*args, 0.8), rtol=0, atol=1e-5
    )  # float32 GAE


def test_truncation_weights_must_be_positive():
    from parallel_rl.policy import create_policy

    with pytest.raises(ConfigError, match=r"c_bar=0.0"):  # at compile time, before any process starts
        create_policy(compile_config({"policy": {"type": "impala", "learn": {"c_bar": 0.0}}}).policy, 4, 2)


@pytest.mark.parametrize("lam", [1.0, 0.5])
def test_the_policys_targets_use_its_lambda(lam):
    """``policy.learn.lambda_`` reaches the traces: the policy's targets equal V-trace's with that lambda, and
    differ from plain V-trace's when it is below 1; out of [0, 1] it is a ConfigError."""
    import torch

    from parallel_rl.policy import create_policy

    cfg = compile_config({"policy": {"type": "appo", "learn": {"lambda_": lam}}})
    policy = create_policy(cfg.policy, 4, 2, seed=0, device="cpu")
    rng = np.random.default_rng(3)
    n = 40
    segment = {
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "next_obs": rng.normal(size=(n, 4)).astype(np.float32),
        "action": rng.integers(0, 2, n),
        "logp": rng.normal(-0.7, 0.2, n).astype(np.float32),
        "value": np.zeros(n, np.float32),
        "reward": np.ones(n, np.float32),
        "done": np.zeros(n, bool),
        "end": np.arange(n) % 13 == 12,
        "env_id": np.arange(n) % 2,
    }
    batch = policy.learn_batch(segment)
    _, vs = policy.learning_targets(segment, batch)
    with torch.no_grad():
        target_logp = policy.model.log_prob(policy.model.dist(batch.obs, None), batch.action).numpy()
        value = policy.model.value(batch.obs).numpy()
        next_value = policy.model.value(torch.from_numpy(segment["next_obs"])).numpy().astype(np.float64)
    args = (
        segment["logp"],
        target_logp,
        batch.reward,
        value,
        next_value,
        segment["done"],
        segment["end"],
        segment["env_id"],
        cfg.policy.discount_factor,
        1.0,
        1.0,
    )
    np.testing.assert_allclose(vs.numpy(), vtrace(*args, lam=lam).vs, rtol=1e-5, atol=1e-5)
    assert (lam == 1.0) == np.allclose(vs.numpy(), vtrace(*args, lam=1.0).vs, rtol=1e-5, atol=1e-5)
    with pytest.raises(ConfigError, match=r"policy.learn needs lambda_ in \[0, 1\], got policy.learn.lambda_=1.5"):
        compile_config({"policy": {"type": "appo", "learn": {"lambda_": 1.5}}})


@pytest.mark.parametrize("policy_type", ["impala", "appo"])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_exported_acting_module_gives_the_greedy_actions(policy_type, env_id):
    import torch

    from parallel_rl.after.acting import acting_module
    from parallel_rl.envs import EnvManager
    from parallel_rl.policy import create_policy

    cfg = compile_config({"env": {"env_id": env_id}, "policy": {"type": policy_type, "model": {"obs_norm": True}}})
    with EnvManager(env_id, 1, seed=0) as env:
        policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0, device="cpu")
    policy.model.obs_rms.update(np.random.default_rng(0).normal(1.0, 2.0, (64, env.obs_dim)))
    obs = np.random.default_rng(1).normal(0.0, 3.0, (1000, env.obs_dim)).astype(np.float32)
    with torch.no_grad():
        acted = acting_module(policy)(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(acted.reshape(policy.forward_eval(obs).shape), policy.forward_eval(obs), atol=1e-5)


@pytest.mark.parametrize("policy_type", ["impala", "appo"])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_serial_pipeline_trains_impala_and_appo_with_finite_losses(tmp_path, policy_type, env_id):
    """A few updates through the serial pipeline, Discrete and Box actions: it runs and the losses it logs are
    finite."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    from parallel_rl.entry.serial import serial_pipeline

    cfg = compile_config(
        {
            "exp_name": str(tmp_path / "exp"),
            "env": {"env_id": env_id, "collector_env_num": 2, "evaluator_env_num": 1, "n_evaluator_episode": 1},
            "policy": {
                "type": policy_type,
                "model": {"hidden_size_list": [16]},
                "learn": {"batch_size": 32, "epoch_per_collect": 2},
                "collect": {"n_sample": 64},
                "eval": {"evaluator": {"eval_freq": 1}},
            },
            "serial": {"max_train_iter": 3},
        }
    )
    result = serial_pipeline(cfg)
    assert result.train_iter == 3 and result.env_steps >= 3 * 64
    accumulator = EventAccumulator(str(tmp_path / "exp" / "tensorboard"))
    accumulator.Reload()
    for tag in ("learner/loss", "learner/policy_loss", "learner/value_loss"):
        values = [float(make_ndarray(event.tensor_proto)) for event in accumulator.Tensors(tag)]
        assert values and all(math.isfinite(v) for v in values), (tag, values)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["configs/cartpole_appo.py", "configs/cartpole_impala.py"])
def test_serial_impala_and_appo_solve_cartpole(tmp_path, config):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "parallel_rl",
            "serial",
            "-c",
            config,
            "--set",
            f"exp_name={tmp_path / 'exp'}",
            "--set",
            "serial.max_env_step=60000",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("solved: eval return")
