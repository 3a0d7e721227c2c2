"""DI-engine's config keys translated at the edge: a user's DI-engine-style tree becomes ours before
:func:`parallel_rl.config.compile_config` merges it, so the core reads one name per setting.

What ends a run and how often it is evaluated are ``run.*`` (:class:`parallel_rl.config.assembly.RunSection`),
serial and cluster alike. DI-engine writes them in a different place per mode (:data:`RUN_KEYS`):

- ``env.stop_value`` is ``run.stop_value`` in both modes;
- serial (``parallel-rl serial``): ``serial.max_env_step``, ``serial.max_train_iter``, ``serial.max_seconds`` and
  ``policy.eval.evaluator.eval_freq`` are ``run.max_env_step``, ``run.max_train_iter``, ``run.max_seconds`` and
  ``run.eval_freq``;
- cluster (``run``, ``coordinator``, the workers, ``slurm``): ``parallel.commander.max_env_step``,
  ``parallel.commander.max_train_iter``, ``parallel.commander.max_seconds`` and ``parallel.commander.eval_freq``.

The other mode's keys are dropped, with one INFO line naming them: a cluster config written over a serial one
(most of ``configs/*_parallel.py``) gives both, and each mode keeps its own budgets. A key given both as ``run.X``
and as the mode's DI-engine key with another value is a ConfigError naming both. A compiled tree has no DI-engine
key left, so compiling it again changes nothing (workers compile what the coordinator sends them).

A room of its own on the config's ground floor (``tests/test_layers.py``): it imports nothing of the project but
its errors, and knows names only; the values' bounds are the run section's.
"""

from __future__ import annotations

import copy
import difflib
import logging
import math
from typing import Any, Dict, Mapping, MutableMapping

from ..errors import ConfigError

logger = logging.getLogger(__name__)

SERIAL, CLUSTER = "serial", "cluster"
MODES = (SERIAL, CLUSTER)

# the run section's dotted path in the compiled tree
RUN = "run"

# per mode: the DI-engine key -> the run section's key it becomes
RUN_KEYS: Dict[str, Dict[str, str]] = {
    SERIAL: {
        "env.stop_value": "stop_value",
        "serial.max_env_step": "max_env_step",
        "serial.max_train_iter": "max_train_iter",
        "serial.max_seconds": "max_seconds",
        "policy.eval.evaluator.eval_freq": "eval_freq",
    },
    CLUSTER: {
        "env.stop_value": "stop_value",
        "parallel.commander.max_env_step": "max_env_step",
        "parallel.commander.max_train_iter": "max_train_iter",
        "parallel.commander.max_seconds": "max_seconds",
        "parallel.commander.eval_freq": "eval_freq",
    },
}

# DI-engine's section that held nothing but the serial budgets: it is gone from the compiled tree
SERIAL_SECTION = "serial"


