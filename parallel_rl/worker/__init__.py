"""Serial workers: collectors, evaluator, learner (library code, no servers)."""
from ..data.buffer import get_buffer_cls
from .collector import (
    COLLECTOR_REGISTRY,
    CollectStats,
    EpisodeSerialCollector,
    ISerialCollector,
    SampleSerialCollector,
    create_serial_collector,
    get_serial_collector_cls,
    to_tensor_transitions,
)
from .commander import BaseSerialCommander
from .evaluator import (
    EVALUATOR_REGISTRY,
    IMetric,
    InteractionSerialEvaluator,
    ISerialEvaluator,
    MetricSerialEvaluator,
    VectorEvalMonitor,
    create_serial_evaluator,
)
from .battle_collector import BattleCollectStats, BattleEpisodeSerialCollector, BattleSampleSerialCollector
from .battle_evaluator import BattleInteractionSerialEvaluator
from .learner import (
    BaseLearner,
    LearnerHook,
    add_learner_hook,
    build_learner_hook_by_cfg,
    create_learner,
    merge_hooks,
    register_learner_hook,
)
from .parallel_collector import BaseParallelCollector

# DI-engine's comm names live with the slaves (parallel_rl.interaction.comm); importable here too,
# lazily, because the slaves themselves import this package
_COMM = ("BaseCommCollector", "BaseCommLearner", "NaiveCollector", "create_comm_collector", "create_comm_learner",
         "register_comm_collector", "register_comm_learner")


def __getattr__(name: str):
    if name in _COMM:
        from ..interaction import comm

        return getattr(comm, name)
    if name == "LearnerAggregator":  # DI-engine's ding.worker.LearnerAggregator (a slave too: lazily)
        from ..interaction.learner_aggregator import LearnerAggregator

        return LearnerAggregator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BaseParallelCollector", *_COMM, "LearnerAggregator", "BattleCollectStats",
    "BattleEpisodeSerialCollector",
    "BattleInteractionSerialEvaluator", "BattleSampleSerialCollector",
    "COLLECTOR_REGISTRY", "CollectStats", "EpisodeSerialCollector", "ISerialCollector",
    "SampleSerialCollector", "create_serial_collector", "InteractionSerialEvaluator",
    "ISerialEvaluator", "VectorEvalMonitor", "BaseLearner", "LearnerHook",
    "build_learner_hook_by_cfg", "create_learner", "merge_hooks", "register_learner_hook",
    "get_buffer_cls", "get_serial_collector_cls", "to_tensor_transitions", "BaseSerialCommander",
    "EVALUATOR_REGISTRY", "IMetric", "MetricSerialEvaluator", "create_serial_evaluator", "add_learner_hook",
]
