"""``parallel-rl pbt``: population-based training (Jaderberg et al. 2017, "Population Based Training of Neural
Networks") over one config.

A population of K members trains the config, each with hyperparameters drawn from the search space file (the
``space(trial)`` of ``sweep --random`` and ``tune``). Members train in steps of T env steps. After each step the
members are ranked by their latest evaluation return; each member in the bottom quantile whose score is below
that of a member drawn from the top quantile copies that member's whole saved state (model, optimizer, counters,
best checkpoint) and hyperparameters (*exploit*), then perturbs each hyperparameter (*explore*: multiplied by one
of the ``--perturb`` factors, or with ``--resample-probability`` drawn again from the space; a categorical one is
only redrawn; clipped to the space's range and the config key's), and every member continues from where it is.

How: a member's step is trained by a member-steps object (:mod:`.members`): without ``--service`` a serial
training in ``OUT/trial_NNN`` resumed every step and exploit copies the source's saved state files
(:class:`~.members.SerialSteps`); with ``--service URL`` each step is a fresh run of the service's pool started from
the member's last run's learner state (``parallel.learner.init_from``) and exploit points the target at the
source's last run (:class:`~.members.PoolSteps`). Exploit happens while no member runs.

Records: every exploit and explore goes to ``OUT/pbt.jsonl`` (one JSON object a line: ``start`` per member, ``step``
per generation with the scores, ``exploit`` per copy with the generation, member, source, scores, old and new
settings and how each parameter moved, ``explore_failed`` when the explored settings cannot run and the member keeps
its own); the final table (member, status, final score, env steps, settings, hyperparameter history, note) is
printed and written to ``OUT/pbt.csv`` (pool: with the run id of each step, also in each ``step`` line). A serial
member's directory is a run that ``parallel-rl plot`` and ``parallel-rl compare`` read (its curve jumps where it
copied another member); a pool member's steps are runs of the service, each with its own curve from env step 0.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import ConfigError
from .members import Member, PoolSteps, SerialSteps
from .runner import TrialResult
from .sweep import import_optuna, write_table
from .trials import Trial, TrialConfigs, load_space, space_settings

logger = logging.getLogger(__name__)

LINEAGE_NAME = "pbt.jsonl"
TABLE_NAME = "pbt.csv"
MAX_QUANTILE = 0.5  # the bottom and the top quantile must not overlap
MAX_POPULATION = 1000
BUDGET_KEY = "run.max_env_step"  # the config's budget: how long each member trains, when no option says


@dataclass(frozen=True)
class PbtOptions:
    """The schedule: ``population`` members, exploit/explore every ``interval`` env steps for ``generations``
    steps (the last one ends at ``max_env_step``), ``quantile`` at each end of the ranking, explore's ``perturb``
    factors and ``resample_probability``, and the seed of PBT's own draws."""

    population: int
    interval: int
    generations: int
    max_env_step: int
    quantile: float = 0.25
    perturb: Tuple[float, ...] = (0.8, 1.2)
    resample_probability: float = 0.25
    seed: int = 0

    def budget(self, generation: int) -> int:
        """The env steps every member has trained at the end of step ``generation`` (0-based)."""
        return min((generation + 1) * self.interval, self.max_env_step)

    def step_budget(self, generation: int) -> int:
        """The env steps step ``generation`` trains (the last one may be shorter)."""
        return self.budget(generation) - (self.budget(generation - 1) if generation else 0)


