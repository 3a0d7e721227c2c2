"""Policies with memory: the collectors' and evaluators' per-lane recurrent state, the learner's sequences, and
recurrent PPO end to end on CartPole with its velocities masked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from parallel_rl.collector.serial import SampleSerialCollector, concat_columns
from parallel_rl.config import compile_config
from parallel_rl.envs.env_manager import EnvManager
from parallel_rl.evaluator.serial import InteractionSerialEvaluator
from parallel_rl.policy import create_policy
from parallel_rl.policy.base import PolicyMode

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LSTM = os.path.join(REPO, "configs", "cartpole_novel_ppo_lstm.py")
# the shipped config, smaller: a 16-unit LSTM, 2 epochs a segment
SMALL = ("--set", "policy.model.recurrent.hidden_size=16", "--set", "policy.learn.epoch_per_collect=2")


def recurrent_cfg(kind: str = "lstm", unroll_len: int = 8, **env):
    return compile_config(
        dict(
            env=dict(env_id="CartPole-v1", **env),
            policy=dict(
                type="ppo",
                model=dict(hidden_size_list=[16], recurrent=dict(type=kind, hidden_size=8)),
                learn=dict(unroll_len=unroll_len, batch_size=64),
            ),
        )
    )


def build(cfg, num_envs: int = 3, seed: int = 0):
    env = EnvManager.from_cfg(cfg.env, num_envs, seed=seed)
    return env, create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=seed)


def next_state(policy, obs: np.ndarray, state: dict) -> dict:
    """The core's state after acting on ``obs`` from ``state`` (one lane)."""
    out = policy.forward_eval(obs[None], state={k: v[None] for k, v in state.items()})
    return {k: v[0] for k, v in out["next_state"].items()}


def by_lane(rows: dict, lane: int) -> dict:
    keep = rows["env_id"] == lane
    return {k: v[keep] for k, v in rows.items()}


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_each_row_stores_the_state_the_collector_acted_with_across_collect_calls(kind):
    """Replaying each lane from zeros gives every stored state: zeros at each episode's first row (terminated,
    truncated and gymnasium's auto-reset step in between), and carried on, never reset, where a collect call
    (a chunk) ends mid-episode."""
    cfg = recurrent_cfg(kind, env_kwargs=dict(max_episode_steps=30))  # truncations as well as terminations
    env, policy = build(cfg)
    collector = SampleSerialCollector(cfg.policy.collect.collector, env, policy.collect_mode, nstep=1)
    calls = [collector.collect(n_sample=37, drop_extra=False) for _ in range(8)]
    keys = ("hidden_h", "hidden_c") if kind == "lstm" else ("hidden_h",)
    assert set(keys) <= set(calls[0]) and all(calls[0][k].shape[1:] == (16,) for k in keys)  # actor's + critic's
    rows = concat_columns(calls)
    spans_a_call = 0
    for lane in range(env.num_envs):
        own = by_lane(rows, lane)
        firsts = np.cumsum([0] + [int((c["env_id"] == lane).sum()) for c in calls])[1:-1]  # a call's first row
        assert own["end"].any()
        expected = {k: np.zeros(16, dtype=np.float32) for k in keys}
        for t in range(len(own["obs"])):
            for k in keys:
                np.testing.assert_allclose(own[k][t], expected[k], atol=1e-6, err_msg=f"lane {lane} row {t} {k}")
            if t in firsts and np.abs(expected[keys[0]]).sum() > 0:
                spans_a_call += 1
            if own["end"][t]:
                expected = {k: np.zeros(16, dtype=np.float32) for k in keys}
            else:
                expected = next_state(policy, own["obs"][t], expected)
    assert spans_a_call > 0  # the check above did see episodes that go on across collect calls


class RecordingEnv(EnvManager):
    """An env manager that keeps every step it took."""

    def step(self, actions):
        step = super().step(actions)
        self.steps.append(step)
        return step


