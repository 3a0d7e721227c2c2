"""DI-engine's policy contract under its compat name: the adapters live in :mod:`parallel_rl.policy.ding_modes`
(below the collector, evaluator and learner that wrap a DI-engine mode with them)."""

from ..policy.ding_modes import (
    DingCollectMode,
    DingEvalMode,
    DingLearnMode,
    DingSampleBuilder,
    as_collect_mode,
    as_eval_mode,
    as_learn_mode,
    columns_to_samples,
    get_attribute,
    samples_to_columns,
)

__all__ = [
    "DingCollectMode",
    "DingEvalMode",
    "DingLearnMode",
    "DingSampleBuilder",
    "as_collect_mode",
    "as_eval_mode",
    "as_learn_mode",
    "columns_to_samples",
    "get_attribute",
    "samples_to_columns",
]