def parse_options(
    population: int,
    interval: int,
    quantile: float = 0.25,
    perturb: str = "0.8,1.2",
    resample_probability: float = 0.25,
    generations: Optional[int] = None,
    max_env_step: Optional[int] = None,
    config_max_env_step: int = 0,
    seed: int = 0,
) -> PbtOptions:
    """The command's options, checked: ConfigError in one line naming the bad one (exit 2, nothing runs)."""
    if not 2 <= population <= MAX_POPULATION:
        raise ConfigError(
            f"--population {population}: a population needs 2 to {MAX_POPULATION} members (the bottom ones copy "
            f"the top ones); e.g. --population 4"
        )
    if interval <= 0:
        raise ConfigError(f"--interval {interval}: members train this many env steps between exploits; give > 0")
    if not (isinstance(quantile, float) and 0 < quantile <= MAX_QUANTILE):
        raise ConfigError(
            f"--quantile {quantile}: give a fraction in (0, {MAX_QUANTILE}] (the bottom and top quantiles of the "
            f"ranking must not overlap); e.g. --quantile 0.25"
        )
    try:
        factors = tuple(float(part) for part in perturb.split(","))
        if not factors or not all(math.isfinite(f) and f > 0 for f in factors):
            raise ValueError
    except ValueError:
        raise ConfigError(
            f"--perturb {perturb!r}: give positive factors separated by commas, e.g. --perturb 0.8,1.2"
        ) from None
    if not 0 <= resample_probability <= 1:
        raise ConfigError(f"--resample-probability {resample_probability}: give a probability in [0, 1]")
    if generations is not None and max_env_step is not None:
        raise ConfigError("pbt: give --generations G or --max-env-step N, not both")
    if generations is not None:
        if generations < 1:
            raise ConfigError(f"--generations {generations}: give >= 1")
        total = generations * interval
    elif max_env_step is not None and max_env_step <= 0:
        raise ConfigError(f"--max-env-step {max_env_step}: give the env steps each member trains, > 0")
    else:
        total = max_env_step if max_env_step is not None else config_max_env_step
        if total <= 0:
            raise ConfigError(
                f"pbt: how long the population trains is not set: give --generations G or --max-env-step N "
                f"(or {BUDGET_KEY} in the config)"
            )
    return PbtOptions(population, interval, -(-total // interval), total, quantile, factors, resample_probability, seed)


class SearchSpace:
    """The space file's parameters (its ``trial.suggest_*`` names): the population's first draws (Optuna's
    random sampler), the settings a set of parameters gives, and explore's perturbation of them."""

    def __init__(self, path: str, seed: int):
        self.optuna = import_optuna()
        self.path = path
        self.fn = load_space(path)
        self.study = self.optuna.create_study(sampler=self.optuna.samplers.RandomSampler(seed=seed))
        self.distributions: Dict[str, Any] = {}

    def draw(self) -> Dict[str, Any]:
        """One draw of the space's parameters."""
        trial = self.study.ask()
        space_settings(self.fn, trial, self.path)
        self.distributions.update(trial.distributions)
        return dict(trial.params)

    def settings(self, params: Dict[str, Any]) -> Dict[str, Any]:
        """The dotted config keys and values ``space(trial)`` gives for these parameters; ConfigError when the
        space asks for a parameter not among them (a space whose parameters depend on others' values)."""
        return space_settings(self.fn, self.optuna.trial.FixedTrial(params), self.path)

    def explore(
        self,
        params: Dict[str, Any],
        rng: random.Random,
        factors: Sequence[float],
        resample_probability: float,
        policy_type: str,
    ) -> Tuple[Dict[str, Any], Dict[str, str]]:
        """(new parameters, how each moved: ``x0.8``, ``resampled``, ``kept``): each numeric parameter multiplied
        by a factor drawn from ``factors``, or with ``resample_probability`` drawn again from the space (a
        categorical one: redrawn with that probability, else kept); then clipped to the space's range (and step)
        and to the range of every config key the space sets to it."""
        ranges = self._key_ranges(params, policy_type)
        new, how = dict(params), {}
        for name, value in params.items():
            dist = self.distributions[name]
            categorical = isinstance(dist, self.optuna.distributions.CategoricalDistribution)
            if rng.random() < resample_probability:
                new[name], how[name] = self._resample(dist, rng, ranges.get(name, ())), "resampled"
                continue
            if categorical:
                how[name] = "kept"
                continue
            factor = rng.choice(list(factors))
            new[name], how[name] = self._clip(dist, value * factor, ranges.get(name, ())), f"x{factor:g}"
        return new, how

    def _key_ranges(self, params: Dict[str, Any], policy_type: str) -> Dict[str, List[Dict[str, Any]]]:
        """For each numeric parameter, the ranges of the config keys the space sets to it: the keys whose value is
        the parameter's, found by asking the space again with the parameter at another end of its range."""
        from ..config.assembly import key_range

        settings = self.settings(params)
        ranges: Dict[str, List[Dict[str, Any]]] = {}
        for name, value in params.items():
            dist = self.distributions[name]
            if isinstance(dist, self.optuna.distributions.CategoricalDistribution) or not _number(value):
                continue
            probe = dist.high if value != dist.high else dist.low
            moved = self.settings({**params, name: probe})
            ranges[name] = [
                key_range(key, policy_type)
                for key, setting in settings.items()
                if _number(setting) and setting == value and moved.get(key) == probe
            ]
        return ranges

    def _clip(self, dist, value: float, ranges: Sequence[Dict[str, Any]]) -> Any:
        integer = isinstance(dist, self.optuna.distributions.IntDistribution)
        value = min(max(value, dist.low), dist.high)
        if dist.step:
            value = dist.low + round((value - dist.low) / dist.step) * dist.step
            value = min(value, dist.high)
        if integer:
            value = int(round(value))
        for bounds in ranges:  # the config's range last: a value it refuses would fail the member
            value = _clip_to(value, bounds, integer)
        return value

    def _resample(self, dist, rng: random.Random, ranges: Sequence[Dict[str, Any]]) -> Any:
        distributions = self.optuna.distributions
        if isinstance(dist, distributions.CategoricalDistribution):
            return rng.choice(list(dist.choices))
        if dist.log:
            value = math.exp(rng.uniform(math.log(dist.low), math.log(dist.high)))
        else:
            value = rng.uniform(dist.low, dist.high)
        return self._clip(dist, value, ranges)


def _json_score(score: float) -> Optional[float]:
    """A score as the lineage writes it: null for none (JSON has no NaN)."""
    return score if math.isfinite(score) else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _clip_to(value: Any, bounds: Dict[str, Any], integer: bool) -> Any:
    """``value`` inside a config key's range (``lo``/``hi`` inclusive, ``above``/``below`` exclusive)."""
    if bounds.get("lo") is not None:
        value = max(value, math.ceil(bounds["lo"]) if integer else float(bounds["lo"]))
    if bounds.get("hi") is not None:
        value = min(value, math.floor(bounds["hi"]) if integer else float(bounds["hi"]))
    if bounds.get("above") is not None and value <= bounds["above"]:
        value = math.floor(bounds["above"]) + 1 if integer else math.nextafter(bounds["above"], math.inf)
    if bounds.get("below") is not None and value >= bounds["below"]:
        value = math.ceil(bounds["below"]) - 1 if integer else math.nextafter(bounds["below"], -math.inf)
    return value


class PopulationTraining:
    """One PBT run: the population, its steps through ``steps`` (:mod:`.members`: serial processes or the
    service's pool), exploit and explore between them, and the lineage and table in ``out_dir``."""

    def __init__(
        self,
        configs: TrialConfigs,
        space: SearchSpace,
        steps: Union[SerialSteps, PoolSteps],
        options: PbtOptions,
        out_dir: str,
        parallel: int = 1,
        on_event: Optional[Callable[[str], None]] = None,
    ):
        steps.check(configs)
        self.configs, self.space, self.steps, self.options = configs, space, steps, options
        self.out_dir, self.parallel = out_dir, parallel
        self.on_event = on_event or (lambda line: None)
        self.rng = random.Random(options.seed)
        self.interrupted = threading.Event()
        self.lineage_path = os.path.join(out_dir, LINEAGE_NAME)
        self.policy_type = configs.base.policy.type
        base_seed = configs.base.get("seed")
        self.members = []
        for number in range(options.population):
            params = space.draw()
            seed = None if base_seed is None else int(base_seed) + number  # members differ in seed too
            self.members.append(Member(number, params, space.settings(params), seed))
        for member in self.members:  # a key the config does not know: ConfigError, nothing runs
            reason = configs.check(self._trial(member, 0))
            if reason:
                member.status, member.note = "failed", reason

    def _trial(self, member: Member, generation: int) -> Trial:
        options = self.options
        return self.steps.trial(member, options.step_budget(generation), options.budget(generation), generation)

    def record(self, event: Dict[str, Any]) -> None:
        """One line of the lineage (appended whole, flushed)."""
        with open(self.lineage_path, "a") as f:
            f.write(json.dumps(event, default=str) + "\n")

    def interrupt(self) -> None:
        """Ctrl-C: stop the members in flight, start no more steps."""
        self.interrupted.set()
        self.steps.stop_all()

    def run(self) -> List[Member]:
        os.makedirs(self.out_dir, exist_ok=True)
        for member in self.members:
            member.history.append(f"0: {member.label()}")
            self.record(
                {
                    "event": "start",
                    "member": member.number,
                    "params": member.params,
                    "settings": member.settings,
                    "seed": member.seed,
                    "status": member.status,
                    "note": member.note,
                }
            )
        for generation in range(self.options.generations):
            live = [m for m in self.members if m.status == "training"]
            if not live or self.interrupted.is_set():
                break
            self._step(generation, live)
            if self.interrupted.is_set():
                break
            if generation + 1 < self.options.generations:
                self._exploit_and_explore(generation)
        for member in self.members:
            if member.status == "training":
                member.status = "interrupted" if self.interrupted.is_set() else "done"
        self.write_table()
        return self.members

    def _step(self, generation: int, live: List[Member]) -> None:
        budget = self.options.budget(generation)
        self.on_event(f"pbt: generation {generation}: {len(live)} member(s) train to env step {budget}")

        def run_one(member: Member) -> TrialResult:
            return self.steps.run(self._trial(member, generation))

        with ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="pbt-member") as pool:
            results = list(pool.map(run_one, live))
        for member, result in zip(live, results):
            self.steps.ran(member, result)
            if not math.isnan(result.eval_return):
                member.score = result.eval_return
            if result.status != "done":
                member.status, member.note = result.status, result.note
            self.on_event(
                f"pbt: generation {generation}: member {member.number} {result.status}: eval_return="
                f"{member.score:.4g} env_steps={member.env_steps}" + (f" ({result.note})" if result.note else "")
            )
        runs = {str(m.number): m.runs[-1] for m in live if m.runs}  # pool: each member's run of this step
        self.record(
            {
                "event": "step",
                "generation": generation,
                "env_steps": budget,
                "scores": {str(m.number): _json_score(m.score) for m in live},
                "status": {str(m.number): m.status for m in live},
                **({"runs": runs} if runs else {}),
            }
        )

    def _exploit_and_explore(self, generation: int) -> None:
        """Truncation selection: each member of the bottom quantile copies a member drawn from the top one (when
        that one scored higher), then perturbs the copied hyperparameters."""
        ranked = sorted(
            (m for m in self.members if m.status == "training" and math.isfinite(m.score)),
            key=lambda m: (-m.score, m.number),
        )
        if len(ranked) < 2:
            logger.info("pbt: generation %d: fewer than 2 members with a score; no exploit", generation)
            return
        count = max(1, int(len(ranked) * self.options.quantile))
        top, bottom = ranked[:count], ranked[-count:]
        for target in reversed(bottom):
            source = self.rng.choice(top)
            if source.score <= target.score:
                continue
            try:  # a space whose parameters depend on others' values may not take the explored ones
                params, how = self.space.explore(
                    source.params, self.rng, self.options.perturb, self.options.resample_probability, self.policy_type
                )
                settings = self.space.settings(params)
                # clipped to the config's ranges: only a relation between keys can refuse the explored settings
                reason = self.configs.check(
                    self._trial(Member(target.number, params, settings, target.seed), generation + 1)
                )
            except ConfigError as exc:
                reason = f"explore failed: {exc}"
            if reason:
                self._keep(target, source, generation, reason)
                continue
            self.steps.copy(source, target)
            old_settings, old_score = target.settings, target.score
            target.params, target.settings, target.score = params, settings, source.score
            target.history.append(f"{generation + 1}: from {source.number}: {target.label()}")
            self.record(
                {
                    "event": "exploit",
                    "generation": generation,
                    "env_steps": self.options.budget(generation),
                    "member": target.number,
                    "copied_from": source.number,
                    "source_dir": source.exp_dir,  # where the target's next step starts from
                    "score": _json_score(old_score),
                    "source_score": _json_score(source.score),
                    "old_settings": old_settings,
                    "source_settings": source.settings,
                    "new_settings": target.settings,
                    "source_params": source.params,
                    "new_params": params,
                    "perturbation": how,
                }
            )
            self.on_event(
                f"pbt: generation {generation}: member {target.number} (eval_return {old_score:.4g}) copies member "
                f"{source.number} ({source.score:.4g}) and explores: {target.label()}"
            )

    def _keep(self, target: Member, source: Member, generation: int, reason: str) -> None:
        """No exploit for ``target`` this time (it keeps its own state and settings): recorded, said."""
        self.record(
            {
                "event": "explore_failed",
                "generation": generation,
                "member": target.number,
                "copied_from": source.number,
                "reason": reason,
            }
        )
        self.on_event(f"pbt: generation {generation}: member {target.number} keeps its own state: {reason}")

    def rows(self) -> List[Dict[str, object]]:
        return [member.row() for member in self.members]

    def write_table(self) -> str:
        return write_table(os.path.join(self.out_dir, TABLE_NAME), self.rows(), self.columns)

    @property
    def columns(self) -> List[str]:
        return list(self.steps.columns)
