"""Every worker's section of the run config, ``parallel.worker`` (what :mod:`.link` reads). A module of its own,
importing only the config's section type: the config's assembly reads it without loading the transport."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from easydict import EasyDict

from ..config.section import Section, setting
from ..errors import ConfigError


@dataclasses.dataclass(frozen=True)
class WorkerSection(Section):
    """Every worker's heartbeats and requests to the coordinator, and the pauses after its failed tasks (which the
    coordinator keeps too: it gives the worker no task meanwhile)."""

    path = "parallel.worker"
    title = "Every worker (collector, learner, evaluator)"

    heartbeat_interval: float = setting(1.0, above=0, doc="seconds between a worker's heartbeats")
    request_timeout: float = setting(5.0, above=0, doc="seconds a worker's request to the coordinator may take")
    setup_timeout: float = setting(
        600.0,
        above=0,
        doc="""seconds a worker may take to build its envs and model after
        the coordinator connected it (it answers the connect call at once and builds afterwards, heartbeating
        meanwhile); past it the set-up counts as failed""",
    )
    max_retries: int = setting(3, lo=0, doc="retries of a failed request to the coordinator")
    storage_backoff: float = setting(
        0.5,
        above=0,
        doc="""a task that failed on the shared store (disk full, I/O
        error, object store down) is followed by a pause before the worker's next task: storage_backoff seconds,
        doubled for each further failure in a row, up to storage_max_backoff. The worker waits it out and the
        coordinator gives it no task""",
    )
    storage_max_backoff: float = setting(30.0, above=0, doc="the longest pause after failures on the shared store")
    failure_backoff: float = setting(
        0.5,
        lo=0,
        doc="""a worker that reports a task failed (its own error, not the
        store's) gets no task for failure_backoff seconds, doubled for each further failure in a row, up to
        failure_max_backoff""",
    )
    failure_max_backoff: float = setting(30.0, lo=0, doc="the longest pause after the worker's own failed tasks")

    @classmethod
    def check_relations(cls, values: Mapping[str, Any], path: str) -> None:
        for low, high in (("storage_backoff", "storage_max_backoff"), ("failure_backoff", "failure_max_backoff")):
            if values[low] > values[high]:
                raise ConfigError(f"{path} needs {low} <= {high}, got {low}={values[low]!r}, {high}={values[high]!r}")


def worker_default_config() -> EasyDict:
    """The ``parallel.worker`` section's defaults (the seed name)."""
    return WorkerSection.defaults()
