"""Where a slave's wall time goes: seconds per phase, added up with ``time.perf_counter`` around whole pieces of
work (a vector step, an update, a chunk write), never logged per step. Every heartbeat carries the totals as a
:class:`~parallel_rl.protocol.TimeBreakdown`; the coordinator shows them under ``GET /api/v1/workers`` and names
the cluster's bottleneck from them (:mod:`parallel_rl.coordinator.bottleneck`)."""

from __future__ import annotations

import contextlib
import time
from typing import Iterable, Iterator

from ..protocol import TimeBreakdown


class PhaseClock:
    """Cumulative seconds per phase since it was made: ``phases`` of the main loop (disjoint: never time one inside
    another) and ``background`` ones of threads beside it (the heartbeat thread reads both)."""

    def __init__(self, phases: Iterable[str], background: Iterable[str] = ()):
        self.started = time.perf_counter()
        self.seconds = dict.fromkeys(phases, 0.0)
        self.background = dict.fromkeys(background, 0.0)

    @contextlib.contextmanager
    def timing(self, phase: str, background: bool = False) -> Iterator[None]:
        """Add the time the ``with`` block takes to ``phase``."""
        table = self.background if background else self.seconds
        start = time.perf_counter()
        try:
            yield
        finally:
            table[phase] += time.perf_counter() - start

    def breakdown(self, **more: float) -> TimeBreakdown:
        """The totals so far; ``more``: main-loop phases counted elsewhere (a collector's env and policy seconds)."""
        phases = {**more, **self.seconds}
        background = dict(self.background)
        # the wall is read last: every phase read above ended before it, so they sum to at most the wall
        return TimeBreakdown(wall_seconds=time.perf_counter() - self.started, phases=phases, background=background)
