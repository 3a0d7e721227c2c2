"""Serial workers: collectors, evaluator, learner (library code, no servers)."""
from .collector import (
    COLLECTOR_REGISTRY,
    CollectStats,
    EpisodeSerialCollector,
    ISerialCollector,
    SampleSerialCollector,
    create_serial_collector,
)
from .evaluator import InteractionSerialEvaluator, ISerialEvaluator, VectorEvalMonitor
from .learner import (
    BaseLearner,
    LearnerHook,
    build_learner_hook_by_cfg,
    create_learner,
    merge_hooks,
    register_learner_hook,
)

__all__ = [
    "COLLECTOR_REGISTRY", "CollectStats", "EpisodeSerialCollector", "ISerialCollector",
    "SampleSerialCollector", "create_serial_collector", "InteractionSerialEvaluator",
    "ISerialEvaluator", "VectorEvalMonitor", "BaseLearner", "LearnerHook",
    "build_learner_hook_by_cfg", "create_learner", "merge_hooks", "register_learner_hook",
]
