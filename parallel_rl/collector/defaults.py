"""The cluster collector's own section of the run config, ``parallel.collector`` (what
:class:`~parallel_rl.collector.base.BaseParallelCollector` and its subclasses read; they read ``env`` and ``policy``
too). A module of its own, importing only the config's section type: the config's assembly reads it without
loading the collectors."""

from __future__ import annotations

import dataclasses

from ..config.section import Section, setting


@dataclasses.dataclass(frozen=True)
class CollectorSection(Section):
    """How a cluster collector cuts its step data into chunk files."""

    path = "parallel.collector"
    title = "Cluster collector"

    chunk_size: int = setting(
        1024,
        lo=1,
        doc="""transitions per chunk file, at most (a chunk also ends after
        flush_interval, at a new policy or when the allowance runs out). Every file costs its writer ~0.4 ms; an
        on-policy flow needs one vector step (env.collector_env_num) at least""",
    )
    flush_interval: float = setting(0.05, above=0, doc="a partial chunk is flushed after this many seconds")
