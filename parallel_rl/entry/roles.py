"""Which class each worker role runs: one place for ``parallel-rl learner|collector`` and for the fork server's
preload (``run`` imports both ahead, so that a worker costs a fork)."""
from __future__ import annotations


def slave_class(role: str) -> type:
    """The class a ``learner`` or ``collector`` process runs."""
    if role == "learner":
        from ..interaction.learner_aggregator import LearnerAggregator

        return LearnerAggregator
    from ..interaction.collector_worker import FlaskFileSystemCollector

    return FlaskFileSystemCollector