def test_the_evaluator_carries_each_lanes_state_and_zeroes_it_where_an_episode_ends():
    cfg = recurrent_cfg()
    env = RecordingEnv("CartPole-v1", 3, seed=0, env_kwargs=dict(max_episode_steps=20))
    env.steps = []
    _, policy = build(cfg)
    calls = []

    def forward(obs, state=None):
        out = policy.forward_eval(obs, state=state)
        calls.append((obs.copy(), {k: v.copy() for k, v in state.items()}, out["next_state"]))
        return out

    mode = PolicyMode(forward, policy.model_state_dict, policy.load_model_state_dict, policy.initial_state)
    evaluator = InteractionSerialEvaluator(dict(max_seconds=0.0), env, mode, stop_value=1e9, n_evaluator_episode=6)
    _, info = evaluator.eval()
    assert info["episodes"] == 6 and len(calls) == len(env.steps) >= 10
    zeros = np.zeros(16, dtype=np.float32)
    assert all(np.allclose(s, 0) for s in calls[0][1].values())
    resets = 0
    for k in range(1, len(calls)):
        step, (_, state, _), (_, _, before) = env.steps[k - 1], calls[k], calls[k - 1]
        for lane in range(3):
            fresh = step.terminated[lane] or step.truncated[lane] or not step.valid[lane]
            resets += fresh
            for key in state:
                np.testing.assert_allclose(state[key][lane], zeros if fresh else before[key][lane], atol=1e-6)
    assert resets >= 6


def test_a_feed_forward_policy_is_called_as_before():
    """No memory, no ``state`` keyword and no state columns: the feed-forward path is the old one."""
    cfg = compile_config(dict(env=dict(env_id="CartPole-v1"), policy=dict(type="ppo")))
    env, policy = build(cfg)
    assert policy.initial_state(2) is None
    seen = []

    def forward(obs, **kwargs):
        seen.append(set(kwargs))
        return policy.forward_collect(obs, **kwargs)

    mode = PolicyMode(forward, policy.model_state_dict, policy.load_model_state_dict, policy.initial_state)
    rows = SampleSerialCollector(None, env, mode, nstep=1).collect(n_sample=30)
    assert not any("hidden_h" in k for k in rows) and all("state" not in s for s in seen)


def test_the_learners_rerun_over_sequences_reproduces_the_collectors_logp_and_value():
    """Each lane cut into sequences of 5 steps, re-run from the stored starting states with the collector's
    weights: the same logp and value for every row; some sequences hold an episode start inside (the state
    must be zeroed there, not carried)."""
    cfg = recurrent_cfg(unroll_len=5, env_kwargs=dict(max_episode_steps=12))
    env, policy = build(cfg, num_envs=4)
    collector = SampleSerialCollector(cfg.policy.collect.collector, env, policy.collect_mode, nstep=1)
    segment = concat_columns([collector.collect(n_sample=50, drop_extra=False) for _ in range(3)])
    batch = policy.learn_batch(segment)
    assert batch.seqs.starts[:, 1:].any()
    assert batch.seqs.valid.sum() == len(segment["obs"])
    seen = np.zeros(len(segment["obs"]), dtype=bool)
    with torch.no_grad():
        for idx, x in policy.minibatches(batch, batch_size=20):  # 4 sequences a minibatch
            logp = policy.model.log_prob(policy.model.dist(x), batch.action[idx])
            np.testing.assert_allclose(logp.numpy(), segment["logp"][idx.numpy()], atol=1e-5)
            np.testing.assert_allclose(policy.model.value(x).numpy(), segment["value"][idx.numpy()], atol=1e-5)
            seen[idx.numpy()] = True
    assert seen.sum() >= len(seen) - 4 * 5  # whole minibatches of 4 sequences: at most 3 sequences left out
    with torch.no_grad():  # every row at once (V-trace's targets: IMPALA, APPO)
        logp = policy.model.log_prob(policy.model.dist(policy.row_features(batch)), batch.action)
    np.testing.assert_allclose(logp.numpy(), segment["logp"], atol=1e-5)


