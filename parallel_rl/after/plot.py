"""``parallel-rl plot``: learning curves (eval return against env steps, wall time or updates) of runs.

A run's eval history comes from the coordinator's saved state (a cluster run: ``t``, ``env_steps``,
``train_iter``, ``eval_return`` per evaluation) or from the serial pipeline's TensorBoard scalars
(``evaluator/eval_return`` at the env step; wall time and updates follow from the rates logged beside it:
``elapsed = env_steps / env_steps_per_second``, ``updates = updates_per_second * elapsed``). Runs with the
same config apart from ``exp_name`` and ``seed`` form one group: its mean over the runs, on the union of
their x values (each run interpolated, within its own range), with a min-max band.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..errors import ConfigError, StorageError

logger = logging.getLogger(__name__)

X_AXES = {"env_steps": "env steps", "wall": "wall time (s)", "updates": "updates (learner iterations)"}


def _coordinator_state(root: str) -> Optional[dict]:
    """The newest coordinator state in the store at ``root`` (read only: plot and compare write nothing there), None
    when it has none; ConfigError naming the store when the state is damaged."""
    from ..storage import newest_state

    try:
        return newest_state(root)
    except StorageError as exc:
        raise ConfigError(f"cannot read the run {root}: {exc}") from None


def eval_env_steps(entry: dict) -> Any:
    """The env steps an evaluation of a cluster run is plotted at: those collected when the evaluated policy was
    announced (``policy_env_steps``: what it was trained on; the same count whatever the load), else (a state
    written before the coordinator recorded them, or a version announced before a resume) those collected when
    the result came back."""
    steps = entry.get("policy_env_steps")
    return entry["env_steps"] if steps is None else steps


def _from_coordinator_state(root: str) -> Optional[List[dict]]:
    """The eval points of the coordinator state in the store at ``root``."""
    state = _coordinator_state(root)
    if state is None:
        return None
    history = state.get("eval_history", [])
    try:
        points = [
            {
                "env_steps": float(eval_env_steps(p)),
                "wall": float(p["t"]),
                "updates": float(p["train_iter"]),
                "return": float(p["eval_return"]),
            }
            for p in history
            if p.get("eval_return") is not None
        ]
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"cannot read the run {root}: its coordinator state's eval_history is damaged "
            f"({type(exc).__name__}: {exc}); pass another run or its tensorboard/ scalars"
        ) from None
    return points


def _from_tensorboard(logdir: str) -> Optional[List[dict]]:
    if not os.path.isdir(logdir):
        return None
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    acc = EventAccumulator(logdir, size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    tags = set(acc.Tags().get("tensors", []))

    def series(tag: str) -> Dict[int, float]:
        if tag not in tags:
            return {}
        return {e.step: float(tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)}

    returns = series("evaluator/eval_return")
    if not returns:
        return None
    steps_rate, updates_rate = series("evaluator/env_steps_per_second"), series("evaluator/updates_per_second")
    points = []
    for step, value in sorted(returns.items()):
        rate = steps_rate.get(step, 0.0)
        wall = step / rate if rate > 0 else 0.0
        points.append({"env_steps": step, "wall": wall, "updates": updates_rate.get(step, 0.0) * wall, "return": value})
    return points


def run_history(run_dir: str) -> List[dict]:
    """The eval points of one run (serial or cluster); ConfigError naming the directory when it has none."""
    if not os.path.isdir(run_dir):
        raise ConfigError(
            f"{run_dir!r} is not a directory; pass run directories (a serial run's "
            f"exp_name, a cluster run's exp_name or its shared store)"
        )
    for root in (run_dir, os.path.join(run_dir, "shared")):
        points = _from_coordinator_state(root)
        if points:
            return points
    for logdir in (os.path.join(run_dir, "tensorboard"), os.path.join(run_dir, "shared", "tensorboard", "evaluator")):
        points = _from_tensorboard(logdir)
        if points:
            return points
    raise ConfigError(
        f"no eval history in {run_dir!r} (no coordinator state, no tensorboard/ scalars); "
        f"was it trained with system.tensorboard on?"
    )


def run_name(run_dir: str) -> str:
    """What a run is called: a cluster run's ``exp_name`` (its coordinator state holds it: the store's own
    directory is ``shared``, or whatever ``--shared-dir`` named), else the directory's name."""
    for root in (run_dir, os.path.join(run_dir, "shared")):
        state = _coordinator_state(root)
        if state is not None and isinstance(state.get("exp_name"), str) and state["exp_name"].strip("/"):
            return os.path.basename(state["exp_name"].rstrip("/"))
    return os.path.basename(os.path.abspath(run_dir))


