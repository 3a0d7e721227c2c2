"""``parallel-rl sweep``: seeds, a grid and random settings over one config, each trial a training, results in
one table (``OUT/results.csv``).

Every trial's config is compiled before anything runs: a key the config does not know, an empty grid or a bad
seed list is the sweep's error (exit 2, nothing runs); a trial whose values do not compile is reported failed
with its reason and the others run. Trials run ``parallel`` at a time through a :class:`~.runner.Runner`.
"""

from __future__ import annotations

import csv
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..errors import ConfigError
from .runner import Runner, TrialResult
from .trials import Trial, TrialConfigs, grid_settings, load_space, space_settings

logger = logging.getLogger(__name__)

COLUMNS = ["trial", "settings", "seed", "status", "exit", "eval_return", "env_steps", "wall_s", "note"]
CSV_COLUMNS = [*COLUMNS, "dir"]  # the CSV also names each trial's run directory (on a pool: the service's)
RESULTS_NAME = "results.csv"


def check_out_dir(out_dir: str, what: str) -> None:
    """A sweep writes into a directory of its own: one holding an earlier sweep's trials is refused."""
    if os.path.isdir(out_dir) and any(name.startswith("trial_") for name in os.listdir(out_dir)):
        raise ConfigError(
            f"--out {out_dir} holds the trials of an earlier {what}; pass another --out (or remove that directory)"
        )


def random_settings(space_path: str, count: int, seed: int) -> List[Dict[str, Any]]:
    """``count`` draws of the space file's ``space(trial)`` by Optuna's random sampler (seeded)."""
    optuna = import_optuna()
    space = load_space(space_path)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    return [space_settings(space, study.ask(), space_path) for _ in range(count)]


def import_optuna():
    try:
        import optuna
    except ImportError:
        raise ConfigError("Optuna is not installed: pip install 'parallel-rl[lab]' (optuna, sqlalchemy)") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def plan(
    configs: TrialConfigs,
    grid: Dict[str, List[Any]],
    seeds: Sequence[Optional[int]],
    random: Sequence[Dict[str, Any]] = (),
) -> List[Trial]:
    """The trials: every grid combination (with every random draw) for every seed, numbered in that order."""
    combos = grid_settings(grid)
    if random:
        combos = [{**combo, **drawn} for combo in combos for drawn in random]
    return [
        Trial(n, settings, seed)
        for n, (settings, seed) in enumerate((settings, seed) for settings in combos for seed in seeds)
    ]


def check_trials(configs: TrialConfigs, trials: Sequence[Trial]) -> Dict[int, Optional[str]]:
    """Each trial's reason not to run (None: its config compiles); a key the config does not know: ConfigError."""
    return {trial.number: configs.check(trial) for trial in trials}


def run_sweep(
    trials: Sequence[Trial],
    reasons: Dict[int, Optional[str]],
    runner: Runner,
    parallel: int,
    out_dir: str,
    on_result: Optional[Callable[[TrialResult], None]] = None,
) -> List[TrialResult]:
    """Run the trials whose config compiles (``reasons``: :func:`check_trials`) ``parallel`` at a time, and write
    the table to ``OUT/results.csv``."""
    results: Dict[int, TrialResult] = {}
    for trial in trials:
        if reasons[trial.number]:
            results[trial.number] = TrialResult(trial, "failed", exit_code=2, note=reasons[trial.number])
            if on_result:
                on_result(results[trial.number])
    os.makedirs(out_dir, exist_ok=True)

    def run_one(trial: Trial) -> TrialResult:
        result = runner.run(trial)
        if on_result:
            on_result(result)
        return result

    runnable = [trial for trial in trials if not reasons[trial.number]]
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="lab-trial") as pool:
        for result in pool.map(run_one, runnable):
            results[result.trial.number] = result
    ordered = [results[trial.number] for trial in trials]
    write_table(os.path.join(out_dir, RESULTS_NAME), [r.row() for r in ordered], CSV_COLUMNS)
    return ordered


def write_table(path: str, rows: Sequence[Dict[str, Any]], columns: Sequence[str]) -> str:
    """The rows as CSV (written to a temporary name, then moved into place)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
    return path
