"""DI-engine's MetricSerialEvaluator: a policy scored on a (DataLoader, IMetric) pair."""

import pytest
import torch
from easydict import EasyDict
from torch.utils.data import DataLoader, TensorDataset

from parallel_rl.worker import IMetric, MetricSerialEvaluator, create_serial_evaluator


class Accuracy(IMetric):
    def eval(self, inputs, label):
        return {"accuracy": float((inputs.argmax(dim=-1) == label).float().mean()), "n": len(label)}

    def reduce_mean(self, inputs):
        n = sum(r["n"] for r in inputs)
        return {"accuracy": sum(r["accuracy"] * r["n"] for r in inputs) / n}

    def gt(self, metric1, metric2):
        value2 = metric2 if isinstance(metric2, (int, float)) else metric2["accuracy"]
        return metric1["accuracy"] >= value2


class ThresholdClassifier(torch.nn.Module):
    """Class 1 where x > threshold: logits [0, x - threshold]."""

    def __init__(self, threshold: float):
        super().__init__()
        self.threshold = threshold

    def forward(self, x):
        return torch.stack([torch.zeros_like(x[:, 0]), x[:, 0] - self.threshold], dim=-1)


@pytest.fixture
def labelled():
    """20 points x = 0.05, 0.1, ..., 1.0, labelled 1 where x > 0.5: a threshold of t misclassifies |t - 0.5| / 0.05."""
    x = torch.arange(1, 21, dtype=torch.float32).unsqueeze(1) / 20
    return DataLoader(TensorDataset(x, (x[:, 0] > 0.5).long()), batch_size=6)


def test_returns_the_metric_of_the_policy_on_the_whole_dataset(labelled):
    evaluator = MetricSerialEvaluator(EasyDict(eval_freq=1), (labelled, Accuracy()), ThresholdClassifier(0.3))
    stop, result = evaluator.eval(train_iter=1)
    assert result == pytest.approx({"accuracy": 16 / 20}) and stop is False  # 0.35..0.5 misclassified


def test_gt_decides_best_and_saves_the_best_checkpoint(labelled):
    saved = []
    evaluator = MetricSerialEvaluator(None, (labelled, Accuracy()), ThresholdClassifier(0.3))
    evaluator.eval(saved.append)
    evaluator.reset_policy(ThresholdClassifier(0.1))  # worse: not a new best
    evaluator.eval(saved.append)
    assert evaluator.best_result == pytest.approx({"accuracy": 0.8}) and saved == ["ckpt_best.pt"]
    evaluator.reset_policy(ThresholdClassifier(0.5))  # perfect: a new best
    evaluator.eval(saved.append)
    assert evaluator.best_result == {"accuracy": 1.0} and saved == ["ckpt_best.pt"] * 2


def test_stop_value_stops(labelled):
    evaluator = create_serial_evaluator(
        EasyDict(type="metric", stop_value=0.9), env=(labelled, Accuracy()), policy=ThresholdClassifier(0.3)
    )
    assert isinstance(evaluator, MetricSerialEvaluator)
    assert evaluator.eval()[0] is False  # 0.8 < 0.9
    evaluator.reset(_policy=ThresholdClassifier(0.45))
    stop, result = evaluator.eval()
    assert stop is True and result["accuracy"] == pytest.approx(0.95)
    assert evaluator.should_eval(0) and not evaluator.should_eval(10)  # eval_freq defaults to 50


def test_needs_an_imetric(labelled):
    with pytest.raises(TypeError, match="needs \\(DataLoader, IMetric\\)"):
        MetricSerialEvaluator(None, (labelled, object()), ThresholdClassifier(0.3))
    empty = MetricSerialEvaluator(None, ([], Accuracy()), ThresholdClassifier(0.3))
    with pytest.raises(ValueError, match="no batch"):
        empty.eval()
