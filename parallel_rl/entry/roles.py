"""Which class each worker role runs: one place for ``parallel-rl learner|collector`` and for the fork server's
preload (``run`` imports both ahead, so that a worker costs a fork)."""

from __future__ import annotations


def slave_class(role: str) -> type:
    """The class a ``learner`` or ``collector`` process runs."""
    if role == "learner":
        from ..learner.aggregator import LearnerAggregator

        return LearnerAggregator
    from ..collector.shell import CollectorSlave

    return CollectorSlave
