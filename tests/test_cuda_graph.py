"""``policy.learn.cuda_graph``: SAC's and TD3's updates recorded as CUDA graphs (parallel_rl/policy/graphs.py).

On the CPU the option changes nothing: the same seed and batches give the same losses with it on and off. On a
machine with CUDA the recorded graph must give the eager update's numbers (the first three updates are eager
warm-ups, the rest replays), before and after a state load (which replaces the optimizer tensors the graph
recorded); without CUDA that test is skipped saying so.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from parallel_rl.config import compile_config
from parallel_rl.envs.spaces import ActionSpec
from parallel_rl.policy import create_policy
from parallel_rl.policy.graphs import GraphedUpdate


def losses(kind: str, device: str, cuda_graph: bool, updates: int = 8) -> list:
    cfg = compile_config(
        {
            "env": {"env_id": "Pendulum-v1"},
            "policy": {"type": kind, "learn": {"batch_size": 32, "cuda_graph": cuda_graph}},
        }
    )
    spec = ActionSpec("box", shape=(2,), low=np.full(2, -1.0, np.float32), high=np.full(2, 1.0, np.float32))
    policy = create_policy(cfg.policy, 5, spec, seed=0, device=device)
    rng = np.random.default_rng(0)
    out = []
    for i in range(updates):
        batch = {
            "obs": rng.normal(size=(32, 5)).astype(np.float32),
            "next_obs": rng.normal(size=(32, 5)).astype(np.float32),
            "action": rng.uniform(-1, 1, (32, 2)).astype(np.float32),
            "reward": rng.normal(size=32).astype(np.float32),
            "done": np.zeros(32, bool),
            "discount": np.full(32, 0.99, np.float32),
            "index": np.arange(32),
        }
        if i == updates // 2:
            policy.load_state_dict(policy.state_dict())
        info = policy.forward_learn(batch)
        out.append((float(info["critic_loss"]), float(info["policy_loss"]), info["priority"].tolist()))
    return out


@pytest.mark.parametrize("kind", ["sac", "td3"])
def test_cuda_graph_option_changes_nothing_on_the_cpu(kind):
    assert losses(kind, "cpu", True) == losses(kind, "cpu", False)


def test_graphed_update_passes_the_branch_key_to_the_update():
    seen = []
    update = GraphedUpdate(lambda t, key: seen.append(key) or {"x": t["x"] * 2}, "cpu")
    out = update({"x": torch.ones(3)}, key=True)
    assert seen == [True] and out["x"].tolist() == [2.0, 2.0, 2.0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the recorded graph runs only on CUDA")
@pytest.mark.parametrize("kind", ["sac", "td3"])
def test_recorded_graph_gives_the_eager_updates_numbers_on_cuda(kind):
    graphed, eager = losses(kind, "cuda", True, 12), losses(kind, "cuda", False, 12)
    for (c1, p1, pr1), (c2, p2, pr2) in zip(graphed, eager):
        assert c1 == pytest.approx(c2, rel=1e-4, abs=1e-5) and p1 == pytest.approx(p2, rel=1e-4, abs=1e-5)
        assert np.allclose(pr1, pr2, rtol=1e-4, atol=1e-5)