def legacy_keys(mode: str) -> Dict[str, str]:
    """The DI-engine keys ``mode`` (``"serial"`` or ``"cluster"``) translates: dotted key -> ``run.<name>``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return {key: f"{RUN}.{name}" for key, name in RUN_KEYS[mode].items()}


def mode_of(user_cfg: Mapping) -> str:
    """The mode a tree compiled with no mode named is read in: ``cluster`` when it gives any of the cluster's
    DI-engine keys (``parallel.commander.max_*``, ``parallel.commander.eval_freq``), else ``serial``. The CLI
    names its mode (``serial``; ``run``, ``coordinator``, the workers: ``cluster``)."""
    cluster_only = set(RUN_KEYS[CLUSTER]) - set(RUN_KEYS[SERIAL])
    return CLUSTER if any(_given(user_cfg, key) for key in cluster_only) else SERIAL


def origins(user_cfg: Mapping, mode: str) -> Dict[str, str]:
    """``{run name: the DI-engine key the user wrote}`` for each key ``mode`` translates that ``user_cfg``
    gives: a bad value is refused naming the key the user wrote."""
    return {RUN_KEYS[mode][key]: key for key in legacy_keys(mode) if _given(user_cfg, key)}


def translate(user_cfg: Mapping, mode: str) -> dict:
    """``user_cfg`` (a user's tree, DI-engine-style or ours) with ``mode``'s DI-engine keys moved to ``run.*``
    and the other mode's dropped (one INFO line); a new tree, ``user_cfg`` is left as it is. ConfigError: a key
    given as ``run.X`` and as a DI-engine key with another value, or an unknown key in ``serial``."""
    keys = legacy_keys(mode)
    tree = copy.deepcopy(dict(user_cfg))
    run = tree.get(RUN, {})
    if not isinstance(run, MutableMapping):
        raise ConfigError(f"{RUN} must be a dict, got {run!r:.80} ({type(run).__name__})")
    for key, target in keys.items():
        if not _given(tree, key):
            continue
        value, name = _pop(tree, key), target.split(".", 1)[1]
        if name in run and not _same(run[name], value):
            raise ConfigError(
                f"{target}={run[name]!r} and {key}={value!r} disagree: give the run's {name} once, as {target}"
            )
        run[name] = value
    others = [key for mode_keys in RUN_KEYS.values() for key in mode_keys if key not in keys and _given(tree, key)]
    for key in others:
        _pop(tree, key)
    if others:
        other = CLUSTER if mode == SERIAL else SERIAL
        logger.info(
            "config: %s ignored: they are the %s's keys; a %s run reads run.* or %s",
            ", ".join(others),
            other,
            mode,
            ", ".join(key for key, name in RUN_KEYS[mode].items() if name != "stop_value"),
        )
    _drop_serial_section(tree)
    if run:
        tree[RUN] = run
    return tree


def drop_displaced(tree: MutableMapping, key: str) -> None:
    """Before a ``--set key=...`` lands in ``tree``: remove the keys it takes the place of, so that an override
    wins over the file whichever name either used: ``run.X`` every DI-engine key for X (both modes); a DI-engine
    key ``run.X`` (the other mode's own key stays, for the other mode). Nothing for a key that is no run
    setting's."""
    if key.startswith(RUN + "."):
        name = key.split(".", 1)[1]
        displaced = {legacy for keys in RUN_KEYS.values() for legacy, n in keys.items() if n == name}
    else:
        displaced = {f"{RUN}.{keys[key]}" for keys in RUN_KEYS.values() if key in keys}
    for other in displaced:
        if _given(tree, other):
            _pop(tree, other)


def _drop_serial_section(tree: MutableMapping) -> None:
    """``serial`` held the serial budgets only: emptied by the translation it goes; a key left in it is unknown
    (did you mean one of its budgets?)."""
    if SERIAL_SECTION not in tree:
        return
    section = tree[SERIAL_SECTION]
    if not isinstance(section, Mapping):
        raise ConfigError(f"{SERIAL_SECTION} must be a dict, got {section!r:.80} ({type(section).__name__})")
    budgets = [key.split(".", 1)[1] for key in RUN_KEYS[SERIAL] if key.startswith(SERIAL_SECTION + ".")]
    for key in section:
        close = difflib.get_close_matches(str(key), budgets, n=1)
        hint = f"; did you mean '{SERIAL_SECTION}.{close[0]}'?" if close else f"; the budgets are {RUN}.*"
        raise ConfigError(f"unknown config key '{SERIAL_SECTION}.{key}'{hint}")
    del tree[SERIAL_SECTION]


def _given(tree: Mapping, key: str) -> bool:
    """Whether ``tree`` has the dotted ``key`` (every section on the way a dict)."""
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def _pop(tree: MutableMapping, key: str) -> Any:
    """Remove the dotted ``key`` from ``tree`` (present: :func:`_given`) and return its value; a section it
    empties is left in place (an empty section merges to its defaults)."""
    *parents, leaf = key.split(".")
    node: Any = tree
    for part in parents:
        node = node[part]
    return node.pop(leaf)


def _same(a: Any, b: Any) -> bool:
    """Whether two values of one run key are the same setting (200 is 200.0; inf and None: no stop value)."""
    return _no_inf(a) == _no_inf(b)


def _no_inf(value: Any) -> Any:
    return None if isinstance(value, float) and value == math.inf else value
