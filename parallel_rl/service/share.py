"""Fair share of the pool: which runs start and how many collectors each holds.

Each run started holds one learner slot and at least ``min_collectors`` collector slots; the collector slots
left are shared by weight (largest remainder, ties to the earlier run). Runs start in their order (those
running first, then the queued ones by submission) while a learner slot and ``min_collectors`` collector
slots are left for them; a run that runs is never preempted. Every running run wants every collector it can
get, so no collector slot is idle while a run runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Sequence


@dataclass(frozen=True)
class Claim:
    """A run as the share sees it: its id, weight, and whether it runs already (else it is queued)."""

    run_id: str
    weight: float
    running: bool


def fair_share(claims: Sequence[Claim], learners: int, collectors: int, min_collectors: int = 1) -> Dict[str, int]:
    """Run id -> collector slots, for the runs that run (those left out stay queued); ``claims`` in their order."""
    running = [c for c in claims if c.running]
    admitted = list(running)
    for claim in claims:
        if claim.running:
            continue
        if len(admitted) >= learners or (len(admitted) + 1) * min_collectors > collectors:
            break  # in order: a later run does not overtake a queued earlier one
        admitted.append(claim)
    if not admitted:
        return {}
    floor = min(min_collectors, collectors // len(admitted))  # a pool shrunk under the running runs' minimum
    shares = {c.run_id: floor for c in admitted}
    rest = collectors - floor * len(admitted)
    total = sum(c.weight for c in admitted)
    exact = {c.run_id: rest * c.weight / total for c in admitted}
    for run_id, value in exact.items():
        shares[run_id] += math.floor(value)
    left = rest - sum(math.floor(v) for v in exact.values())
    by_remainder = sorted(admitted, key=lambda c: -(exact[c.run_id] - math.floor(exact[c.run_id])))
    for claim in by_remainder[:left]:
        shares[claim.run_id] += 1
    return shares
