"""R2D2 (policy.type='r2d2'): value rescaling, burn-in without gradient, the sequences' stored states, priorities
per sequence in the serial buffer and in the cluster's replay index, and both pipelines end to end."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from parallel_rl.collector.serial import SampleSerialCollector, concat_columns
from parallel_rl.config import compile_config
from parallel_rl.data.buffer import create_buffer
from parallel_rl.data.flows import train_from_buffer
from parallel_rl.entry.serial import serial_pipeline
from parallel_rl.envs.env_manager import EnvManager
from parallel_rl.learner.learner import create_learner
from parallel_rl.policy import create_policy
from parallel_rl.policy.r2d2 import inverse_value_rescale, value_rescale
from parallel_rl.storage import SharedStorage

BURNIN, UNROLL, NSTEP = 3, 6, 2
LENGTH = BURNIN + UNROLL + NSTEP


def r2d2_cfg(**overrides):
    cfg = dict(
        env=dict(env_id="CartPole-v1", collector_env_num=3, evaluator_env_num=2, n_evaluator_episode=2),
        policy=dict(
            type="r2d2",
            burnin_step=BURNIN,
            nstep=NSTEP,
            model=dict(hidden_size_list=[16], recurrent=dict(type="lstm", hidden_size=8)),
            learn=dict(unroll_len=UNROLL, batch_size=8, update_per_collect=2),
            collect=dict(n_sample=2),
        ),
    )
    for key, value in overrides.items():
        cfg[key] = {**cfg[key], **value} if isinstance(cfg.get(key), dict) else value
    return compile_config(cfg)


def collect_sequences(cfg, calls: int, per_call: int = 1, seed: int = 0):
    env = EnvManager.from_cfg(cfg.env, cfg.env.collector_env_num, seed=seed)
    policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=seed)
    collector = SampleSerialCollector(None, env, policy.collect_mode, discount_factor=cfg.policy.discount_factor)
    try:
        # one sequence per call, the surplus kept for the next (as the pipelines collect): the lanes' state crosses
        # many collect-call boundaries
        pieces = [collector.collect(per_call, policy_kwargs={"eps": 0.5}, keep_extra=True) for _ in range(calls)]
    finally:
        collector.close()
    return policy, concat_columns(pieces)


def test_value_rescaling_and_its_inverse_are_inverses():
    x = torch.tensor([-1e4, -500.0, -3.0, -1e-3, 0.0, 1e-3, 0.5, 3.0, 500.0, 1e4], dtype=torch.float64)
    torch.testing.assert_close(inverse_value_rescale(value_rescale(x)), x, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(value_rescale(inverse_value_rescale(x)), x, rtol=1e-6, atol=1e-6)
    # h squashes: h(500) = sqrt(501) - 1 + 0.5
    assert float(value_rescale(torch.tensor(500.0))) == pytest.approx(501**0.5 - 1 + 0.5, rel=1e-6)


def test_sequences_have_the_configured_layout_and_a_lanes_first_begins_with_padding():
    cfg = r2d2_cfg()
    _, seqs = collect_sequences(cfg, calls=12)
    assert seqs["obs"].shape == (12, LENGTH, 4) and seqs["action"].shape == (12, LENGTH)
    assert seqs["hidden_h"].shape == (12, 8) and seqs["hidden_c"].shape == (12, 8)
    # a lane's first sequence begins with BURNIN padding rows (each an end, zero state); the trained rows of
    # consecutive sequences of a lane follow each other: sequence j + 1 begins UNROLL rows after sequence j
    first = np.flatnonzero((seqs["obs"][:, :BURNIN] == 0).all(axis=(1, 2)))
    assert len(first) == cfg.env.collector_env_num
    assert seqs["end"][first, :BURNIN].all() and (seqs["hidden_h"][first] == 0).all()


def successors(seqs):
    """Pairs (i, j): sequence j is the next one of sequence i's lane (its first rows are i's rows from UNROLL)."""
    pairs = []
    for i in range(len(seqs["obs"])):
        for j in range(len(seqs["obs"])):
            if i != j and np.array_equal(seqs["obs"][j, : LENGTH - UNROLL], seqs["obs"][i, UNROLL:]):
                pairs.append((i, j))
    return pairs


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_the_state_stored_at_a_sequence_start_is_the_one_the_collector_acted_with(kind):
    """Re-running the (unchanged) core over a sequence's first UNROLL rows from its stored state, zeroing it where
    episodes begin, lands on the state stored with the lane's next sequence: the collector's state, never reset at
    the collect-call boundaries between them, and zeroed at every episode start."""
    cfg = r2d2_cfg(
        policy=dict(type="r2d2", model=dict(hidden_size_list=[16], recurrent=dict(type=kind, hidden_size=8)))
    )
    policy, seqs = collect_sequences(cfg, calls=24)
    pairs = successors(seqs)
    assert len(pairs) >= 15, "too few consecutive sequences to check"
    assert seqs["end"][:, BURNIN:].any(), "no episode ended inside a sequence: nothing checks the reset"
    core = policy.model.core
    keys = core.state_keys
    for i, j in pairs:
        obs = torch.as_tensor(seqs["obs"][i, :UNROLL, None])
        starts = torch.zeros(UNROLL, 1, dtype=torch.bool)
        starts[1:, 0] = torch.as_tensor(seqs["end"][i, : UNROLL - 1])
        with torch.no_grad():
            _, after = core.unroll(obs, tuple(torch.as_tensor(seqs[k][i : i + 1]) for k in keys), starts)
        if seqs["end"][i, UNROLL - 1]:  # the row before the next sequence ended an episode: it starts afresh
            assert all((seqs[k][j] == 0).all() for k in keys)
            continue
        for k, s in zip(keys, after):
            np.testing.assert_allclose(s[0].numpy(), seqs[k][j], atol=1e-5, err_msg=f"{k} of sequence {j}")
    assert any((seqs["hidden_h"][j] != 0).any() for _, j in pairs), "every stored state is zero"


def test_burn_in_rows_carry_no_gradient():
    cfg = r2d2_cfg()
    policy, seqs = collect_sequences(cfg, calls=8)
    batch = dict(seqs)
    obs = torch.as_tensor(seqs["obs"]).clone().requires_grad_(True)
    batch["obs"] = obs
    loss, _, _, use = policy.sequence_loss(batch)
    loss.backward()
    grad = obs.grad.abs().sum(dim=(0, 2))  # per position in the sequence
    assert use.any()
    assert (grad[:BURNIN] == 0).all(), f"burn-in rows got gradient {grad[:BURNIN]}"
    assert (grad[BURNIN : BURNIN + UNROLL] > 0).any(), "the trained rows got no gradient: the check is void"
    assert (grad[BURNIN + UNROLL :] == 0).all(), "the n-step target rows must carry no gradient either"
    # the burn-in rows' rewards and actions are not learnt from: changing them leaves the loss as it was
    changed = dict(batch, obs=seqs["obs"], reward=seqs["reward"].copy(), action=seqs["action"].copy())
    changed["reward"][:, :BURNIN] += 100.0
    changed["action"][:, :BURNIN] = 1 - changed["action"][:, :BURNIN]
    with torch.no_grad():
        same = policy.sequence_loss(dict(batch, obs=seqs["obs"]))[0]
        assert float(policy.sequence_loss(changed)[0]) == pytest.approx(float(same), rel=1e-6)


def test_an_exported_r2d2_policy_acts_like_its_eval_mode_carrying_the_lstm_state(tmp_path):
    """The acting module, its TorchScript and ONNX files (through load_policy's Agent) take the eval mode's greedy
    actions step after step with the LSTM state fed back, and start afresh where episodes end (reset)."""
    import importlib.util

    from parallel_rl.after.acting import Agent, acting_module, torch_forward
    from parallel_rl.after.api import load_policy
    from parallel_rl.after.export import export_acting

    cfg = r2d2_cfg()
    with EnvManager.from_cfg(cfg.env, 1, seed=0) as env:
        policy = create_policy(cfg.policy, env.obs_dim, env.action_spec, seed=0)
        obs_shape = env.obs_shape
    with torch.no_grad():
        for p in policy.model.parameters():  # larger weights: actions that depend on the state
            p.mul_(4.0)
    lanes, mode = 5, policy.eval_mode
    episodes = np.split(np.random.default_rng(0).normal(0.0, 1.0, size=(40, lanes, 4)).astype(np.float32), [18])

    def eval_mode_actions(resets: bool) -> np.ndarray:
        actions, state = [], mode.initial_state(lanes)
        for episode in episodes:
            state = mode.initial_state(lanes) if resets else state
            for step in episode:
                out = mode.forward(step, state=state)
                actions.append(out["action"])
                state = out["next_state"]
        return np.array(actions)

    expected = eval_mode_actions(resets=True)
    assert not np.array_equal(expected, eval_mode_actions(resets=False)), "the reset changes nothing: a void check"
    memoryless = np.array(
        [mode.forward(step, state=mode.initial_state(lanes))["action"] for episode in episodes for step in episode]
    )
    assert not np.array_equal(expected, memoryless), "the actions do not depend on the state: a void check"
    module = acting_module(policy)
    assert module.state_sizes == {"hidden_h": 8, "hidden_c": 8}
    agents = {"acting": Agent(torch_forward(module), obs_shape, "discrete", "", "float32", module.state_sizes)}
    formats = ["torchscript"] + (["onnx"] if importlib.util.find_spec("onnxruntime") else [])
    for fmt in formats:
        agents[fmt] = load_policy(export_acting(module, obs_shape, "discrete", fmt, str(tmp_path / f"r2d2.{fmt}")))
    for name, agent in agents.items():
        assert agent.state_sizes == {"hidden_h": 8, "hidden_c": 8}, name
        actions = []
        for episode in episodes:
            agent.reset()  # the episodes ended: the next act starts from zeros
            actions += [agent.act(step) for step in episode]
        np.testing.assert_array_equal(np.array(actions), expected, err_msg=name)
        agent.reset()
        assert agent.act(episodes[0][0][0]) == expected[0][0], name  # one observation of one lane


def test_sequence_priorities_reach_the_serial_buffer():
    cfg = r2d2_cfg()
    policy, seqs = collect_sequences(cfg, calls=16)
    buffer = create_buffer(dict(type="advanced", replay_buffer_size=64, alpha=0.6))
    buffer.push(seqs)
    learner = create_learner(cfg.policy.learn.learner, policy.learn_mode)
    before = buffer.state_dict()["prio/leaves"][:16].copy()
    assert np.allclose(before, 1.0)  # new sequences get the largest priority seen (1)
    batch = buffer.sample(8)
    with torch.no_grad():
        _, _, td_error, use = policy.sequence_loss(batch)
    abs_td = (td_error.abs() * use).numpy()
    expected = 0.9 * abs_td.max(0) + 0.1 * abs_td.sum(0) / np.maximum(use.numpy().sum(0), 1)
    learner.train(batch, 0)
    np.testing.assert_allclose(learner.priority_info["priority"], expected, rtol=1e-4, atol=1e-6)
    buffer.update(learner.priority_info)
    leaves = buffer.state_dict()["prio/leaves"]
    np.testing.assert_allclose(leaves[batch["index"]], (expected + 1e-6) ** 0.6, rtol=1e-4)
    untouched = np.setdiff1d(np.arange(16), batch["index"])
    np.testing.assert_array_equal(leaves[untouched], before[untouched])
    train_from_buffer(learner, buffer, cfg.policy.learn, 0)  # the serial pipeline's loop does the same
    assert learner.train_iter == 1 + cfg.policy.learn.update_per_collect


COUNTING = dict(
    env_id="parallel_rl/Counting-v0",
    env_kwargs=dict(episode_length=5),
    collector_env_num=2,
    evaluator_env_num=2,
    n_evaluator_episode=2,
    stop_value=4.0,
)


def test_serial_r2d2_learns_the_toy_env(tmp_path):
    cfg = r2d2_cfg(
        env=COUNTING,
        policy=dict(
            learn=dict(unroll_len=UNROLL, batch_size=16, update_per_collect=4, target_update_freq=20),
            other=dict(
                eps=dict(type="exp", start=0.95, end=0.05, decay=300),
                replay_buffer=dict(type="advanced", replay_buffer_size=500),
            ),
            eval=dict(evaluator=dict(eval_freq=10)),
        ),
        serial=dict(max_env_step=3000),
        exp_name=str(tmp_path / "exp"),
    )
    result = serial_pipeline(cfg)
    assert result.solved, result


TOY_R2D2 = f"""
main_config = dict(
    # a stop value above the best return (5): the run trains for its whole budget, priorities flowing all along
    env={dict(COUNTING, stop_value=100.0)!r},
    policy=dict(type="r2d2", burnin_step={BURNIN}, nstep={NSTEP},
                model=dict(hidden_size_list=[16], recurrent=dict(type="lstm", hidden_size=8)),
                learn=dict(unroll_len={UNROLL}, batch_size=16, target_update_freq=20),
                collect=dict(n_sample=2),
                other=dict(eps=dict(decay=300), replay_buffer=dict(type="advanced", replay_buffer_size=500))),
    parallel=dict(coordinator=dict(heartbeat_ttl=2.0), worker=dict(heartbeat_interval=0.2),
                  commander=dict(eval_freq=20, max_seconds=120.0, max_env_step=1500, max_env_steps_per_update=4.0),
                  collector=dict(chunk_size=8), learner=dict(min_buffer_size=16, publish_every=10)),
)
"""


def test_cluster_r2d2_learns_the_toy_env_with_priorities_per_sequence(cli, tmp_path):
    config = tmp_path / "toy_r2d2.py"
    config.write_text(TOY_R2D2)
    run = cli("run", "run", "-c", str(config), "--set", f"exp_name={tmp_path / 'exp'}")
    run.wait(240)
    found = re.search(r"^stopped: env step budget 1500 used up.* best_eval_return=(\S+)", run.output(), re.M)
    assert found, run.output()[-3000:]
    assert float(found.group(1)) >= 4.0, "the cluster's R2D2 did not learn the toy env (best return 5)"
    # the coordinator's replay index (its last snapshot): one row per sequence, each with its own priority
    meta, arrays = SharedStorage(str(tmp_path / "exp" / "shared")).states.latest()
    valid = arrays["buffer/meta/valid"]
    leaves = arrays["buffer/prio/leaves"][valid]
    assert valid.sum() >= 1500 // (UNROLL + 1) // 2, "fewer sequences than the env steps make"
    assert len(np.unique(leaves)) > valid.sum() // 2, "most sequences kept the priority they were pushed with"
