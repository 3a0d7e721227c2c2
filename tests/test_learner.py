import numpy as np
import pytest
import torch

from parallel_rl.config import compile_config
from parallel_rl.errors import ConfigError
from parallel_rl.policy import DQNPolicy
from parallel_rl.worker import BaseLearner, LearnerHook, build_learner_hook_by_cfg, merge_hooks, register_learner_hook


class Recorder(LearnerHook):
    log = []

    def __call__(self, learner):
        Recorder.log.append((self.name, self.position, learner.train_iter))


class FakeLearnMode:
    """Deterministic learn mode: returns a loss equal to the batch mean."""

    def forward(self, batch):
        return {"loss": float(np.mean(batch["x"])), "priority": batch["x"] * 2}

    def state_dict(self):
        return {"w": torch.tensor([1.0])}

    def load_state_dict(self, state):
        self.loaded = state


def learner_cfg(**hook):
    cfg = BaseLearner.default_config()
    cfg.hook = hook
    return cfg


def test_hooks_run_in_position_and_priority_order():
    Recorder.log = []
    learner = BaseLearner(learner_cfg(), FakeLearnMode())
    learner.register_hook(Recorder("late", 90, "after_iter"))
    learner.register_hook(Recorder("early", 10, "after_iter"))
    learner.register_hook(Recorder("before", 50, "before_iter"))
    learner.register_hook(Recorder("run", 50, "before_run"))
    learner.call_hook("before_run")
    learner.train({"x": np.ones(3)})
    # DI-engine's count: after_iter hooks run before train_iter counts the update they follow
    assert Recorder.log == [
        ("run", "before_run", 0),
        ("before", "before_iter", 0),
        ("early", "after_iter", 0),
        ("late", "after_iter", 0),
    ]
    assert learner.train_iter == 1


def test_train_exposes_priorities_and_learn_info():
    learner = BaseLearner(learner_cfg(), FakeLearnMode())
    batch = {"x": np.array([1.0, 3.0]), "index": np.array([4, 5]), "uid": np.array([40, 50])}
    info = learner.train(batch, envstep=99)
    assert info["loss"] == 2.0 and learner.learn_info["envstep"] == 99 and learner.train_iter == 1
    np.testing.assert_array_equal(learner.priority_info["priority"], [2.0, 6.0])
    np.testing.assert_array_equal(learner.priority_info["uid"], [40, 50])


def test_merge_hooks_is_stable_by_priority():
    a = {"after_iter": [Recorder("a1", 50, "after_iter"), Recorder("a2", 10, "after_iter")]}
    b = {"after_iter": [Recorder("b1", 50, "after_iter")]}
    merged = merge_hooks(a, b)
    assert [h.name for h in merged["after_iter"]] == ["a2", "a1", "b1"]
    assert merged["before_run"] == []


def test_build_hooks_from_cfg_and_registry():
    register_learner_hook("record_test", Recorder)
    hooks = build_learner_hook_by_cfg(
        {
            "save_ckpt_after_iter": 10,
            "log_show_after_iter": 5,
            "record_test_before_run": 1,
            "save_ckpt_after_run": False,
        }
    )
    assert [type(h).__name__ for h in hooks["after_iter"]] == ["SaveCkptHook", "LogShowHook"]
    assert [h.name for h in hooks["before_run"]] == ["record_test"]
    assert hooks["after_run"] == []
    with pytest.raises(ConfigError, match="must end with"):
        build_learner_hook_by_cfg({"save_ckpt_sometimes": 1})
    with pytest.raises(ConfigError, match="unknown learner hook type"):
        build_learner_hook_by_cfg({"nosuch_after_iter": 1})