def group_key(run_dir: str) -> Tuple[str, str]:
    """(key, label): the run's config without ``exp_name``/``seed`` when it saved one, else its name
    (:func:`run_name`) without a seed suffix (``_s1``, ``-seed2``)."""
    from ..config import RUN_CONFIG_NAME, read_run_config

    name = re.sub(r"[_-](s|seed)\d+$", "", run_name(run_dir))
    path = os.path.join(run_dir, RUN_CONFIG_NAME)
    if os.path.isfile(path):
        try:
            cfg = read_run_config(path)
        except ConfigError as exc:
            raise ConfigError(
                f"cannot read the run {run_dir}: {exc}; repair or delete it (runs are then grouped by their "
                f"directory names)"
            ) from None
        cfg.pop("exp_name", None)
        cfg.pop("seed", None)
        return json.dumps(cfg, sort_keys=True, default=str), name
    return name, name


def band(histories: List[List[dict]], x: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(xs, mean, min, max) of the runs' returns on the union of their x values; at each x only the runs whose
    range covers it count."""
    xs = np.unique(np.concatenate([[p[x] for p in h] for h in histories]).astype(float))
    curves = []
    for h in histories:
        hx, hy = np.array([p[x] for p in h], float), np.array([p["return"] for p in h], float)
        order = np.argsort(hx, kind="stable")
        hx, hy = hx[order], hy[order]
        y = np.interp(xs, hx, hy)
        y[(xs < hx[0]) | (xs > hx[-1])] = np.nan
        curves.append(y)
    stack = np.vstack(curves)
    import warnings

    with warnings.catch_warnings():  # an x that no run covers is nan, not a warning (cannot happen: xs is theirs)
        warnings.simplefilter("ignore", RuntimeWarning)
        return xs, np.nanmean(stack, 0), np.nanmin(stack, 0), np.nanmax(stack, 0)


def read_reference(path: str) -> List[dict]:
    """Published points from a CSV with columns ``x,return[,label]``."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        return [
            {"x": float(r["x"]), "return": float(r["return"]), "label": r.get("label") or "reference"} for r in rows
        ]
    except (OSError, KeyError, ValueError, TypeError) as exc:
        raise ConfigError(f"--reference {path!r}: not a CSV with columns x,return[,label] ({exc})") from None


def pyplot() -> Any:
    """``matplotlib.pyplot`` drawing to files (the Agg backend), or a ConfigError saying how to install it:
    matplotlib comes with the ``compare`` extra only (the Docker image, for one, has it not)."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("drawing curves needs matplotlib: pip install 'parallel-rl[compare]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_runs(
    run_dirs: List[str], output: str, x: str = "env_steps", reference: Optional[str] = None, title: Optional[str] = None
) -> Tuple[str, Dict[str, List[str]]]:
    """Draw the runs' curves into ``output`` (.png or .svg); returns it and the groups drawn (label: the names
    of its runs, :func:`run_name`)."""
    if x not in X_AXES:
        raise ConfigError(f"--x must be one of {', '.join(X_AXES)}, got {x!r}")
    if os.path.splitext(output)[1].lower() not in (".png", ".svg"):
        raise ConfigError(f"-o {output!r}: write a .png or an .svg")
    refs = read_reference(reference) if reference else []
    groups: Dict[str, Tuple[str, List[str], List[List[dict]]]] = {}
    for run_dir in run_dirs:
        key, label = group_key(run_dir)
        entry = groups.setdefault(key, (label, [], []))
        entry[1].append(run_name(run_dir))
        entry[2].append(run_history(run_dir))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, names, histories in groups.values():
        xs, mean, low, high = band(histories, x)
        (line,) = ax.plot(xs, mean, label=f"{label} (n={len(names)})" if len(names) > 1 else label, linewidth=1.8)
        if len(names) > 1:
            ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    for label in dict.fromkeys(r["label"] for r in refs):
        pts = [r for r in refs if r["label"] == label]
        ax.scatter([p["x"] for p in pts], [p["return"] for p in pts], marker="*", s=80, label=label, zorder=3)
    ax.set_xlabel(X_AXES[x])
    ax.set_ylabel("eval return")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output)
    plt.close(fig)
    return output, {label: names for label, names, _ in groups.values()}
