"""``parallel-rl compare``: many runs, grouped, as the field now reports them (Agarwal et al. 2021).

Each run's eval history comes in through :func:`.plot.run_history` (the validating loaders ``plot`` uses: a cluster
run's coordinator state, read only, or a serial run's TensorBoard scalars). Every run is read before anything is
printed or written: one bad directory is one line and exit 2, and nothing else happens.

Per group: the final score of each run (its last evaluation at or before the compared env step), the IQM (the mean of
the middle half: ``scipy.stats.trim_mean(scores, 0.25)``, as rliable's ``aggregate_iqm``) with a 95 % percentile
bootstrap CI over the runs, the median and the mean; the mean curve over the runs on a common env-step grid with a
95 % percentile bootstrap band (over runs). A group is one task, so rliable's stratified bootstrap (runs resampled
within each task) is resampling its runs with replacement: ``scipy.stats.bootstrap(method="percentile")``.
rliable itself is not used: rliable 1.2.0 needs ``arch < 8``, whose 7.x releases fail to import under our pandas 3
(``pandas.util._decorators.deprecate_kwarg`` changed its signature), and arch 8 no longer takes the
``random_state`` keyword rliable passes (docs/after-training.md).

:func:`compare` computes it all and returns a :class:`Comparison` (its JSON and its CSV): the CLI prints and writes
it, and the service's ``GET /api/v1/compare`` answers it (:func:`service_comparison`, handed to the service's app
by ``parallel-rl serve``).
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ConfigError, ConflictError, RequestRefused, UnavailableError
from ..protocol import COMPARE_GROUPS
from .plot import group_key, pyplot, run_history, run_name

logger = logging.getLogger(__name__)

GROUP_BY = COMPARE_GROUPS  # what --group-by and the service's group= take
CONFIDENCE = 0.95
MAX_REPS = 1_000_000  # rliable's default is 50,000
BATCH_VALUES = 10_000_000  # resampled values held at once (80 MB)
MAX_GRID_POINTS = 200  # the curves' common env-step grid: the runs' eval steps, thinned to this many
SEED_SUFFIX = re.compile(r"[_-](?:s|seed)(\d+)$")
CSV_COLUMNS = (
    "row",
    "group",
    "run_dir",
    "seed",
    "final_env_steps",
    "final_score",
    "runs",
    "iqm",
    "ci_low",
    "ci_high",
    "median",
    "mean",
    "note",
)


@dataclass
class Run:
    """One run directory: its name, seed (None when it does not say), eval history sorted by env step."""

    run_dir: str
    name: str
    seed: Optional[int]
    history: List[dict]
    final_env_steps: float = float("nan")
    final_score: float = float("nan")


@dataclass
class Group:
    """Runs compared as one (seeds of one config), and their statistics at the compared env step."""

    name: str
    runs: List[Run] = field(default_factory=list)
    iqm: float = float("nan")
    ci: Tuple[float, float] = (float("nan"), float("nan"))
    median: float = float("nan")
    mean: float = float("nan")
    note: str = ""


def scipy_stats():
    """``scipy.stats``, or a ConfigError saying how to install it: scipy comes with the ``compare`` extra only (the
    Docker image, for one, has it not)."""
    try:
        import scipy.stats
    except ImportError:
        raise ConfigError("comparing runs needs scipy: pip install 'parallel-rl[compare]'") from None
    return scipy.stats


def iqm(scores: np.ndarray, axis: Optional[int] = None) -> np.ndarray:
    """The interquartile mean: the mean of the scores left after cutting 25 % (rounded down) from each end."""
    return scipy_stats().trim_mean(scores, 0.25, axis=axis)


def bootstrap_ci(samples: np.ndarray, statistic, reps: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """(low, high) of the 95 % percentile bootstrap interval of ``statistic`` over ``samples``' first axis (the
    runs), each resample drawing as many runs with replacement; a single run gives the interval (x, x)."""
    bootstrap = scipy_stats().bootstrap
    if len(samples) < 2:
        return samples[0], samples[0]
    res = bootstrap(
        (samples,),
        statistic,
        n_resamples=reps,
        vectorized=True,
        axis=0,
        method="percentile",
        confidence_level=CONFIDENCE,
        rng=np.random.default_rng(seed),
        batch=max(1, BATCH_VALUES // samples.size),
    )  # bounded memory whatever --reps
    return res.confidence_interval.low, res.confidence_interval.high


def run_seed(run_dir: str, name: str) -> Optional[int]:
    """The run's seed: its config.json's ``seed`` when it saved one, else a seed suffix of its name (``_s1``)."""
    from ..config import RUN_CONFIG_NAME, read_run_config

    path = os.path.join(run_dir, RUN_CONFIG_NAME)
    if os.path.isfile(path):
        seed = read_run_config(path).get("seed")
        if isinstance(seed, int) and not isinstance(seed, bool):
            return seed
    match = SEED_SUFFIX.search(name)
    return int(match.group(1)) if match else None


def load_run(run_dir: str, name: Optional[str] = None) -> Run:
    """A run directory through the validating loaders; ConfigError naming it when it is not a run or has no
    evaluation. ``name``: what it is called (default :func:`.plot.run_name`; the service: the run's name)."""
    history = sorted(run_history(run_dir), key=lambda p: p["env_steps"])
    if not all(np.isfinite([p["env_steps"] for p in history] + [p["return"] for p in history])):
        raise ConfigError(f"{run_dir!r}: its eval history holds a non-finite env step or return; compare other runs")
    name = name or run_name(run_dir)
    return Run(run_dir, name, run_seed(run_dir, name), history)


def run_identity(run_dir: str) -> str:
    """The same run however it is named: a cluster run's experiment directory and its shared store are one run."""
    store = os.path.join(run_dir, "shared")
    return os.path.realpath(store if os.path.isdir(os.path.join(store, "coordinator")) else run_dir)


def parse_group(text: str) -> Tuple[str, List[str]]:
    """``--group NAME=DIR,DIR``: (name, run directories)."""
    name, sep, dirs = text.partition("=")
    runs = [d for d in dirs.split(",") if d]
    if not sep or not name.strip() or not runs:
        raise ConfigError(f"--group {text!r}: write NAME=DIR[,DIR...], e.g. --group dqn=runs/dqn_s0,runs/dqn_s1")
    return name.strip(), runs


def make_groups(run_dirs: Sequence[str], named: Sequence[str], group_by: str = "config") -> List[Group]:
    """The runs, read and grouped: ``named`` (``--group NAME=DIR,...``) as given, the others by ``group_by``
    (``config``: the same config apart from exp_name and seed, else the same name without its seed suffix;
    ``name``: the same name without its seed suffix), in the order first seen."""
    if group_by not in GROUP_BY:
        raise ConfigError(f"--group-by must be one of {', '.join(GROUP_BY)}, got {group_by!r}")
    explicit = [parse_group(text) for text in named]
    seen: Dict[str, str] = {}
    for where, dirs in [("the run list", run_dirs)] + [(f"--group {n}", d) for n, d in explicit]:
        for run_dir in dirs:
            if "\x00" in run_dir:  # not a path the OS takes
                raise ConfigError(f"{run_dir!r} is not a directory (a NUL in its name); pass run directories")
            key = run_identity(run_dir)
            if key in seen:
                raise ConfigError(f"{run_dir!r} is named twice ({seen[key]} and {where}); compare each run once")
            seen[key] = where
    if not seen:
        raise ConfigError("no runs to compare: pass run directories, or --group NAME=DIR,DIR")
    groups: Dict[str, Group] = {}
    for name, dirs in explicit:
        if name in groups:
            raise ConfigError(f"--group {name} is given twice; give each group one --group NAME=DIR,DIR,...")
        groups[name] = Group(name, [load_run(d) for d in dirs])
    return group_runs([load_run(d) for d in run_dirs], group_by, groups)


def group_runs(runs: List[Run], group_by: str, groups: Optional[Dict[str, Group]] = None) -> List[Group]:
    """``runs`` (read) grouped by ``group_by`` after the ``groups`` given by name, in the order first seen."""
    groups = dict(groups or {})
    keyed: Dict[str, List[Run]] = {}
    for run in runs:
        key = group_key(run.run_dir)[0] if group_by == "config" else SEED_SUFFIX.sub("", run.name)
        keyed.setdefault(key, []).append(run)
    for runs in keyed.values():
        label = unique = group_label(runs)
        n = 2
        while unique in groups:  # two configs whose runs are named alike: cartpole, cartpole#2
            unique, n = f"{label}#{n}", n + 1
        groups[unique] = Group(unique, runs)
    return list(groups.values())


def group_label(runs: List[Run]) -> str:
    """What a group found by config or name is called: what its runs' names (without seed suffixes) have in common
    (``dqn_lr1`` and ``dqn_lr2``: ``dqn_lr``), else the first run's name."""
    names = [SEED_SUFFIX.sub("", run.name) for run in runs]
    return os.path.commonprefix(names).rstrip("_-. ") or names[0]


def score_at(run: Run, env_step: float) -> None:
    """Set the run's final score: its last evaluation at or before ``env_step``."""
    before = [p for p in run.history if p["env_steps"] <= env_step]
    if not before:
        raise ConfigError(
            f"{run.run_dir!r}: no evaluation at or before env step {env_step:g} (its first is at "
            f"{run.history[0]['env_steps']:g}); pass a larger --at-env-step (the service: at_env_step=)"
        )
    run.final_env_steps, run.final_score = before[-1]["env_steps"], before[-1]["return"]


def summarise(groups: List[Group], at_env_step: Optional[float], reps: int, seed: int) -> float:
    """Score every run at ``at_env_step`` and set each group's IQM, CI, median and mean; returns the env step
    compared. None: the smallest final env step among the runs, or, where a run's first evaluation comes later (runs
    that ended at different env steps, e.g. at their stop value), the latest first evaluation: a run that ended
    before it is scored by its last evaluation."""
    runs = [run for group in groups for run in group.runs]
    if at_env_step is None:
        step = min(run.history[-1]["env_steps"] for run in runs)
        step = max(step, max(run.history[0]["env_steps"] for run in runs))
    else:
        step = float(at_env_step)
    for run in runs:
        score_at(run, step)
    for group in groups:
        scores = np.array([run.final_score for run in group.runs], float)
        group.iqm, group.median, group.mean = float(iqm(scores)), float(np.median(scores)), float(np.mean(scores))
        low, high = bootstrap_ci(scores, iqm, reps, seed)
        group.ci = (float(low), float(high))
        if len(scores) == 1:
            group.note = "1 run: nothing to resample, the CI is the run's score (width 0)"
    return step


def curve_band(runs: List[Run], reps: int, seed: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(xs, mean, low, high): the runs' mean eval return on a common env-step grid (their eval steps inside the
    range every run covers, thinned to :data:`MAX_GRID_POINTS`) with a 95 % percentile bootstrap band over runs."""
    lo = max(run.history[0]["env_steps"] for run in runs)
    hi = min(run.history[-1]["env_steps"] for run in runs)
    xs = np.unique([p["env_steps"] for run in runs for p in run.history if lo <= p["env_steps"] <= hi])
    if len(xs) == 0:  # the runs' ranges do not overlap: no point all of them cover
        return xs, xs, xs, xs
    if len(xs) > MAX_GRID_POINTS:
        xs = np.linspace(lo, hi, MAX_GRID_POINTS)
    curves = np.vstack(
        [np.interp(xs, [p["env_steps"] for p in run.history], [p["return"] for p in run.history]) for run in runs]
    )
    low, high = bootstrap_ci(curves, np.mean, reps, seed)
    return xs, curves.mean(0), low, high


def plot_groups(groups: List[Group], output: str, env_step: float, reps: int, seed: int) -> str:
    """Draw each group's mean curve with its bootstrap band into ``output`` (.png or .svg)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for group in groups:
        xs, mean, low, high = curve_band(group.runs, reps, seed)
        if len(xs) == 0:
            logger.warning("compare: %s: its runs' evaluations cover no common env steps; not drawn", group.name)
            continue
        (line,) = ax.plot(
            xs, mean, label=f"{group.name} (n={len(group.runs)})", linewidth=1.8, marker="." if len(xs) == 1 else None
        )
        ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.axvline(env_step, color="0.5", linestyle=":", linewidth=1)
    ax.set_xlabel("env steps")
    ax.set_ylabel("eval return (mean, 95 % bootstrap band)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    _write_atomic(output, lambda tmp: fig.savefig(tmp, format=os.path.splitext(output)[1][1:].lower()))
    plt.close(fig)
    return output


def csv_rows(groups: List[Group]) -> List[dict]:
    """One row per run (``row=run``) and one per group (``row=group``), columns :data:`CSV_COLUMNS`."""
    rows = []
    for group in groups:
        for run in group.runs:
            rows.append(
                {
                    "row": "run",
                    "group": group.name,
                    "run_dir": run.run_dir,
                    "seed": "" if run.seed is None else run.seed,
                    "final_env_steps": f"{run.final_env_steps:g}",
                    "final_score": repr(run.final_score),
                }
            )
        rows.append(
            {
                "row": "group",
                "group": group.name,
                "runs": len(group.runs),
                "iqm": repr(group.iqm),
                "ci_low": repr(group.ci[0]),
                "ci_high": repr(group.ci[1]),
                "median": repr(group.median),
                "mean": repr(group.mean),
                "note": group.note,
            }
        )
    return rows


def csv_text(groups: List[Group]) -> str:
    """The CSV (:func:`csv_rows` under a header): what ``--csv`` writes and ``GET /api/v1/compare?format=csv``
    answers."""
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, CSV_COLUMNS, restval="")
    writer.writeheader()
    writer.writerows(csv_rows(groups))
    return out.getvalue()


def write_csv(groups: List[Group], output: str) -> str:
    def write(tmp: str) -> None:
        with open(tmp, "w", newline="") as f:
            f.write(csv_text(groups))

    _write_atomic(output, write)
    return output


def _write_atomic(path: str, write) -> None:
    """``write(tmp)`` a temporary file beside ``path``, then move it into place (no half-written output)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigError(f"{path!r}: its directory {directory} does not exist; make it or write elsewhere")
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot write {path!r} ({getattr(exc, 'strerror', None) or exc}); write elsewhere") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def check_options(
    csv_out: Optional[str], png_out: Optional[str], reps: int, seed: int, at_env_step: Optional[float] = None
) -> None:
    """Refuse options that cannot work (outputs that cannot be written, no resamples, a missing package) before
    any run is read."""
    scipy_stats()
    if png_out is not None:
        pyplot()
    if at_env_step is not None and not math.isfinite(at_env_step):
        raise ConfigError(f"--at-env-step must be a number of env steps, got {at_env_step}")
    if not 1 <= reps <= MAX_REPS:
        raise ConfigError(f"--reps must be 1-{MAX_REPS}, got {reps}")
    if seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {seed}")
    if png_out is not None and os.path.splitext(png_out)[1].lower() not in (".png", ".svg"):
        raise ConfigError(f"--png {png_out!r}: write a .png (or an .svg)")
    for option, path in (("--csv", csv_out), ("--png", png_out)):
        if path is not None and "\x00" in path:
            raise ConfigError(f"{option} {path!r}: a NUL in the name; name another file")
        if path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise ConfigError(f"{option} {path!r}: its directory does not exist; make it or write elsewhere")


@dataclass
class Comparison:
    """The groups scored at ``env_step`` (``at_env_step`` None: the smallest final env step among the runs), with
    ``reps`` bootstrap resamples seeded by ``seed``: what ``parallel-rl compare`` prints and writes and what the
    service's ``GET /api/v1/compare`` answers."""

    groups: List[Group]
    env_step: float
    at_env_step: Optional[float]
    reps: int
    seed: int

    def csv(self) -> str:
        return csv_text(self.groups)

    @property
    def default_step(self) -> str:
        """Which default the runs were scored at (``at_env_step`` None)."""
        runs = [run for group in self.groups for run in group.runs]
        if self.env_step == min(run.history[-1]["env_steps"] for run in runs):
            return "the smallest final env step among the runs"
        return "the latest first evaluation among the runs: some ended before it and count their last"

    def to_json(self, ids: Optional[Dict[str, str]] = None) -> dict:
        """Per group: its runs' final scores, the IQM with its 95 % CI, median and mean, and the mean curve with
        its 95 % bootstrap band on the group's common env-step grid (empty when its runs' ranges do not overlap).
        ``ids``: run directory -> the id to show for it (the service's run ids)."""
        ids = ids or {}
        out = []
        for group in self.groups:
            xs, mean, low, high = curve_band(group.runs, self.reps, self.seed)
            runs = [
                {
                    "id": ids.get(run.run_dir),
                    "name": run.name,
                    "run_dir": run.run_dir,
                    "seed": run.seed,
                    "final_env_steps": run.final_env_steps,
                    "final_score": run.final_score,
                }
                for run in group.runs
            ]
            out.append(
                {
                    "name": group.name,
                    "runs": runs,
                    "iqm": _finite(group.iqm),
                    "ci": [_finite(group.ci[0]), _finite(group.ci[1])],
                    "median": _finite(group.median),
                    "mean": _finite(group.mean),
                    "note": group.note,
                    "curve": {
                        "env_steps": [float(x) for x in xs],
                        "mean": [_finite(y) for y in mean],
                        "low": [_finite(y) for y in low],
                        "high": [_finite(y) for y in high],
                    },
                }
            )
        at = "at_env_step" if self.at_env_step is not None else self.default_step
        return {
            "env_step": self.env_step,
            "scored_at": at,
            "reps": self.reps,
            "seed": self.seed,
            "confidence": CONFIDENCE,
            "groups": out,
        }


def _finite(x: float) -> Optional[float]:
    """``x`` as JSON takes it: NaN and infinities are not JSON (null)."""
    return float(x) if math.isfinite(x) else None


def compare(
    run_dirs: Sequence[str],
    named: Sequence[str] = (),
    group_by: str = "config",
    at_env_step: Optional[float] = None,
    reps: int = 2000,
    seed: int = 0,
) -> Comparison:
    """Read and group the runs (:func:`make_groups`), score them (:func:`summarise`): ConfigError naming the
    first run or option that stops it, before anything is computed for the others."""
    groups = make_groups(run_dirs, named, group_by)
    step = summarise(groups, at_env_step, reps, seed)
    return Comparison(groups, step, at_env_step, reps, seed)


def service_comparison(runs: Sequence[Tuple[str, str, str]], query) -> object:
    """``GET /api/v1/compare`` of the service: ``runs`` (run id, its directory, its name) compared as ``query``
    (a :class:`~parallel_rl.protocol.CompareQuery`, already checked: its caps bound the work) asks; the JSON
    (a dict) or the CSV (a str). A run that cannot be read (no evaluation yet, a damaged state) is a 409 naming
    it; an ``at_env_step`` before a run's first evaluation a 400; no scipy here a 503."""
    try:
        scipy_stats()
    except ConfigError as exc:
        raise UnavailableError(str(exc)) from None
    read = []
    for run_id, run_dir, name in runs:
        if not os.path.isdir(run_dir):
            raise ConflictError(f"{run_id} has no evaluation yet (it never started); compare it after its first one")
        try:
            read.append(load_run(run_dir, name))
        except ConfigError as exc:
            raise ConflictError(f"{run_id} cannot be compared yet: {exc}") from None
    try:
        groups = group_runs(read, query.group)
    except ConfigError as exc:  # its config.json damaged
        raise ConflictError(f"cannot group these runs: {exc}") from None
    try:
        step = summarise(groups, query.at_env_step, query.reps, query.seed)
    except ConfigError as exc:
        raise RequestRefused(str(exc)) from None
    result = Comparison(groups, step, query.at_env_step, query.reps, query.seed)
    return result.csv() if query.format == "csv" else result.to_json({run_dir: run_id for run_id, run_dir, _ in runs})
