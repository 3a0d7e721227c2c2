import pytest

from parallel_rl.envs import EnvManager
from parallel_rl.worker import InteractionSerialEvaluator, VectorEvalMonitor
from parallel_rl.evaluator.serial import InteractionSerialEvaluator as Evaluator
from tests.support import ConstantPolicy


def test_monitor_spreads_episodes_evenly():
    monitor = VectorEvalMonitor(env_num=3, n_episode=8)
    assert monitor.quota.tolist() == [3, 3, 2]
    for _ in range(5):  # env 0 finishes many short episodes; only its first 3 count
        monitor.update(0, 1.0, 1)
    assert not monitor.is_finished()
    for _ in range(3):
        monitor.update(1, 10.0, 10)
    for _ in range(2):
        monitor.update(2, 20.0, 20)
    assert monitor.is_finished()
    assert sorted(monitor.returns()) == [1.0] * 3 + [10.0] * 3 + [20.0] * 2
    with pytest.raises(ValueError, match="n_episode"):
        VectorEvalMonitor(env_num=4, n_episode=2)


def make_evaluator(action, stop_value, eval_freq=10):
    env = EnvManager("parallel_rl/Counting-v0", 3, env_kwargs={"episode_length": 4})
    cfg = Evaluator.default_config()
    cfg.eval_freq = eval_freq
    return InteractionSerialEvaluator(cfg, env, ConstantPolicy(action), stop_value=stop_value, n_evaluator_episode=5)


def test_eval_mean_return_and_stop_flag():
    evaluator = make_evaluator(action=1, stop_value=4)
    saved = []
    stop, info = evaluator.eval(saved.append, train_iter=7, envstep=100)
    assert stop is True
    assert info["eval_episode_return_mean"] == 4.0 and info["episodes"] == 5
    assert info["train_iter"] == 7 and info["envstep"] == 100
    assert saved == ["ckpt_best.pt"]
    # not a new best: no second save
    evaluator.eval(saved.append)
    assert saved == ["ckpt_best.pt"]
    evaluator.close()


def test_eval_below_stop_value():
    evaluator = make_evaluator(action=0, stop_value=1)
    stop, info = evaluator.eval()
    assert stop is False and info["eval_episode_return_mean"] == 0.0
    evaluator.close()


def test_should_eval_frequency():
    evaluator = make_evaluator(action=1, stop_value=4, eval_freq=10)
    assert [evaluator.should_eval(i) for i in (0, 5, 9, 10, 15, 20)] == [True, False, False, True, False, True]
    evaluator.close()
