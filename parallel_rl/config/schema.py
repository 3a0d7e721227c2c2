"""The config schema: deep merge over the defaults, type coercion, validation, config files (Python or YAML) and
``--set``.

The ground floor of configs: it knows the shape of a config, not where the defaults come from
(:mod:`.assembly` gathers those from the components), and imports nothing of the project but its errors.
A default that is an empty dict is *open*: any keys are accepted below it (e.g. env kwargs).
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import os
import re
import runpy
from typing import Any, Iterable, Mapping

import yaml
from easydict import EasyDict

from ..errors import ConfigError

# the algorithms two-player self-play trains (serial); the cluster's Marine collectors only the off-policy ones
SELFPLAY_POLICY_TYPES = ("dqn", "ppo")


def _type_name(value: Any) -> str:
    return type(value).__name__


def coerce(path: str, default: Any, value: Any) -> Any:
    """Check ``value`` against the type of ``default``; return the value to store."""
    if default is None or value is None:
        return value
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif isinstance(default, str):
        if isinstance(value, str):
            return value
    elif isinstance(default, (list, tuple)):
        if isinstance(value, (list, tuple)):
            return list(value)
    else:
        return value
    raise ConfigError(f"{path} must be {_type_name(default)}, got {value!r} ({_type_name(value)})")


def merge(path: str, default: dict, user: Mapping) -> dict:
    out = copy.deepcopy(dict(default))
    open_dict = len(default) == 0
    for key, value in user.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in default:
            if open_dict:
                out[key] = copy.deepcopy(value)
                continue
            close = difflib.get_close_matches(str(key), [str(k) for k in default], n=1)
            hint = f"; did you mean {'.'.join(filter(None, [path, close[0]]))!r}?" if close else ""
            raise ConfigError(f"unknown config key {key_path!r}{hint}")
        dflt = default[key]
        if isinstance(dflt, Mapping):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{key_path} must be a dict, got {value!r} ({_type_name(value)})")
            out[key] = merge(key_path, dflt, value)
        else:
            out[key] = coerce(key_path, dflt, value)
    return out


def normalise(cfg: EasyDict) -> None:
    """Values a user may write two ways, made one (in place, before :func:`validate`): ``run.stop_value`` inf
    (DI-engine's configs write it) is None, *no stop value*: the run trains to its budget and ends with exit 0.
    JSON, which carries the config to the cluster's workers, has no inf."""
    if cfg.run.stop_value == math.inf:
        cfg.run.stop_value = None


def validate(cfg: EasyDict) -> None:
    """The values that fit each other: bounds, and pairings of sections (env and policy, learner ranks);
    ConfigError naming the key and the value. What the policy's data flow needs (its buffer, n-step, chunk size)
    the flow checks itself (``parallel_rl.data.flows``, called by the assembly)."""
    buf_type = cfg.policy.other.replay_buffer.type
    if buf_type == "sequence":
        raise ConfigError(
            "policy.other.replay_buffer.type='sequence': the sequence buffer samples (batch, sequence) "
            "windows for library use; the pipelines train on transitions: use advanced or naive"
        )
    if cfg.policy.model.get("recurrent") and cfg.env.type != "gymnasium":
        raise ConfigError(
            "policy.model.recurrent (a policy with memory) needs env.type='gymnasium': the two-player "
            "collectors and evaluators carry no recurrent state yet; drop policy.model.recurrent"
        )
    random_size = int(cfg.policy.get("random_collect_size", 0) or 0)
    buffer_size = cfg.policy.other.replay_buffer.get("replay_buffer_size")
    if random_size < 0 or (buffer_size is not None and random_size > buffer_size):
        raise ConfigError(
            f"policy.random_collect_size must be between 0 and the replay buffer's size (the learner "
            f"starts once that many rows are in it), got {random_size} with "
            f"policy.other.replay_buffer.replay_buffer_size={buffer_size}"
        )
    if cfg.env.type == "pettingzoo" and random_size:
        raise ConfigError(
            f"policy.random_collect_size={random_size} is for single-agent envs; "
            f"two-player self-play starts against the league's bots instead: leave it 0"
        )
    if cfg.env.type == "pettingzoo" and cfg.policy.type not in SELFPLAY_POLICY_TYPES:
        raise ConfigError(
            f"two-player self-play trains policy.type {' or '.join(map(repr, SELFPLAY_POLICY_TYPES))}, "
            f"got {cfg.policy.type!r}"
        )
    learner = cfg.parallel.learner
    if learner.world_size > cfg.policy.learn.batch_size:
        raise ConfigError(
            f"parallel.learner.world_size={learner.world_size} is more than "
            f"policy.learn.batch_size={cfg.policy.learn.batch_size}: every rank needs rows"
        )


def check_cluster_config(cfg: EasyDict) -> None:
    """What the cluster (``run``, ``coordinator``) cannot train although the serial pipeline can: two-player
    self-play with an on-policy algorithm (the Marine collectors keep rows across policy versions and count
    segment shares in moves, not the training player's rows)."""
    if cfg.env.type == "pettingzoo" and cfg.policy.on_policy:
        raise ConfigError(
            f"two-player self-play with the on-policy policy.type={cfg.policy.type!r} runs in the "
            f"serial pipeline only (parallel-rl serial -c CONFIG); the cluster (run, coordinator) "
            f"trains env.type='pettingzoo' with policy.type='dqn'"
        )


class _YamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading floats as YAML 1.2 and Python do: ``1e-4`` is a float (YAML 1.1 reads a
    string unless it is written ``1.0e-4``; RL Zoo's files write ``!!float 1e-4``, which works as well)."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                  |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                  |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                  |[-+]?\.(?:inf|Inf|INF)
                  |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _load_yaml(path: str) -> Any:
    try:
        with open(path) as f:
            return yaml.load(f, Loader=_YamlLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML: {exc.problem or exc.context}{where}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {' '.join(str(exc).split())}") from None


def _load_python(path: str) -> Mapping:
    try:
        namespace = runpy.run_path(path)
    except Exception as exc:  # a user file: report any error as a config error
        raise ConfigError(f"config file {path!r} failed to load: {type(exc).__name__}: {exc}") from exc
    for name in ("main_config", "config"):
        if name in namespace:
            value = namespace[name]
            if not isinstance(value, Mapping):
                raise ConfigError(f"{path}: {name} must be a dict, got {_type_name(value)}")
            return value
    raise ConfigError(f"config file {path!r} defines neither 'main_config' nor 'config'")


def load_config_file(path: str) -> dict:
    """A config file's dict: a Python file's ``main_config`` (or ``config``), or a YAML file's top-level mapping
    (``.yaml``, ``.yml``: the same keys, as RL Zoo's hyperparameter files hold them)."""
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} not found; pass -c with a path like configs/cartpole_dqn.py")
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".py":
        value = _load_python(path)
    elif suffix in (".yaml", ".yml"):
        value = _load_yaml(path)
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"config file {path} must hold a mapping of config keys at its top level, got {_type_name(value)}"
            )
    else:
        raise ConfigError(
            f"config file {path!r} is neither a Python (.py) nor a YAML (.yaml, .yml) config file; "
            f"pass -c with one of those"
        )
    return copy.deepcopy(dict(value))


def parse_override(text: str) -> tuple[list[str], Any]:
    """``'a.b=3'`` -> (['a', 'b'], 3); the value is a JSON literal, else ``inf``/``-inf``/``nan`` as Python
    writes them (a float: ``--set run.stop_value=inf`` trains to the budget, as ``null`` does), else a string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set expects dotted.key=value, got {text!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = float(raw) if raw.strip().lower() in NON_FINITE else raw
    return key.split("."), value


NON_FINITE = {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan"}


def apply_overrides(user_cfg: dict, overrides: Iterable[str]) -> dict:
    """Apply ``--set`` overrides to a user config (before compile). An override of a run setting wins over the
    file whichever name each gives it (``--set run.max_env_step=N`` over a file's ``serial.max_env_step``, and the
    other way round: :func:`parallel_rl.compat.keys.drop_displaced`)."""
    from ..compat.keys import drop_displaced

    cfg = copy.deepcopy(user_cfg)
    for text in overrides:
        parts, value = parse_override(text)
        drop_displaced(cfg, ".".join(parts))
        node = cfg
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {text!r}: {part!r} is not a section")
            node = child
        node[parts[-1]] = value
    return cfg


# a run's copy of its compiled config, in its experiment directory (written when a run starts from Python or the
# serial CLI): parallel_rl.load_policy(run_dir) and parallel-rl plot read it
RUN_CONFIG_NAME = "config.json"


# a run's config.json is a few KiB; one past this is not one
MAX_RUN_CONFIG_BYTES = 16 * 1024 * 1024


def read_run_config(path: str) -> EasyDict:
    """The run config ``path`` holds (a :func:`save_run_config` file): the one door a ``config.json`` comes in by.
    ConfigError in one line naming the file when it cannot be read, is larger than a config, is not strict JSON
    (NaN and infinities, nesting too deep, bad UTF-8) or not a JSON object with names for keys."""
    from ..transport.codec import loads

    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_RUN_CONFIG_BYTES:
                raise ValueError(f"{size} bytes, over {MAX_RUN_CONFIG_BYTES}")
            raw = f.read()
        cfg = loads(raw)
        if not isinstance(cfg, dict):
            raise ValueError(f"a JSON {type(cfg).__name__}, not an object")
        return EasyDict(cfg)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else " ".join(str(exc).split())[:200]
        raise ConfigError(f"{path}: not a readable run config ({why})") from None


def save_run_config(cfg: EasyDict, exp_dir: str) -> str:
    """Write ``cfg`` as ``<exp_dir>/config.json`` (JSON; values JSON cannot hold as their ``str``)."""
    path = os.path.join(exp_dir, RUN_CONFIG_NAME)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=1, default=str)
    return path
