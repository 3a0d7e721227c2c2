"""DI-engine's serial names: BaseSerialCommander, the factory helpers, SampleSerialCollector.collect's arguments."""

import numpy as np
import pytest
import torch
from easydict import EasyDict

from parallel_rl.config import compile_config
from parallel_rl.data import SequenceReplayBuffer
from parallel_rl.entry.serial import serial_pipeline
from parallel_rl.errors import ConfigError
from parallel_rl.worker import (
    BaseLearner,
    BaseSerialCommander,
    EpisodeSerialCollector,
    InteractionSerialEvaluator,
    LearnerHook,
    SampleSerialCollector,
    add_learner_hook,
    create_serial_evaluator,
    get_buffer_cls,
    get_serial_collector_cls,
    to_tensor_transitions,
)

from .support import ConstantPolicy
from .test_learner import FakeLearnMode, learner_cfg


class FakeCollector:
    envstep = 0


def test_commander_step_adjusts_epsilon_each_iteration_from_the_policy_schedule():
    cfg = compile_config({"policy": {"other": {"eps": {"type": "linear", "start": 1.0, "end": 0.1, "decay": 100}}}})
    learner, collector = BaseLearner(learner_cfg(), FakeLearnMode()), FakeCollector()
    commander = BaseSerialCommander(None, learner, collector, None, None, cfg.policy)
    assert commander.step() == {"eps": 1.0}
    collector.envstep = 50
    assert commander.step() == pytest.approx({"eps": 0.55})
    collector.envstep = 1000
    assert commander.step() == {"eps": pytest.approx(0.1)} and commander.info["envstep"] == 1000
    assert BaseSerialCommander(None, learner, collector, None, None).step() == {}  # no policy: no settings


def test_the_serial_commanders_section_refuses_a_key_it_would_ignore():
    # DI-engine passes policy.other.commander; ours has no settings (the eps schedule is the policy's): a key there
    # did nothing, silently (an eps schedule put there was never applied)
    learner, collector = BaseLearner(learner_cfg(), FakeLearnMode()), FakeCollector()
    assert BaseSerialCommander.default_config() == {}
    for cfg in (None, BaseSerialCommander.default_config(), {"cfg_type": "BaseSerialCommanderDict"}):  # DI-engine's
        assert BaseSerialCommander(cfg, learner, collector, None, None).step() == {}
    with pytest.raises(ConfigError, match=r"policy\.other\.commander\.eps .*policy\.other\.eps"):
        BaseSerialCommander({"eps": {"start": 1.0}}, learner, collector, None, None)


def test_serial_pipeline_collects_with_the_commanders_settings(tmp_path, monkeypatch):
    seen = []
    step = BaseSerialCommander.step
    monkeypatch.setattr(BaseSerialCommander, "step", lambda self: seen.append(step(self)) or seen[-1])
    cfg = compile_config(
        {
            "exp_name": str(tmp_path / "exp"),
            "env": {
                "env_id": "parallel_rl/Counting-v0",
                "env_kwargs": {"episode_length": 5},
                "collector_env_num": 2,
                "evaluator_env_num": 2,
                "n_evaluator_episode": 2,
                "stop_value": 1e9,
            },
            "policy": {"model": {"hidden_size_list": [8]}, "collect": {"n_sample": 16}},
            "serial": {"max_train_iter": 3},
        }
    )
    serial_pipeline(cfg)
    assert len(seen) >= 2 and all(set(s) == {"eps"} for s in seen) and seen[0]["eps"] > seen[-1]["eps"]


def test_factory_helpers_return_the_registered_classes():
    assert get_serial_collector_cls(EasyDict(type="episode")) is EpisodeSerialCollector
    assert get_serial_collector_cls(EasyDict()) is SampleSerialCollector
    assert get_buffer_cls(EasyDict(type="sequence")) is SequenceReplayBuffer
    with pytest.raises(ConfigError, match="unknown buffer type 'nope'.*naive"):
        get_buffer_cls(EasyDict(type="nope"))
    with pytest.raises(ConfigError, match="import_names: cannot import 'no_such_module_xyz'"):
        get_serial_collector_cls(EasyDict(type="sample", import_names=["no_such_module_xyz"]))


def test_create_serial_evaluator_builds_the_interaction_evaluator(toy_env, constant_policy):
    evaluator = create_serial_evaluator(
        InteractionSerialEvaluator.default_config(),
        env=toy_env,
        policy=constant_policy,
        stop_value=5.0,
        n_evaluator_episode=4,
    )
    assert isinstance(evaluator, InteractionSerialEvaluator)
    stop, info = evaluator.eval()
    assert stop and info["eval_episode_return_mean"] == 5.0


class Note(LearnerHook):
    def __call__(self, learner):
        learner.notes = getattr(learner, "notes", []) + [self.name]


def test_add_learner_hook_inserts_in_priority_order():
    hooks = {"after_iter": [Note("b", 50, "after_iter")], "before_run": [], "after_run": [], "before_iter": []}
    add_learner_hook(hooks, Note("a", 10, "after_iter"))
    add_learner_hook(hooks, Note("c", 90, "after_iter"))
    assert [h.name for h in hooks["after_iter"]] == ["a", "b", "c"]


def test_to_tensor_transitions():
    columns = {"obs": np.ones((3, 4), np.float32), "action": np.arange(3)}
    tensors = to_tensor_transitions(columns)
    assert tensors["obs"].dtype == torch.float32 and tensors["action"].tolist() == [0, 1, 2]
    assert [t["obs"].shape for t in to_tensor_transitions([columns, columns])] == [(3, 4), (3, 4)]


def test_collect_falls_back_to_the_configured_n_sample(toy_env, constant_policy):
    collector = SampleSerialCollector(None, toy_env, constant_policy, n_sample=6)
    assert len(collector.collect()["obs"]) == 6
    from_cfg = SampleSerialCollector(EasyDict(type="sample", n_sample=3), toy_env, constant_policy)
    assert len(from_cfg.collect()["obs"]) == 3
    with pytest.raises(ValueError, match="without n_sample needs a collector built with n_sample"):
        SampleSerialCollector(None, toy_env, constant_policy).collect()


def test_drop_extra_false_returns_every_transition_collected(toy_env, constant_policy):
    collector = SampleSerialCollector(None, toy_env, constant_policy)
    assert len(collector.collect(5, drop_extra=False)["obs"]) == 8  # two steps of 4 envs
    assert len(collector.collect(5)["obs"]) == 5  # drop_extra=True: exactly n_sample


def test_random_collect_samples_the_action_space_and_may_go_unrecorded(toy_env):
    policy = ConstantPolicy(1)
    collector = SampleSerialCollector(None, toy_env, policy)
    toy_env.action_space.seed(0)
    data = collector.collect(200, random_collect=True)
    assert set(np.unique(data["action"])) == {0, 1} and policy.calls == []  # the policy never acted
    recorded = collector.last_stats
    collector.collect(40, random_collect=True, record_random_collect=False)
    assert collector.last_stats is recorded and collector.envstep == 240  # steps count, stats not recorded


def test_level_seeds_are_not_supported(toy_env, constant_policy):
    with pytest.raises(ValueError, match="level_seeds=.*not supported"):
        SampleSerialCollector(None, toy_env, constant_policy).collect(4, level_seeds=[1, 2])
