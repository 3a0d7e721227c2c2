"""Parts of messages: a worker's report on the shared store, and where its time went."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from ..errors import ProtocolViolation
from ..storage.health import check_health_report
from .fields import MAX_COUNTER, _json_fields, finite_number, wire


@dataclass
class StorageReport:
    """The shared store as one process sees it (``StorageHealth.to_dict``): unhealthy from a failed read or write
    (disk full, I/O error, object store down) until a write succeeds again."""

    healthy: bool = wire(doc="false from a fault until a write succeeds")
    faults: int = wire(lo=0, hi=MAX_COUNTER - 1, doc="faults ever (a report with fewer is stale)")
    error: Optional[str] = wire(default=None, doc="the last fault (kept to 500 characters)")
    since: Optional[float] = wire(default=None, doc="epoch seconds of the first fault since it last worked")

    @classmethod
    def from_json(cls, report: Any) -> "StorageReport":
        try:
            return cls(**check_health_report(report))
        except ValueError as exc:
            raise ProtocolViolation(str(exc)) from None

    def to_json(self) -> Dict[str, Any]:
        return {"healthy": self.healthy, "error": self.error, "since": self.since, "faults": self.faults}


MAX_PHASES = 16  # phases one time breakdown may name (each name at most 32 characters)


def _phase_seconds(obj: Dict[str, Any], name: str) -> Dict[str, float]:
    """``obj[name]``: phase names to finite seconds >= 0, or ProtocolViolation naming the field."""
    value = obj.get(name) or {}
    if (
        not isinstance(value, dict)
        or len(value) > MAX_PHASES
        or not all(isinstance(k, str) and 0 < len(k) <= 32 and finite_number(v) and v >= 0 for k, v in value.items())
    ):
        raise ProtocolViolation(
            f"field {name!r} must map at most {MAX_PHASES} phase names (1-32 characters) to "
            f"seconds >= 0, got {value!r:.80}"
        )
    return {k: float(v) for k, v in value.items()}


@dataclass
class TimeBreakdown:
    """Where a worker's wall time went since it was set up, in cumulative seconds (``time.perf_counter``).

    ``phases``: the worker's main loop (they sum to at most ``wall_seconds``; the rest is its bookkeeping and
    idling). A collector's: env_step, policy_forward, chunk_write, policy_load, waiting (for allowance or a new
    policy version), evaluate; a learner's: waiting_for_data, train, publishing. ``background``: threads beside
    the main loop (overlapping it); a learner's data thread: sample_request (asking the coordinator, its long
    poll included), reading_rows (chunk files into batches)."""

    wall_seconds: float = wire(doc="seconds since the worker was set up")
    phases: Dict[str, float] = wire(default_factory=dict, doc="main-loop phase -> seconds (sum <= wall_seconds)")
    background: Dict[str, float] = wire(default_factory=dict, doc="background thread phase -> seconds")

    @classmethod
    def from_json(cls, obj: Any) -> "TimeBreakdown":
        if not isinstance(obj, dict):
            raise ProtocolViolation(f"a time breakdown must be an object, got {obj!r:.80}")
        wall = obj.get("wall_seconds")
        if not finite_number(wall) or wall < 0:
            raise ProtocolViolation(f"field 'wall_seconds' must be a finite number >= 0, got {wall!r:.40}")
        phases, background = _phase_seconds(obj, "phases"), _phase_seconds(obj, "background")
        if sum(phases.values()) > 1.001 * wall + 0.01:  # one clock, read once: only rounding may add
            raise ProtocolViolation(f"the phases sum to {sum(phases.values()):.3f} s, more than wall_seconds={wall}")
        return cls(wall_seconds=float(wall), phases=phases, background=background)

    def to_json(self) -> Dict[str, Any]:
        return _json_fields(self)

    def view(self) -> Dict[str, Any]:
        """What GET /api/v1/workers shows: each phase's seconds and fraction of the wall time, ``other`` (the rest
        of the main loop's time) among the phases."""
        wall = self.wall_seconds

        def share(seconds: Dict[str, float]) -> Dict[str, Dict[str, float]]:
            return {
                k: {"seconds": round(v, 3), "fraction": round(v / wall, 4) if wall > 0 else 0.0}
                for k, v in seconds.items()
            }

        other = max(0.0, wall - sum(self.phases.values()))
        return {
            "wall_seconds": round(wall, 3),
            "phases": share({**self.phases, "other": other}),
            "background": share(self.background),
        }
