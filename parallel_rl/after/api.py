"""The notebook API: ``parallel_rl.train(config, **overrides)`` and ``parallel_rl.load_policy(path)``.

>>> import parallel_rl
>>> run = parallel_rl.train("configs/cartpole_dqn.py", exp_name="/tmp/cp", run={"max_env_step": 2000})
>>> agent = parallel_rl.load_policy(run.run_dir)     # the best evaluated checkpoint of the run
>>> agent.act(obs)                                   # one observation -> one action (or a batch -> a batch)
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Union

from ..errors import ConfigError

logger = logging.getLogger(__name__)


@dataclass
class TrainRun:
    """What :func:`train` returns: the pipeline's result (serial: a ``TrainResult``; cluster: the exit code of
    ``parallel-rl run``, 0 solved, 3 budget used up) and the run directory holding its checkpoints."""

    result: Any
    run_dir: str
    solved: bool


def override_strings(overrides: Mapping[str, Any], prefix: str = "") -> List[str]:
    """``{"run": {"max_env_step": 10}, "seed": 1}`` -> ``["run.max_env_step=10", "seed=1"]`` (the CLI's
    ``--set``); a key may also be dotted already (``**{"policy.learn.batch_size": 32}``)."""
    out = []
    for key, value in overrides.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out += override_strings(value, name + ".")
        else:
            out.append(f"{name}={json.dumps(value)}")
    return out


def _user_config(config: Union[str, Mapping[str, Any]]) -> Dict[str, Any]:
    from ..config import load_config_file

    if isinstance(config, Mapping):
        return json.loads(json.dumps(dict(config)))  # a deep copy; the config must be plain data anyway
    return load_config_file(os.fspath(config))


def train(
    config: Union[str, Mapping[str, Any]], cluster: bool = False, collectors: int = 2, **overrides: Any
) -> TrainRun:
    """Train with ``config`` (a config file's path, or its ``main_config`` dict) and ``overrides`` (nested dicts
    or dotted keys), in this process (the serial pipeline; two-player games: self-play) or, with
    ``cluster=True``, as ``parallel-rl run`` does (a coordinator, a learner and ``collectors`` processes)."""
    from ..config import apply_overrides, compile_config
    from ..runtime import experiment_dir

    sets = override_strings(overrides)
    user = _user_config(config)
    cfg = compile_config(apply_overrides(user, sets), "cluster" if cluster else "serial")
    run_dir = experiment_dir(cfg)
    if cluster:
        from ..config import save_run_config

        os.makedirs(run_dir, exist_ok=True)
        save_run_config(cfg, run_dir)  # load_policy(run.run_dir) finds it, as for a serial run
        return _train_cluster(user, sets, run_dir, collectors)
    from ..entry.serial import serial_pipeline
    from ..envs.multiagent import is_battle_env
    from ..envs.fit import check_env_fits

    check_env_fits(cfg)
    pipeline = serial_pipeline
    if is_battle_env(cfg.env):
        from ..entry.selfplay import selfplay_pipeline as pipeline
    result = pipeline(cfg)
    return TrainRun(result, run_dir, bool(result.solved))


def _train_cluster(user: Dict[str, Any], sets: List[str], run_dir: str, collectors: int) -> TrainRun:
    """``parallel-rl run`` in a child process (it owns signals and its workers), on the config written to
    ``<run_dir>/train_config.py``."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, "train_config.py")
    with open(path, "w") as f:
        f.write(f"main_config = {user!r}\n")
    args = [sys.executable, "-m", "parallel_rl", "run", "-c", path, "--collectors", str(collectors), "--port", "0"]
    for text in sets:
        args += ["--set", text]
    code = subprocess.run(args, check=False).returncode
    if code not in (0, 3):
        raise ConfigError(f"parallel-rl run failed with exit code {code} (its output is above)")
    return TrainRun(code, run_dir, code == 0)


# what load_policy(kind=...) takes: an export's format, or a checkpoint (a file, or a run directory's newest)
KINDS = ("checkpoint", "torchscript", "onnx")


def load_policy(
    path: str, config: Union[str, Mapping[str, Any], None] = None, kind: Optional[str] = None, checkpoint: str = "best"
):
    """An :class:`~parallel_rl.after.acting.Agent` with ``act(obs)`` from ``path``: a file written by
    ``parallel-rl export`` (``*.onnx`` runs in ONNX Runtime, ``*.torchscript`` in torch), a checkpoint, or a run
    directory: its ``checkpoint`` (``"best"``: its best evaluated version, the newest when no evaluation kept
    one; ``"newest"``), logged with why. ``kind`` (one of :data:`KINDS`) says which; by default the suffix does, and
    any other name is a checkpoint or a run. A TorchScript file is a program (its code runs as it loads): it is run
    only when named ``*.torchscript`` or ``kind="torchscript"``, never for a checkpoint, so load only the ones you
    trust. A checkpoint needs its config: ``config`` (a file or dict), else the ``config.json`` its run wrote."""
    from .acting import Agent, acting_module, torch_forward
    from .checkpoints import CHOICES, build_policy, find_checkpoint, find_run_config, load_run_config, spaces_env
    from .export import export_kind, open_export

    path = os.fspath(path)
    kind = kind or export_kind(path) or "checkpoint"
    if kind not in KINDS:
        raise ConfigError(f"load_policy: kind={kind!r}; use one of {', '.join(KINDS)}")
    if not os.path.exists(path) and "://" not in path:
        raise ConfigError(f"{path!r} not found; pass a checkpoint, a run directory or an exported file")
    if kind != "checkpoint":
        if not os.path.isfile(path):
            raise ConfigError(f"{path!r} is not a file; a {kind} export is one file written by parallel-rl export")
        forward, meta = open_export(path, kind)
        return Agent(
            forward, meta["obs_shape"], meta["action_kind"], path, meta.get("obs_dtype", "float32"), meta["state"]
        )
    cfg = _config_for(path, config) if config is not None else None
    if cfg is None:
        found = find_run_config(path)
        if found is None:
            raise ConfigError(f"no config.json beside {path!r}: pass load_policy(path, config='configs/...py')")
        cfg = load_run_config(found)
    if checkpoint not in CHOICES:
        raise ConfigError(
            f"load_policy: checkpoint={checkpoint!r}; use one of {', '.join(CHOICES)} (a checkpoint "
            f"file is passed as path)"
        )
    run = path if os.path.isdir(path) else None
    found = find_checkpoint(cfg, checkpoint if run else os.path.abspath(path) if "://" not in path else path, run)
    logger.info("load_policy: %s (%s)", found.why or "the file given", found.source)
    if cfg.env.get("type") == "pettingzoo":
        raise ConfigError(
            "load_policy: two-player games (env.type='pettingzoo') are not supported yet: their "
            "policies need the game's action mask; evaluate them with parallel-rl eval"
        )
    env = spaces_env(cfg)
    try:
        obs_shape, action_kind, obs_dtype = env.obs_shape, env.action_spec.kind, env.obs_dtype
        policy = build_policy(cfg, found, env)
    finally:
        env.close()
    module = acting_module(policy)
    return Agent(
        torch_forward(module), obs_shape, action_kind, found.source, obs_dtype, getattr(module, "state_sizes", None)
    )


def _config_for(path: str, config: Union[str, Mapping[str, Any]]):
    from ..config import compile_config, load_config

    return compile_config(dict(config)) if isinstance(config, Mapping) else load_config(os.fspath(config))
