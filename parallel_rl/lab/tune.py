"""``parallel-rl tune``: hyperparameter search with Optuna, as RL Zoo's ``--optimize`` does it.

TPE samples each trial's settings from the space file's ``space(trial)``; each trial trains through a
:class:`~.runner.Runner` and reports its evaluation curve (``trial.report(eval_return, env_steps)``) as it comes;
the median pruner stops a trial whose curve falls below the median of the earlier trials' at the same env step
(the training saves and exits). Serial runs evaluate at the same env steps whatever their settings; cluster runs
do not, so their curves are compared at the multiples of ``report_every`` env steps. A trial's value is its final
eval return (maximised), or with ``objective="solve-steps"`` the env steps it took to reach the config's stop value
(minimised; no pruning: a curve's return says little about when it will solve). With ``seeds``, each trial trains
once per seed and its value is the median of theirs (no pruning either). The study lives in an SQLite file:
the same command run again resumes it (its finished trials are kept; ``--trials N`` is the total).

Everything of study S goes under ``OUT/S/``: the trials' directories and logs, ``trials.csv`` (the study's table)
and ``best_config.py`` (the best trial's config: ``parallel-rl run -c OUT/S/best_config.py`` trains it).
"""

from __future__ import annotations

import logging
import math
import os
import pprint
import statistics
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..errors import ConfigError
from .runner import EvalPoint, Runner, TrialResult
from .sweep import import_optuna, write_table
from .trials import Trial, TrialConfigs, load_space, space_settings

logger = logging.getLogger(__name__)

