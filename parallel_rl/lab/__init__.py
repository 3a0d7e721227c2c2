"""A lab's experiments over one config: seeds and sweeps (``parallel-rl sweep``), Optuna search
(``parallel-rl tune``) and population-based training (``parallel-rl pbt``, :mod:`.pbt`). Trials run through a
:class:`~.runner.Runner`: today each trial is its own training process on this machine
(:class:`~.runner.ProcessRunner`); the service's pool of workers (issue #44) replaces it behind the same two
methods."""

from .runner import EvalPoint, ProcessRunner, Runner, TrialResult
from .trials import Trial, TrialConfigs

__all__ = ["EvalPoint", "ProcessRunner", "Runner", "Trial", "TrialConfigs", "TrialResult"]
