"""A run of the service: its record (what was submitted, where it lives, how it stands) and the service's state
file, ``DIR/service.json``, written atomically after every change and read by one validating loader when the
service starts again (``parallel-rl serve --dir DIR``): every run that had not ended is resumed."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Dict, List

from ..errors import ConfigError
from ..storage.backends import atomic_write

STATE_NAME = "service.json"
STATE_VERSION = 1
MAX_STATE_BYTES = 16 * 1024 * 1024
RUN_ID = re.compile(r"run-[1-9][0-9]{0,8}")


class RunState(str, Enum):
    QUEUED = "queued"  # waiting for a learner slot and min_collectors collector slots
    RUNNING = "running"
    SOLVED = "solved"
    STOPPED = "stopped"  # its budget ran out, or DELETE /api/v1/runs/<id>
    FAILED = "failed"

    @property
    def ended(self) -> bool:
        return self in (RunState.SOLVED, RunState.STOPPED, RunState.FAILED)


@dataclass
class RunRecord:
    """What the state file keeps of a run. ``config`` is the config file's absolute path (a submitted config
    text is written to ``DIR/runs/<id>/config.py`` first); ``overrides`` are the submitted ``--set``s."""

    run_id: str
    name: str
    config: str
    overrides: List[str]
    weight: float = 1.0
    state: RunState = RunState.QUEUED
    reason: str = ""
    created_at: float = field(default_factory=time.time)
    started: bool = False  # it ran once: its shared directory holds a state to resume
    last: Dict[str, Any] = field(default_factory=dict)  # its last summary numbers (env_steps, eval returns)
    auth_read: bool = False  # its config's parallel.coordinator.auth_read: reading it needs the token too

    def to_json(self) -> Dict[str, Any]:
        return {**asdict(self), "state": self.state.value}

    @classmethod
    def from_json(cls, obj: Any, where: str) -> "RunRecord":
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: a run must be an object, got {obj!r:.60}")
        kinds = {"run_id": str, "name": str, "config": str, "overrides": list, "weight": (int, float)}
        kinds.update({"state": str, "reason": str, "created_at": (int, float), "started": bool, "last": dict})
        kinds.update({"auth_read": bool})
        for key, kind in kinds.items():
            if not isinstance(obj.get(key), kind) or isinstance(obj.get(key), bool) is not (kind is bool):
                raise ConfigError(f"{where}: run field {key!r} is missing or not {kind}, got {obj.get(key)!r:.60}")
        if not RUN_ID.fullmatch(obj["run_id"]):
            raise ConfigError(f"{where}: {obj['run_id']!r:.40} is not a run id (run-N)")
        if not all(isinstance(o, str) for o in obj["overrides"]):
            raise ConfigError(f"{where}: run {obj['run_id']!r}: overrides must be strings")
        try:
            state = RunState(obj["state"])
        except ValueError:
            raise ConfigError(f"{where}: run {obj['run_id']!r} has an unknown state {obj['state']!r:.40}") from None
        return cls(**{**{k: obj[k] for k in kinds}, "state": state, "weight": float(obj["weight"])})


def run_dir(service_dir: str, run_id: str) -> str:
    """A run's experiment directory (``exp_name``); its shared store is ``shared/`` in it."""
    return os.path.join(service_dir, "runs", run_id)


def save_records(service_dir: str, records: List[RunRecord], next_number: int) -> None:
    body = {"version": STATE_VERSION, "next": next_number, "runs": [r.to_json() for r in records]}
    data = json.dumps(body, indent=1).encode()
    atomic_write(os.path.join(service_dir, STATE_NAME), lambda f: f.write(data), durable=True)


def load_records(service_dir: str) -> tuple:
    """(records, next run number) from ``DIR/service.json``; ([], 1) when there is none. A damaged file is a
    ConfigError naming it (the service does not start over a state it cannot read)."""
    path = os.path.join(service_dir, STATE_NAME)
    if not os.path.exists(path):
        return [], 1
    with open(path, "rb") as f:
        raw = f.read(MAX_STATE_BYTES + 1)
    try:
        if len(raw) > MAX_STATE_BYTES:
            raise ValueError(f"over {MAX_STATE_BYTES} bytes")
        body = json.loads(raw)
        if not isinstance(body, dict) or body.get("version") != STATE_VERSION:
            raise ValueError(f"not a version {STATE_VERSION} service state")
        runs, number = body.get("runs"), body.get("next")
        if not isinstance(runs, list) or not isinstance(number, int) or isinstance(number, bool) or number < 1:
            raise ValueError("needs a list 'runs' and a positive integer 'next'")
    except ValueError as exc:
        raise ConfigError(
            f"{path} is not a service state ({exc}); move it away to start the service over an empty pool"
        ) from None
    records = [RunRecord.from_json(r, path) for r in runs]
    ids = [r.run_id for r in records]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{path}: run ids repeat: {sorted(ids)}; move it away to start over")
    return records, number