COLUMNS = ["trial", "settings", "status", "eval_return", "env_steps", "wall_s", "note"]
# objective -> (the study's direction, the value's name in the table and the messages)
OBJECTIVES = {"return": ("maximize", "eval return"), "solve-steps": ("minimize", "solve steps")}
BEST_CONFIG_NAME = "best_config.py"
TABLE_NAME = "trials.csv"
SQLITE = "sqlite:///"
STATES = {"COMPLETE": "done", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running", "WAITING": "waiting"}


class TrialFailed(Exception):
    """A trial that ended without a value (its config, its training, an interruption): Optuna records it
    FAIL and the study goes on."""


def storage_url(text: Optional[str], out_dir: str) -> str:
    """``--storage``: an SQLite URL (default ``sqlite:///OUT/study.db``)."""
    url = text or f"sqlite:///{os.path.abspath(os.path.join(out_dir, 'study.db'))}"
    if not url.startswith(SQLITE) or len(url) == len(SQLITE):
        raise ConfigError(f"--storage {url!r} is not an SQLite URL: use sqlite:///PATH/study.db")
    return url


class Tuner:
    """One study: its storage, sampler and pruner, and the objective that trains a trial through ``runner``."""

    def __init__(
        self,
        configs: TrialConfigs,
        space_path: str,
        runner: Runner,
        storage: str,
        study_name: str,
        seed: int = 0,
        startup_trials: int = 5,
        warmup_steps: int = 0,
        report_every: int = 0,
        objective: str = "return",
        seeds: Sequence[Optional[int]] = (None,),
    ):
        optuna = import_optuna()
        optuna.logging.set_verbosity(optuna.logging.ERROR)  # the table says how each trial went
        self.optuna = optuna
        self.configs = configs
        self.space_path = space_path
        self.space = load_space(space_path)
        self.runner = runner
        self.report_every = report_every
        self.objective = objective
        # one training per seed, the trial's value their median: one seed's luck (CartPole PPO's env steps to 475
        # swing 9k-14k over seeds of one setting) picks the best of 20 single-seed trials more than its settings do
        self.seeds = list(seeds) or [None]
        direction, self.value_name = OBJECTIVES[objective]
        if objective == "solve-steps" and configs.base.run.stop_value is None:
            raise ConfigError(
                "--objective solve-steps needs a stop value: the config has none (run.stop_value); set one with "
                "--set run.stop_value=V, or search with --objective return"
            )
        self.interrupted = threading.Event()
        # the space's keys, checked on a draw of its own before the study is made: an unknown one stops here
        draft = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed)).ask()
        configs.check(Trial(0, space_settings(self.space, draft, space_path)))
        os.makedirs(os.path.dirname(storage[len(SQLITE) :]) or ".", exist_ok=True)
        self.study = optuna.create_study(
            storage=storage,
            study_name=study_name,
            load_if_exists=True,
            direction=direction,
            sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials),
            pruner=(
                optuna.pruners.MedianPruner(n_startup_trials=startup_trials, n_warmup_steps=warmup_steps)
                if objective == "return" and len(self.seeds) == 1
                else optuna.pruners.NopPruner()
            ),
        )
        # an existing study keeps its own direction whatever create_study is told: a resumed study searched for
        # the other objective would rank its trials backwards
        if self.study.direction.name.lower() != direction:
            raise ConfigError(
                f"study {study_name!r} in {storage} was made to {self.study.direction.name.lower()} its value, not "
                f"to {direction} it as --objective {objective} does: resume it with its own objective, or name "
                f"another study (--study)"
            )

    def finished(self) -> int:
        """Trials that came to an outcome (done, pruned, or failed with a reason); an interrupted one does not
        count."""
        return sum(1 for t in self.study.trials if "outcome" in t.user_attrs)

    def optimize(self, total: int, parallel: int = 1, on_result: Optional[Callable[[TrialResult], None]] = None) -> int:
        """Run trials until the study has ``total`` finished ones (the earlier runs' count); returns how many
        this call ran. A key the config does not know raises ConfigError: the study stops."""
        todo = max(0, total - self.finished())
        if todo:

            def stop_when_interrupted(study, _trial) -> None:
                if self.interrupted.is_set():
                    study.stop()

            self.study.optimize(
                lambda trial: self._objective(trial, on_result),
                n_trials=todo,
                n_jobs=parallel,
                catch=(TrialFailed,),
                callbacks=[stop_when_interrupted],
            )
        return todo

    def interrupt(self) -> None:
        """Ctrl-C: stop the trainings in flight and start no more trials."""
        self.interrupted.set()
        self.runner.stop_all()

    def _objective(self, trial, on_result) -> float:
        if self.interrupted.is_set():
            raise TrialFailed("interrupted before it started")
        settings = space_settings(self.space, trial, self.space_path)
        trial.set_user_attr("settings", settings)
        reason = self.configs.check(Trial(trial.number, settings))  # an unknown key: ConfigError, the study stops
        replicas = len(self.seeds) > 1
        results: List[TrialResult] = []
        for k, seed in enumerate(self.seeds):
            spec = Trial(trial.number, settings, seed, k if replicas else None)
            if reason:
                result = TrialResult(spec, "failed", exit_code=2, note=reason)
            else:
                # the pruner reads one curve per trial: with several seeds, none
                result = self.runner.run(spec, None if replicas else self._reporter(trial))
            if result.status == "done" and math.isnan(result.eval_return):
                result.status, result.note = "failed", "no evaluation before the training ended; raise its budget"
            if on_result:
                on_result(result)
            results.append(result)
            if result.status != "done":
                break
        last = results[-1]
        trial.set_user_attr("env_steps", sum(r.env_steps or 0 for r in results))
        trial.set_user_attr(
            "note", last.note if not replicas or last.status == "done" else f"seed {last.trial.seed}: {last.note}"
        )
        if last.status != "interrupted":
            trial.set_user_attr("outcome", last.status)
        if last.status == "pruned":
            raise self.optuna.TrialPruned(last.note)
        if last.status != "done":
            raise TrialFailed(last.note)
        trial.set_user_attr("eval_return", statistics.median(r.eval_return for r in results))
        return statistics.median(self._value(r) for r in results)

    def _reporter(self, trial) -> Callable[[EvalPoint], bool]:
        """What a training reports to the pruner at each evaluation: each at its env step, or with report_every the
        newest evaluation at each multiple of it that the curve passed (the pruner compares trials at the same
        step); True: prune it."""
        reported = [-1]

        def on_eval(point: EvalPoint) -> bool:
            step = point.env_steps - point.env_steps % self.report_every if self.report_every else point.env_steps
            if step <= reported[0]:
                return False
            reported[0] = step
            trial.report(point.eval_return, step)
            return trial.should_prune()

        return on_eval

    def _value(self, result: TrialResult) -> float:
        """One training's value: its final eval return, or (solve-steps) its env steps to the stop value (exit 0
        with a stop value: solved, at its first evaluation at the stop value, a cluster run's counted when the
        evaluated policy was announced, see :func:`~parallel_rl.after.plot.eval_env_steps`; 3: the budget ran out
        first, and it ranks behind every one that solved within that budget)."""
        if self.objective == "solve-steps":
            if result.exit_code == 0:  # the first evaluation at the stop value (a cluster run's: its policy's steps)
                stop = self.configs.base.run.stop_value
                solved = [p.env_steps for p in result.curve if p.eval_return >= stop]
                return float(solved[0] if solved else result.env_steps)
            return float(2 * (result.env_steps or 0))
        return result.eval_return

    @property
    def columns(self) -> List[str]:
        """The table's columns: with the solve-steps objective, the value (``solve_steps``) before the return."""
        return COLUMNS if self.objective == "return" else [*COLUMNS[:3], "solve_steps", *COLUMNS[3:]]

    def rows(self) -> List[Dict[str, Any]]:
        """The study's table: every trial, the earlier runs' included."""
        rows = []
        for t in self.study.trials:
            last = t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else None
            if self.objective == "return":
                value = t.value if t.value is not None else last
            else:
                value = t.user_attrs.get("eval_return", last)
            duration = t.duration.total_seconds() if t.duration is not None else None
            rows.append(
                {
                    "trial": t.number,
                    "settings": Trial(t.number, t.user_attrs.get("settings", {})).label(),
                    "status": STATES.get(t.state.name, t.state.name.lower()),
                    "eval_return": value,
                    "solve_steps": t.value,
                    "env_steps": t.user_attrs.get("env_steps"),
                    "wall_s": None if duration is None else round(duration, 1),
                    "note": t.user_attrs.get("note", ""),
                }
            )
        return rows

    def best(self):
        """The best finished trial, None when none finished."""
        done = [t for t in self.study.trials if t.state.name == "COMPLETE"]
        if not done:
            return None
        return (max if self.objective == "return" else min)(done, key=lambda t: t.value)

    def write_results(self, out_dir: str) -> Optional[str]:
        """``trials.csv`` and, when a trial finished, ``best_config.py``; returns the best config's path."""
        os.makedirs(out_dir, exist_ok=True)
        write_table(os.path.join(out_dir, TABLE_NAME), self.rows(), self.columns)
        best = self.best()
        if best is None:
            return None
        return write_best_config(
            os.path.join(out_dir, BEST_CONFIG_NAME),
            self.configs,
            Trial(best.number, best.user_attrs.get("settings", {})),
            f"{self.value_name} {best.value:g}",
            self.study.study_name,
        )


def write_best_config(path: str, configs: TrialConfigs, trial: Trial, value: str, study_name: str) -> str:
    """A Python config file: the study's config (with its ``--set``) and the best trial's settings; ``value``: how
    good it was, as people read it (``eval return 500``)."""
    from ..config import apply_overrides

    config = apply_overrides(configs.raw, trial.overrides())
    text = (
        f'"""The best trial ({trial.number}, {value}) of study {study_name!r}: '
        f"{os.path.basename(configs.config_path)} with {trial.label()}.\n\n"
        f'Train it: parallel-rl {"run" if configs.cluster else "serial"} -c {path}\n"""\n'
        f'inf, nan = float("inf"), float("nan")  # as repr() writes them\n'
        f"main_config = {pprint.pformat(config, sort_dicts=False)}\n"
    )
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path
