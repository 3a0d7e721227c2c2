"""DI-engine's ``ding.worker`` names, in one place: the serial collectors, evaluators and learner, the comm
classes and the cluster's coordinator, collector and learner classes. The code lives in the wings
(``parallel_rl.coordinator``, ``.collector``, ``.learner``, ``.evaluator``, ``.slave``) under descriptive names, and
DI-engine's extra surface on them in ``parallel_rl.compat``; this package only re-exports."""

from ..data.buffer import get_buffer_cls
from ..collector.serial import (
    COLLECTOR_REGISTRY,
    CollectStats,
    EpisodeSerialCollector,
    ISerialCollector,
    SampleSerialCollector,
    create_serial_collector,
    get_serial_collector_cls,
    to_tensor_transitions,
)
from ..entry.commander import BaseSerialCommander
from ..evaluator.serial import (
    EVALUATOR_REGISTRY,
    IMetric,
    InteractionSerialEvaluator,
    ISerialEvaluator,
    MetricSerialEvaluator,
    VectorEvalMonitor,
    create_serial_evaluator,
)
from ..collector.battle import BattleCollectStats, BattleEpisodeSerialCollector, BattleSampleSerialCollector
from ..evaluator.battle import BattleInteractionSerialEvaluator
from ..learner.learner import (
    BaseLearner,
    LearnerHook,
    add_learner_hook,
    build_learner_hook_by_cfg,
    create_learner,
    merge_hooks,
    register_learner_hook,
)
from ..collector.base import BaseParallelCollector
from ..collector.build import create_parallel_collector

# DI-engine's comm and cluster names (parallel_rl.compat): lazily, because they import the slaves' HTTP stack
_COMM = (
    "BaseCommCollector",
    "BaseCommLearner",
    "NaiveCollector",
    "create_comm_collector",
    "create_comm_learner",
    "register_comm_collector",
    "register_comm_learner",
)


_CLUSTER = (
    "Coordinator",
    "FlaskFileSystemCollector",
    "FlaskFileSystemLearner",
    "LearnerAggregator",
    "MarineParallelCollector",
    "ZerglingParallelCollector",
)


def __getattr__(name: str):
    if name in _COMM:
        from ..compat import comm

        return getattr(comm, name)
    if name in _CLUSTER:
        from ..compat import ding

        return getattr(ding, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BaseParallelCollector",
    "create_parallel_collector",
    *_COMM,
    *_CLUSTER,
    "BattleCollectStats",
    "BattleEpisodeSerialCollector",
    "BattleInteractionSerialEvaluator",
    "BattleSampleSerialCollector",
    "COLLECTOR_REGISTRY",
    "CollectStats",
    "EpisodeSerialCollector",
    "ISerialCollector",
    "SampleSerialCollector",
    "create_serial_collector",
    "InteractionSerialEvaluator",
    "ISerialEvaluator",
    "VectorEvalMonitor",
    "BaseLearner",
    "LearnerHook",
    "build_learner_hook_by_cfg",
    "create_learner",
    "merge_hooks",
    "register_learner_hook",
    "get_buffer_cls",
    "get_serial_collector_cls",
    "to_tensor_transitions",
    "BaseSerialCommander",
    "EVALUATOR_REGISTRY",
    "IMetric",
    "MetricSerialEvaluator",
    "create_serial_evaluator",
    "add_learner_hook",
]
