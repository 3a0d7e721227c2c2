"""What a sweep or a search runs: trials (settings and a seed over one config), read from the command line
(``--seeds``, ``--grid``) or from a search space file (``def space(trial) -> dict``), and checked against the
config before anything runs.

A trial's settings are dotted config keys with values (``{"policy.learn.learning_rate": 3e-4}``), passed to its run
as ``--set key=<JSON>``. :func:`check_settings` compiles the config a trial would run: a key the config does not
know is the whole sweep's error (:class:`~parallel_rl.errors.ConfigError`, exit 2); a bad value is that trial's
failure (its one-line reason), and the other trials run.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import runpy
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ..errors import ConfigError

logger = logging.getLogger(__name__)

# a dotted config key: what --set takes
KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
MAX_SEEDS = 10_000


@dataclass(frozen=True)
class Trial:
    """One training of a sweep or search: ``settings`` over the config, and a seed (None: the config's)."""

    number: int
    settings: Dict[str, Any] = field(default_factory=dict)
    seed: Optional[int] = None
    replica: Optional[int] = None  # tune --seeds: which of the trial's trainings (one per seed) this is

    def dir_name(self) -> str:
        """Its directory's (and log's) name in the sweep's or study's directory: ``trial_NNN``, ``trial_NNN_K`` for
        replica K."""
        return f"trial_{self.number:03d}" + ("" if self.replica is None else f"_{self.replica}")

    def overrides(self) -> List[str]:
        """The trial's ``--set`` arguments (values as JSON literals, which ``--set`` parses back)."""
        sets = [f"{key}={json.dumps(value)}" for key, value in self.settings.items()]
        return sets + ([f"seed={self.seed}"] if self.seed is not None else [])

    def label(self) -> str:
        """The settings as people read them: ``policy.learn.learning_rate=0.0003 env.stop_value=4``."""
        return " ".join(f"{key}={json.dumps(value)}" for key, value in self.settings.items()) or "-"


def parse_seeds(text: Optional[str]) -> List[Optional[int]]:
    """``--seeds``: ``0-4`` (a range, both ends in) or ``0,2,5``; none given: the config's own seed."""
    if text is None:
        return [None]
    try:
        if re.fullmatch(r"\s*\d+\s*-\s*\d+\s*", text):
            first, last = (int(part) for part in text.split("-"))
            if last < first:
                raise ValueError(f"the range {text!r} ends before it starts")
            if last - first >= MAX_SEEDS:
                raise ValueError(f"more than {MAX_SEEDS} seeds")
            seeds = list(range(first, last + 1))
        else:
            seeds = [int(part) for part in text.split(",")]
    except ValueError as exc:
        raise ConfigError(
            f"--seeds {text!r} is not a seed list ({exc}): use a range like 0-4 or a list like 0,2,5"
        ) from None
    if len(seeds) > MAX_SEEDS or len(set(seeds)) != len(seeds) or min(seeds) < 0 or max(seeds) >= 2**32:
        raise ConfigError(
            f"--seeds {text!r}: seeds must be distinct, in 0..2**32-1 and at most {MAX_SEEDS}; use a range "
            f"like 0-4 or a list like 0,2,5"
        )
    return seeds


def check_key(key: str, where: str) -> str:
    if not isinstance(key, str) or not KEY.match(key):
        raise ConfigError(f"{where}: {key!r} is not a dotted config key like policy.learn.learning_rate")
    return key


def _grid_values(raw: str) -> List[Any]:
    """``1e-4,3e-4`` -> [0.0001, 0.0003]; JSON values, lists included (``[16],[32,32]``), else strings."""
    try:
        values = json.loads(f"[{raw}]")
    except ValueError:
        values = [json.loads(part) if _is_json(part) else part for part in raw.split(",")]
    if any(value == "" for value in values):
        raise ValueError("an empty value")
    return values


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def parse_grid(specs: Sequence[str]) -> Dict[str, List[Any]]:
    """``--grid KEY=V1,V2`` (repeatable) -> {key: values}; an empty grid is a usage error naming it."""
    grid: Dict[str, List[Any]] = {}
    for spec in specs:
        key, sep, raw = spec.partition("=")
        key = check_key(key.strip(), f"--grid {spec!r}")
        if not sep or not raw.strip():
            raise ConfigError(f"--grid {spec!r} has no values: give one or more, e.g. --grid {key}=1e-4,3e-4")
        if key in grid:
            raise ConfigError(f"--grid {key} is given twice: put all its values in one --grid {key}=V1,V2")
        try:
            grid[key] = _grid_values(raw)
        except ValueError as exc:
            raise ConfigError(
                f"--grid {spec!r}: {exc}; give values separated by commas, e.g. --grid {key}=1e-4,3e-4"
            ) from None
    return grid


def grid_settings(grid: Mapping[str, Sequence[Any]]) -> List[Dict[str, Any]]:
    """Every combination of the grid's values (one empty combination for no grid)."""
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[key] for key in keys))]