def test_an_exported_recurrent_policy_carries_its_state_like_the_eval_mode(tmp_path):
    """The acting module, its TorchScript file and load_policy's Agent act as forward_eval does when fed the
    state back, step after step (the actions differ from a memoryless replay of the same observations)."""
    from parallel_rl.after.acting import acting_module
    from parallel_rl.after.api import load_policy
    from parallel_rl.after.export import export_acting

    cfg = recurrent_cfg()
    env, policy = build(cfg, num_envs=1)
    with torch.no_grad():
        for p in policy.model.parameters():  # larger weights: actions that depend on the state
            p.mul_(4.0)
    obs = np.random.default_rng(0).normal(0.0, 1.0, size=(40, 5, 4)).astype(np.float32)  # 40 steps of 5 lanes
    state, expected = policy.initial_state(5), []
    for step in obs:
        out = policy.forward_eval(step, state=state)
        expected.append(out["action"])
        state = out["next_state"]
    memoryless = [policy.forward_eval(step, state=policy.initial_state(5))["action"] for step in obs]
    assert not np.array_equal(np.array(expected), np.array(memoryless))
    module = acting_module(policy)
    assert module.state_sizes == {"hidden_h": 16, "hidden_c": 16}
    agent = load_policy(
        export_acting(module, env.obs_shape, "discrete", "torchscript", str(tmp_path / "p.torchscript"))
    )
    assert agent.state_sizes == {"hidden_h": 16, "hidden_c": 16}
    np.testing.assert_array_equal(np.array([agent.act(step) for step in obs]), np.array(expected))
    agent.reset()
    np.testing.assert_array_equal(agent.act(obs[0]), expected[0])


def run_cli(*args: str, timeout: float = 240.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", "parallel_rl", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
    )


def test_masked_cartpole_zeroes_the_velocities_only():
    cfg = recurrent_cfg(mask_velocity=True)
    env = EnvManager.from_cfg(cfg.env, 4, seed=0)
    plain = EnvManager("CartPole-v1", 4, seed=0, vector_mode="sync")  # as the masked one is built
    try:
        masked, full = env.reset(), plain.reset()
        for _ in range(5):
            step, plain_step = env.step(np.ones(4, dtype=np.int64)), plain.step(np.ones(4, dtype=np.int64))
        assert np.all(step.obs[:, [1, 3]] == 0) and np.all(np.abs(plain_step.obs[:, [1, 3]]) > 0)
        np.testing.assert_allclose(step.obs[:, [0, 2]], plain_step.obs[:, [0, 2]])
        np.testing.assert_allclose(masked[:, [0, 2]], full[:, [0, 2]])
    finally:
        env.close()
        plain.close()


def test_recurrent_ppo_trains_serially_on_masked_cartpole_and_its_checkpoint_evaluates(tmp_path):
    exp = str(tmp_path / "exp")
    done = run_cli("serial", "-c", LSTM, "--set", f"exp_name={exp}", "--set", "serial.max_env_step=2048", *SMALL)
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]  # the budget ran out
    assert re.search(r"train_iter=([89]|\d\d)", done.stdout), done.stdout[-500:]
    out = run_cli("--json", "eval", "-c", LSTM, "--run", exp, "--episodes", "8", *SMALL)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["episodes"] == 8 and result["policy"] == "ppo" and 8 <= result["return_mean"] <= 500


def test_recurrent_ppo_trains_on_a_cluster(cli, tmp_path):
    run = cli(
        "run",
        "run",
        "-c",
        os.path.join(REPO, "configs", "cartpole_novel_ppo_lstm_parallel.py"),
        "--set",
        f"exp_name={tmp_path / 'exp'}",
        "--set",
        "parallel.commander.max_env_step=2048",
        *SMALL,
    )
    assert run.wait(240) in (0, 3), run.output()[-3000:]
    found = re.search(r"env_steps=(\d+) train_iter=(\d+)", run.output())
    assert found and int(found.group(1)) >= 2048 and int(found.group(2)) >= 6, run.output()[-2000:]


