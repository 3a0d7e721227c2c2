"""How a PBT member trains a step and what "copy the source" means: the one difference between PBT's two modes, as
an object with two implementations (:class:`SerialSteps`, :class:`PoolSteps`); the PBT loop (ranking, exploit,
explore, lineage, table: :mod:`.pbt`) is the same for both.

- :class:`SerialSteps` (no ``--service``): a member is a serial training in ``OUT/trial_NNN`` on this machine; its
  step g is ``parallel-rl serial --resume OUT/trial_NNN --set serial.max_env_step=(g+1)*T`` (the first step starts
  it fresh); exploit copies the source's saved state files over the target's
  (:func:`~parallel_rl.storage.checkpoints.copy_serial_state`).
- :class:`PoolSteps` (``--service URL``): each step of a member is a fresh run of the service's pool
  (:class:`~.pool.PoolRunner`) with ``run.max_env_step=T`` and ``parallel.learner.init_from`` = the run directory of
  the member's last step (its newest learner state: model, optimizer, the policy's own counters); exploit points the
  target's next step at the source's last run instead (nothing is copied). The run's counters start at 0 in every
  step; the member's env steps are the sum of its steps'.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set

from ..errors import ConfigError
from ..storage.checkpoints import copy_serial_state
from .runner import OnEval, ProcessRunner, Runner, TrialResult
from .trials import Trial, TrialConfigs

COLUMNS = ["member", "status", "score", "env_steps", "settings", "history", "note"]
# the budgets a step turns off: they would end a step early (a serial step's would count the earlier steps too)
BUDGETS_OFF = ("max_train_iter", "max_seconds")
INIT_FROM = "parallel.learner.init_from"


@dataclass
class Member:
    """One member of the population: its space parameters, the settings they give, and how it went."""

    number: int
    params: Dict[str, Any]
    settings: Dict[str, Any]
    seed: Optional[int] = None
    status: str = "training"  # training, then done, failed or interrupted
    score: float = math.nan  # its latest evaluation return
    env_steps: Optional[int] = None
    exp_dir: str = ""  # where its state is: its serial run's directory, or (pool) its last step's run directory
    note: str = ""
    history: List[str] = field(default_factory=list)
    runs: List[str] = field(default_factory=list)  # pool: the run id of each of its steps

    def label(self) -> str:
        return Trial(self.number, self.settings).label()

    def row(self) -> Dict[str, object]:
        return {
            "member": self.number,
            "status": self.status,
            "score": self.score,
            "env_steps": self.env_steps,
            "settings": self.label(),
            "history": " | ".join(self.history),
            "note": self.note,
            "runs": " ".join(self.runs),
        }


class MemberRunner(ProcessRunner):
    """The lab's process runner for PBT's serial members: a member's steps after its first resume its experiment
    directory (``serial --resume``), with the step's budget and its current settings."""

    def __init__(self, config_path: str, overrides: Sequence[str], out_dir: str):
        super().__init__(config_path, overrides, out_dir, cluster=False)
        self.resuming: Set[int] = set()

    def command(self, trial: Trial, exp_dir: str) -> List[str]:
        cmd = super().command(trial, exp_dir)
        return cmd + ["--resume", exp_dir] if trial.number in self.resuming else cmd


class SerialSteps:
    """Members as serial trainings in local processes, each step resuming the member's directory."""

    columns = COLUMNS

    def __init__(self, config_path: str, overrides: Sequence[str], out_dir: str):
        self.runner = MemberRunner(config_path, overrides, out_dir)

    def check(self, configs: TrialConfigs) -> None:
        if configs.cluster:
            raise ConfigError(
                f"pbt: {configs.config_path} is a cluster config (it has a parallel section); without --service PBT "
                f"trains serial configs (each member a `parallel-rl serial` run): pass a serial config, or train "
                f"the members on a service's pool with --service URL"
            )

    def trial(self, member: Member, step_budget: int, total_budget: int, generation: int) -> Trial:
        """Step ``generation``: the member's run resumed, to ``total_budget`` env steps in all."""
        budget = {"serial.max_env_step": total_budget, **{f"serial.{key}": 0 for key in BUDGETS_OFF}}
        return Trial(member.number, {**member.settings, **budget}, member.seed)

    def run(self, trial: Trial, on_eval: Optional[OnEval] = None) -> TrialResult:
        return self.runner.run(trial, on_eval)

    def ran(self, member: Member, result: TrialResult) -> None:
        member.exp_dir, member.env_steps = result.exp_dir, result.env_steps
        if result.status == "done":
            self.runner.resuming.add(member.number)

    def copy(self, source: Member, target: Member) -> None:
        """Exploit: the source's saved state files over the target's (no member runs now)."""
        copy_serial_state(source.exp_dir, target.exp_dir)

    def stop_all(self) -> None:
        self.runner.stop_all()


class PoolSteps:
    """Members as runs of a service's pool: each step a fresh run started from a checkpoint."""

    columns = COLUMNS + ["runs"]

    def __init__(self, runner: Runner):
        self.runner = runner

    def check(self, configs: TrialConfigs) -> None:
        if not configs.cluster:
            raise ConfigError(
                f"pbt --service: {configs.config_path} is a serial config; the service trains cluster configs "
                f"(with a parallel section), e.g. configs/cartpole_ppo_parallel.py"
            )

    def trial(self, member: Member, step_budget: int, total_budget: int, generation: int) -> Trial:
        """Step ``generation``: a run of ``step_budget`` env steps from the member's last run (none: fresh)."""
        settings = {**member.settings, "run.max_env_step": step_budget, **{f"run.{key}": 0 for key in BUDGETS_OFF}}
        if member.exp_dir:
            settings[INIT_FROM] = member.exp_dir
        return Trial(member.number, settings, member.seed, replica=generation)

    def run(self, trial: Trial, on_eval: Optional[OnEval] = None) -> TrialResult:
        return self.runner.run(trial, on_eval)

    def ran(self, member: Member, result: TrialResult) -> None:
        member.runs.append(os.path.basename(result.exp_dir) if result.exp_dir else "-")
        if result.env_steps is not None:
            member.env_steps = (member.env_steps or 0) + result.env_steps
        if result.status == "done":  # its next step starts from this run's newest learner state
            member.exp_dir = result.exp_dir

    def copy(self, source: Member, target: Member) -> None:
        """Exploit: the target's next step starts from the source's last run (its newest learner state)."""
        target.exp_dir = source.exp_dir

    def stop_all(self) -> None:
        self.runner.stop_all()