def test_save_ckpt_hook_and_load(tmp_path):
    learner = BaseLearner(
        learner_cfg(save_ckpt_after_iter=2, save_ckpt_after_run=True), FakeLearnMode(), exp_dir=str(tmp_path)
    )
    for _ in range(4):
        learner.train({"x": np.ones(1)})
    learner.call_hook("after_run")
    names = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert names == ["iteration_2.pt", "iteration_4.pt"]  # after_run at iter 4 rewrites iteration_4
    mode = FakeLearnMode()
    other = BaseLearner(learner_cfg(load_ckpt_before_run=str(tmp_path / "ckpt" / "iteration_2.pt")), mode)
    other.call_hook("before_run")
    assert other.train_iter == 2 and torch.equal(mode.loaded["w"], torch.tensor([1.0]))


def test_dqn_update_fits_terminal_targets():
    cfg = compile_config({"policy": {"learn": {"learning_rate": 3e-3, "target_update_freq": 10}}})
    policy = DQNPolicy(cfg.policy, obs_dim=2, action_num=2, seed=0)
    n = 16
    batch = {
        "obs": np.tile(np.array([[1.0, 0.0]], dtype=np.float32), (n, 1)),
        "next_obs": np.zeros((n, 2), dtype=np.float32),
        "action": np.array([0, 1] * (n // 2)),
        "reward": np.array([1.0, -1.0] * (n // 2), dtype=np.float32),
        "done": np.ones(n, dtype=bool),  # td_target == reward
        "discount": np.full(n, 0.99, dtype=np.float32),
    }
    first = policy.forward_learn(batch)["loss"]
    for _ in range(300):
        info = policy.forward_learn(batch)
    assert info["loss"] < first / 20
    q = policy.model(torch.tensor([[1.0, 0.0]])).detach().numpy()[0]
    np.testing.assert_allclose(q, [1.0, -1.0], atol=0.05)
    assert policy.forward_eval(np.array([[1.0, 0.0]], dtype=np.float32)).tolist() == [0]
    assert info["priority"].shape == (n,)


def test_dqn_bootstraps_through_target_network():
    cfg = compile_config({"policy": {"learn": {"double": False}}})
    policy = DQNPolicy(cfg.policy, obs_dim=2, action_num=2, seed=0)
    with torch.no_grad():
        for p in policy.target_network.parameters():
            p.zero_()
        policy.target_network.value.bias.fill_(2.0)  # target Q == 2 everywhere
    batch = {
        "obs": np.zeros((1, 2), np.float32),
        "next_obs": np.ones((1, 2), np.float32),
        "action": np.array([0]),
        "reward": np.array([1.0], np.float32),
        "done": np.array([False]),
        "discount": np.array([0.5], np.float32),
    }
    with torch.no_grad():
        q_before = float(policy.model(torch.zeros(1, 2))[0, 0])
    info = policy.forward_learn(batch)
    assert info["priority"][0] == pytest.approx(abs(1.0 + 0.5 * 2.0 - q_before), rel=1e-5)


def test_policy_state_round_trip():
    cfg = compile_config({})
    a = DQNPolicy(cfg.policy, 4, 2, seed=0)
    b = DQNPolicy(cfg.policy, 4, 2, seed=1)
    batch = {
        "obs": np.random.rand(8, 4).astype(np.float32),
        "next_obs": np.random.rand(8, 4).astype(np.float32),
        "action": np.zeros(8, int),
        "reward": np.ones(8, np.float32),
        "done": np.zeros(8, bool),
        "discount": np.ones(8, np.float32),
    }
    a.forward_learn(batch)
    b.load_state_dict(a.state_dict())
    obs = np.random.rand(5, 4).astype(np.float32)
    np.testing.assert_array_equal(a.forward_eval(obs), b.forward_eval(obs))
    la, lb = a.forward_learn(batch)["loss"], b.forward_learn(batch)["loss"]
    assert la == pytest.approx(lb)  # optimizer state came along too


def test_epsilon_greedy():
    cfg = compile_config({})
    policy = DQNPolicy(cfg.policy, 4, 2, seed=0)
    obs = np.zeros((1000, 4), dtype=np.float32)
    greedy = policy.forward_eval(obs)[0]
    random_share = np.mean(policy.forward_collect(obs, eps=1.0) != greedy)
    assert 0.4 < random_share < 0.6
    assert np.all(policy.forward_collect(obs, eps=0.0) == greedy)