def load_space(path: str) -> Callable[[Any], Dict[str, Any]]:
    """The ``space(trial)`` function of a search space file (Python, as trusted as a config file)."""
    if not os.path.isfile(path):
        raise ConfigError(f"--space {path!r} not found; pass a Python file that defines def space(trial) -> dict")
    try:
        namespace = runpy.run_path(path)
    except Exception as exc:  # a user file: any error is reported in one line
        raise ConfigError(f"--space {path!r} failed to load: {type(exc).__name__}: {exc}") from None
    space = namespace.get("space")
    if not callable(space):
        raise ConfigError(f"--space {path!r} defines no function space(trial) returning {{dotted.key: value}}")
    return space


def space_settings(space: Callable[[Any], Any], trial: Any, path: str) -> Dict[str, Any]:
    """``space(trial)``, checked: a dict of dotted keys to JSON values (what ``--set`` can carry)."""
    try:
        settings = space(trial)
    except Exception as exc:  # the user's function: its error, in one line, naming the file
        raise ConfigError(f"--space {path}: space(trial) raised {type(exc).__name__}: {exc}") from None
    if not isinstance(settings, Mapping):
        raise ConfigError(
            f"--space {path}: space(trial) returned {type(settings).__name__}, not a dict of dotted.key: value"
        )
    out = {}
    for key, value in settings.items():
        check_key(key, f"--space {path}")
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"--space {path}: {key}={value!r} is not a JSON value (number, string, bool, list)"
            ) from None
        out[key] = value
    return out


class TrialConfigs:
    """The config every trial starts from (the file and the sweep's own ``--set``), and the check of a trial's."""

    def __init__(self, config_path: str, overrides: Sequence[str] = ()):
        from ..config import apply_overrides, compile_config, load_config_file

        self.config_path = config_path
        self.overrides = list(overrides)
        self.raw = apply_overrides(load_config_file(config_path), self.overrides)
        self.cluster = "parallel" in self.raw  # a cluster config runs as `parallel-rl run`, else `serial`
        self.mode = "cluster" if self.cluster else "serial"  # how that command reads DI-engine's keys
        self.base = compile_config(self.raw, self.mode)  # a config that does not compile: the sweep's error, exit 2

    def user_config(self, trial: Trial) -> dict:
        from ..config import apply_overrides

        return apply_overrides(self.raw, trial.overrides())

    def check(self, trial: Trial) -> Optional[str]:
        """None when the trial's config compiles; else its one-line reason. A key the config does not know
        (not in the compiled config, and refused when set) raises ConfigError: the sweep's error."""
        from ..config import compile_config

        try:
            compile_config(self.user_config(trial), self.mode)
        except ConfigError as exc:
            for key in trial.settings:
                reason = self._unknown(key)
                if reason:
                    raise ConfigError(
                        f"{reason} (a setting of trial {trial.number}); fix the key in --grid or the space file"
                    ) from None
            return str(exc)
        return None

    def _unknown(self, key: str) -> Optional[str]:
        """compile_config's reason when ``key`` is not a key of the config (neither in the compiled config nor
        under an open section such as env.env_kwargs, which takes any key); None for a known key. DI-engine's keys
        are known as what they become (``serial.max_env_step``: ``run.max_env_step``)."""
        from ..compat.keys import legacy_keys
        from ..config import compile_config

        node: Any = self.base
        for part in legacy_keys(self.mode).get(key, key).split("."):
            if not isinstance(node, Mapping) or part not in node:
                try:
                    compile_config(self.user_config(Trial(-1, {key: None})), self.mode)
                except ConfigError as exc:
                    return str(exc)
                return None
            node = node[part]
        return None
