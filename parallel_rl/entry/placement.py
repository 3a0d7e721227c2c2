"""Which CPUs the processes of ``parallel-rl run`` may use (``parallel.learner.dedicated_cpu``).

Decided again every :data:`WINDOW` seconds once training runs, from the collectors' time breakdowns over the
last window (their heartbeats' ``waiting``: for allowance or a policy version), with the bottleneck view's rule
(:mod:`..coordinator.bottleneck`):

- the collectors wait at least half their time: the learner holds them up. It gets the last CPU to itself (with
  ``world_size`` N the last N, as far as one is left) and the coordinator and the collectors share the others:
  a learner sharing its core with busy collectors trains ~15 % slower, and collectors that wait anyway lose
  nothing by having fewer cores.
- they wait less than a quarter of their time (:data:`SHARE_BELOW`: they are env-bound or CPU-bound, however
  busy the learner is): every process may use every CPU. Confined to one of two cores, 32 latency-bound
  collectors and the coordinator saturated it (0.61 of N x one collector's env steps) while the learner's core
  idled.
- in between, the placement stays as it is: APPO's collectors, held by its bounded queue about half their time,
  would otherwise be moved every window.

Nothing is pinned before training runs (the processes import torch in parallel on every CPU first); once it runs
the learner gets its CPUs until a window shows the collectors busy.

Two runs on one machine: each learner claims its CPUs (an exclusive lock on a file per CPU in
:data:`CLAIMS_DIR`, held while the launcher lives), highest first, skipping CPUs another run's learner holds, so a
second run's learner does not land on the first one's CPU (both used to take the last CPU). When every CPU is
claimed it takes the last ones, as a single run does.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from typing import Dict, Iterable, List, Optional, Set

from ..coordinator.bottleneck import WAIT_LIMIT
from ..protocol import TimeBreakdown

WINDOW = 3.0  # seconds of the collectors' time a decision looks at (heartbeats come every second)
SHARE_BELOW = 0.25  # collectors waiting less than this share of their time may use every CPU
# where the runs on this machine claim their learners' CPUs (PARALLEL_RL_CPU_CLAIMS moves it)
CLAIMS_DIR = os.path.join(tempfile.gettempdir(), "parallel_rl-cpus")


class CpuPlacement:
    """The CPU set per role (``learner``, ``collector``; the launcher's own process goes with the collectors)."""

    def __init__(self, learner_cpus: int, claims_dir: Optional[str] = None):
        self.cpus: Set[int] = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
        # data-parallel learner ranks get a CPU each, as far as one CPU is left for the others; ranks the
        # learner starts later inherit its CPUs
        self.n_learner = max(1, min(int(learner_cpus), len(self.cpus) - 1))
        self.claims_dir = claims_dir or os.environ.get("PARALLEL_RL_CPU_CLAIMS") or CLAIMS_DIR
        self._claims: List = []  # the open lock files of this run's claimed CPUs
        self._dedicated: Optional[Dict[str, Set[int]]] = None  # claimed when first wanted
        self.shared = {"learner": set(self.cpus), "collector": set(self.cpus)}
        self.current: Optional[Dict[str, Set[int]]] = None  # None: not placed yet (every CPU)
        self._last: Dict[str, TimeBreakdown] = {}
        self.reason = ""  # why the current sets, for the log

    @property
    def possible(self) -> bool:
        return len(self.cpus) >= 2

    @property
    def dedicated(self) -> Dict[str, Set[int]]:
        """The learner's own CPUs (claimed on first use) and the others' for everything else."""
        if self._dedicated is None:
            ordered = sorted(self.cpus)
            mine = self._claim(ordered[::-1])
            learner = set(mine) if mine else set(ordered[-self.n_learner :])
            self._dedicated = {"learner": learner, "collector": self.cpus - learner}
        return self._dedicated

    def _claim(self, candidates: List[int]) -> List[int]:
        """Up to ``n_learner`` of ``candidates`` that no other run's learner holds, locked for this process."""
        try:
            os.makedirs(self.claims_dir, exist_ok=True)
        except OSError:
            return []
        mine = []
        for cpu in candidates:
            if len(mine) == self.n_learner:
                break
            try:
                f = open(os.path.join(self.claims_dir, f"cpu-{cpu}.lock"), "a")
            except OSError:
                continue
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # another run's learner has it
                f.close()
                continue
            self._claims.append(f)
            mine.append(cpu)
        return mine

    def collectors_waiting(self, collectors: Iterable[tuple]) -> Optional[float]:
        """The collectors' share of waiting since the last call, from ``(worker_id, breakdown)``; None before two
        reports of one collector."""
        wall = waiting = 0.0
        seen = {}
        for worker_id, breakdown in collectors:
            seen[worker_id] = breakdown
            before = self._last.get(worker_id)
            if before is None or breakdown.wall_seconds <= before.wall_seconds:
                continue
            wall += breakdown.wall_seconds - before.wall_seconds
            waiting += breakdown.phases.get("waiting", 0.0) - before.phases.get("waiting", 0.0)
        self._last = seen
        return waiting / wall if wall > 0 else None

    def decide(self, collectors: Iterable[tuple]) -> Optional[Dict[str, Set[int]]]:
        """The new CPU sets when the collectors' last window calls for other ones, else None. The first call
        (training has begun) gives the learner its CPUs until a window shows the collectors busy."""
        waiting = self.collectors_waiting(collectors)
        if waiting is None and self.current is not None:
            return None
        if waiting is None or waiting >= WAIT_LIMIT:
            wanted = self.dedicated
        elif waiting < SHARE_BELOW:
            wanted = self.shared
        else:
            return None
        if wanted is self.current:
            return None
        self.current = wanted
        if wanted is self.dedicated:
            why = "training runs" if waiting is None else f"the collectors wait {waiting:.0%} of their time"
            self.reason = (
                f"{why}: the learner pinned to CPUs {sorted(wanted['learner'])}, coordinator and "
                f"collectors to {sorted(wanted['collector'])}"
            )
        else:
            self.reason = f"the collectors wait {waiting:.0%} of their time: every process on CPUs {sorted(self.cpus)}"
        return wanted