MINATAR_LSTM = os.path.join(REPO, "configs", "minatar_breakout_ppo_lstm.py")
# a few hundred env steps: segments of 4 envs x 64 steps, sequences of 16 rows, one epoch; one short evaluation
MINATAR_TINY = (
    "env.collector_env_num=4",
    "env.evaluator_env_num=1",
    "env.n_evaluator_episode=1",
    "policy.collect.n_sample=256",
    "policy.learn.unroll_len=16",
    "policy.learn.batch_size=64",
    "policy.learn.epoch_per_collect=1",
    "serial.max_env_step=512",
)


def test_recurrent_ppo_runs_minatar_breakout_one_board_at_a_time(tmp_path):
    """configs/minatar_breakout_ppo_lstm.py (bool boards, no frame stack, MinAtar's conv then an LSTM) end to end
    with a tiny budget; its collector stores each row's state at the core's width, and the run's checkpoint acts
    carrying that state."""
    from parallel_rl.after.api import load_policy
    from parallel_rl.config import load_config

    exp = str(tmp_path / "exp")
    sets = [f"exp_name={exp}", *MINATAR_TINY]
    done = run_cli("serial", "-c", MINATAR_LSTM, *(a for s in sets for a in ("--set", s)))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]  # no stop value: the budget is the goal
    assert re.search(r"env_steps=51\d train_iter=2 ", done.stdout), done.stdout[-500:]
    cfg = load_config(MINATAR_LSTM, sets)
    env, policy = build(cfg, num_envs=2)
    try:
        rows = SampleSerialCollector(None, env, policy.collect_mode, nstep=1).collect(n_sample=64)
    finally:
        env.close()
    width = policy.model.core.out_dim
    assert width == 2 * 128  # an actor's and a critic's LSTM of 128 (the config's hidden_size)
    assert rows["obs"].dtype == np.bool_ and rows["obs"].shape[1:] == (10, 10, 4)  # one board a row
    assert rows["hidden_h"].shape == rows["hidden_c"].shape == (len(rows["obs"]), width)
    assert np.abs(rows["hidden_h"]).sum() > 0
    agent = load_policy(exp)  # the run's checkpoint, through the config.json it wrote
    assert agent.state_sizes == {"hidden_h": width, "hidden_c": width}
    assert agent.act(rows["obs"][:2]).shape == (2,) and agent.state[0].shape == (2, width)


@pytest.mark.parametrize("encoder", [dict(type="mlp"), dict(type="minatar", shape=[10, 10, 4])])
def test_the_cores_unroll_equals_stepping_with_the_state_zeroed_at_episode_starts(encoder):
    """Over any encoder: unroll (one LSTM call per stretch without restarts) = one step at a time, zeroing the state
    of the lanes whose episode starts."""
    from parallel_rl.policy.nets import recurrent_core

    torch.manual_seed(0)
    core = recurrent_core(400, encoder, dict(type="lstm", hidden_size=6), copies=2)
    T, B = 9, 5
    obs = torch.rand(T, B, 400)
    starts = torch.rand(T, B) < 0.2
    state = tuple(torch.randn(B, 12) for _ in range(2))
    with torch.no_grad():
        out, final = core.unroll(obs, state, starts)
        s, steps = state, []
        for t in range(T):
            s = tuple(x * (~starts[t]).float().unsqueeze(-1) for x in s)
            y, s = core.step(obs[t], s)
            steps.append(y)
    assert starts[1:].any() and out.shape == (T, B, 12)
    torch.testing.assert_close(out, torch.stack(steps), atol=1e-5, rtol=1e-5)
    for a, b in zip(final, s):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
