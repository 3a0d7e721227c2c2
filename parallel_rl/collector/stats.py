"""What a collect call reports: :class:`CollectStats` (ours and tianshou's vocabulary in one class)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

import numpy as np


@dataclass
class SequenceSummaryStats:
    """mean / std / max / min of a sequence (tianshou's ``returns_stat`` / ``lens_stat``)."""

    mean: float
    std: float
    max: float
    min: float

    @classmethod
    def from_sequence(cls, sequence) -> "SequenceSummaryStats":
        values = np.asarray(sequence, dtype=np.float64)
        if values.size == 0:
            return cls(float("nan"), float("nan"), float("nan"), float("nan"))
        return cls(float(values.mean()), float(values.std()), float(values.max()), float(values.min()))


@dataclass
class CollectStatsBase:
    """The two counters of a collection (tianshou's base, e.g. for offline data)."""

    n_collected_episodes: int = 0
    n_collected_steps: int = 0


@dataclass
class CollectStats:
    """What one ``collect`` call did.

    Answers to both vocabularies: ours (``env_steps``, ``episodes``,
    ``duration``, ``lengths``, ``speed``) and tianshou's (``n_collected_steps``,
    ``n_collected_episodes``, ``collect_time``, ``collect_speed``, ``returns``,
    ``returns_stat``, ``lens``, ``lens_stat``).
    """

    env_steps: int = 0
    transitions: int = 0
    episodes: int = 0
    returns: List[float] = field(default_factory=list)
    lengths: List[int] = field(default_factory=list)
    duration: float = 0.0

    @property
    def speed(self) -> float:
        """Env steps per second."""
        return self.env_steps / self.duration if self.duration > 0 else 0.0

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns)) if self.returns else float("nan")

    # ---- tianshou's names ------------------------------------------------------
    @property
    def n_collected_steps(self) -> int:
        return self.env_steps

    @property
    def n_collected_episodes(self) -> int:
        return self.episodes

    @property
    def collect_time(self) -> float:
        return self.duration

    @property
    def collect_speed(self) -> float:
        return self.speed

    @property
    def lens(self) -> List[int]:
        return self.lengths

    @property
    def returns_stat(self) -> SequenceSummaryStats:
        return SequenceSummaryStats.from_sequence(self.returns)

    @property
    def lens_stat(self) -> SequenceSummaryStats:
        return SequenceSummaryStats.from_sequence(self.lengths)
