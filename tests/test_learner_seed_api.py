"""BaseLearner's DI-engine names: the full hook form, train(policy_kwargs=), the parallel entry, checkpoints."""

import logging

import numpy as np
import pytest

from parallel_rl.errors import ConfigError
from parallel_rl.worker import BaseLearner, build_learner_hook_by_cfg

from .test_learner import FakeLearnMode, learner_cfg


class KwargsLearnMode(FakeLearnMode):
    def forward(self, batch, **kwargs):
        self.kwargs = kwargs
        return {"loss": float(np.mean(batch["x"]))}


def test_build_learner_hook_by_cfg_takes_the_full_hook_form():
    hooks = build_learner_hook_by_cfg(
        [
            dict(name="log", type="log_show", priority=90, position="after_iter", ext_args=dict(freq=7)),
            dict(name="save", type="save_ckpt", priority=10, position="after_iter", ext_args=dict(freq=3)),
            dict(type="load_ckpt", position="before_run", ext_args=dict(path="")),
        ]
    )
    assert [(h.name, h.priority, h.freq) for h in hooks["after_iter"]] == [("save", 10.0, 3), ("log", 90.0, 7)]
    assert [(h.name, h.priority) for h in hooks["before_run"]] == [("load_ckpt", 20.0)]
    # a full-form dict as the value of a key works too
    hooks = build_learner_hook_by_cfg({"my_save": dict(type="save_ckpt", position="after_run", priority=5)})
    assert [(h.name, h.position) for h in hooks["after_run"]] == [("save_ckpt", "after_run")]
    with pytest.raises(ConfigError, match="position must be one of"):
        build_learner_hook_by_cfg([dict(type="save_ckpt", position="sometimes")])
    with pytest.raises(ConfigError, match="needs type and position"):
        build_learner_hook_by_cfg([dict(type="save_ckpt", position="after_iter", freq=3)])


def test_train_passes_policy_kwargs_and_tracks_envstep_and_iterations():
    mode = KwargsLearnMode()
    learner = BaseLearner(learner_cfg(), mode)
    learner.train({"x": np.ones(2)}, envstep=120, policy_kwargs={"lr_scale": 0.5})
    assert mode.kwargs == {"lr_scale": 0.5}
    assert learner.collector_envstep == 120 and learner.last_iter == 1
    assert (learner.rank, learner.world_size) == (0, 1)


def test_save_checkpoint_without_exp_dir_says_so(caplog):
    learner = BaseLearner(learner_cfg(), FakeLearnMode(), instance_name="learner t")
    with caplog.at_level(logging.WARNING, logger="parallel_rl.learner.learner"):
        assert learner.save_checkpoint("x.pt") is None
    assert "learner t: no exp_dir, checkpoint 'x.pt' not saved" in caplog.text
    assert learner.ckpt_name is None


def test_save_checkpoint_names_the_checkpoint(tmp_path):
    learner = BaseLearner(learner_cfg(), FakeLearnMode(), exp_dir=str(tmp_path))
    path = learner.save_checkpoint("ckpt_best.pt")
    assert learner.ckpt_name == "ckpt_best.pt"
    other = BaseLearner(learner_cfg(), FakeLearnMode(), exp_dir=str(tmp_path))
    other.load_checkpoint(path)
    assert other.ckpt_name == "ckpt_best.pt"


def test_setup_dataloader_then_start_trains_max_iterations_between_run_hooks():
    learner = BaseLearner(learner_cfg(), FakeLearnMode())
    with pytest.raises(RuntimeError, match="setup_dataloader"):
        learner.start(3)
    learner.setup_dataloader(({"x": np.full(2, float(i))} for i in range(10)))
    learner.start(max_iterations=3)
    assert learner.train_iter == 3 and learner.learn_info["loss"] == 2.0
    learner.setup_dataloader(lambda: {"x": np.ones(1)})  # a callable works too
    learner.start(2)
    assert learner.train_iter == 5
    learner.close()
    with pytest.raises(RuntimeError, match="setup_dataloader"):
        learner.start(1)
