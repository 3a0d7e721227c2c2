"""What a collect call reports: :class:`CollectStats`, tianshou's dataclass, which also answers to our names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

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


@dataclass(kw_only=True)
class CollectStatsBase:
    """The two counters of a collection (tianshou's base, e.g. for offline data)."""

    n_collected_episodes: int = 0
    n_collected_steps: int = 0


@dataclass(kw_only=True)
class CollectStats(CollectStatsBase):
    """What one ``collect`` call did: tianshou's fields, plus ``transitions`` (rows returned or stored).

    ``returns`` / ``lens`` are numpy arrays of the episodes that ended; ``returns_stat`` /
    ``lens_stat`` are ``None`` when none did (as tianshou's). Our own names read and write the
    same fields: ``env_steps`` (``n_collected_steps``), ``episodes`` (``n_collected_episodes``),
    ``duration`` (``collect_time``, which sets ``collect_speed``), ``lengths`` (``lens``),
    ``speed`` (``collect_speed``). Loops record episodes with :meth:`add_episodes`.
    """

    collect_time: float = 0.0
    collect_speed: float = 0.0
    returns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))
    returns_stat: Optional[SequenceSummaryStats] = None
    lens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    lens_stat: Optional[SequenceSummaryStats] = None
    transitions: int = 0

    def add_episodes(self, returns, lengths) -> None:
        """Record finished episodes' returns and lengths (the summaries follow; ``episodes`` is counted apart)."""
        self.returns = np.concatenate([self.returns, np.asarray(returns, dtype=np.float64).reshape(-1)])
        self.lens = np.concatenate([self.lens, np.asarray(lengths, dtype=np.int64).reshape(-1)])
        if self.returns.size:
            self.returns_stat = SequenceSummaryStats.from_sequence(self.returns)
        if self.lens.size:
            self.lens_stat = SequenceSummaryStats.from_sequence(self.lens)

    # ---- our names ---------------------------------------------------------------
    @property
    def env_steps(self) -> int:
        return self.n_collected_steps

    @env_steps.setter
    def env_steps(self, value: int) -> None:
        self.n_collected_steps = value

    @property
    def episodes(self) -> int:
        return self.n_collected_episodes

    @episodes.setter
    def episodes(self, value: int) -> None:
        self.n_collected_episodes = value

    @property
    def duration(self) -> float:
        return self.collect_time

    @duration.setter
    def duration(self, value: float) -> None:
        self.collect_time = value
        self.collect_speed = self.n_collected_steps / value if value > 0 else 0.0

    @property
    def speed(self) -> float:
        """Env steps per second."""
        return self.collect_speed

    @property
    def lengths(self) -> np.ndarray:
        return self.lens

    @property
    def mean_return(self) -> float:
        return float(self.returns.mean()) if self.returns.size else float("nan")
