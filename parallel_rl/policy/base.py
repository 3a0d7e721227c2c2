"""What every policy shares: its three modes (DI-engine's learn / collect / eval) and its data flow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

from ..data.flows import REPLAY, DataFlow
from ..errors import ConfigError
from .nets import cpu_state_dict


@dataclass(frozen=True)
class PolicyMode:
    """One mode of a policy (DI-engine's ``learn_mode`` / ``collect_mode`` / ``eval_mode``)."""

    forward: Callable
    state_dict: Callable
    load_state_dict: Callable
    # a policy with memory: ``initial_state(n)`` gives n lanes' state at an episode's start (a dict of float32
    # arrays); collectors and evaluators then carry it (policy/memory.py). None: feed-forward
    initial_state: Optional[Callable] = None


class Policy:
    """Subclasses define ``forward_learn / forward_collect / forward_eval``, ``state_dict`` (everything to
    resume learning) and ``model_state_dict`` (what collectors and evaluators load, CPU tensors; by default
    the acting network ``self.model``)."""

    # the data flow collectors, pipelines and the coordinator ask for (parallel_rl.data.flows): off-policy
    # data goes through the replay buffer; on-policy data is used once, as whole segments
    flow: DataFlow = REPLAY

    @property
    def on_policy(self) -> bool:
        """DI-engine's name for ``flow.on_policy``."""
        return self.flow.on_policy

    @property
    def learn_mode(self) -> PolicyMode:
        return PolicyMode(self.forward_learn, self.state_dict, self.load_state_dict)

    @property
    def collect_mode(self) -> PolicyMode:
        return PolicyMode(self.forward_collect, self.model_state_dict, self.load_model_state_dict, self.initial_state)

    @property
    def eval_mode(self) -> PolicyMode:
        return PolicyMode(self.forward_eval, self.model_state_dict, self.load_model_state_dict, self.initial_state)

    def initial_state(self, n: int) -> Optional[Dict]:
        """``n`` lanes' recurrent state at an episode's start; None: the policy has no memory (feed-forward).
        A policy with memory takes ``state=`` in ``forward_collect`` / ``forward_eval`` and returns a dict output
        with the lanes' ``next_state`` (see :mod:`parallel_rl.policy.memory`)."""
        return None

    def model_state_dict(self) -> Dict:
        return {"model": cpu_state_dict(self.model)}

    def load_model_state_dict(self, state: Dict) -> None:
        self.model.load_state_dict(state["model"])


def checkpoint_parts(state: Any, source: str) -> Tuple[Dict, bool]:
    """(state, whole) of a checkpoint file's contents: a learner's whole state (``{"policy": ..., "train_iter"}``: a
    serial run's ``ckpt/*.pt``, a cluster's ``learner/learner_*.pt``; ``whole``: the policy's ``state_dict``, the
    optimizer's included), else the acting networks a policy checkpoint holds (``model_state_dict``)."""
    if not isinstance(state, dict):
        raise ConfigError(f"{source}: not a policy checkpoint (a {type(state).__name__})")
    if isinstance(state.get("policy"), dict):
        return state["policy"], True
    return state, False


def load_checkpoint(policy: Policy, state: Dict, whole: bool, source: str, fits: str, fix: str) -> None:
    """Load a checkpoint's ``state`` into ``policy`` (``whole``: its ``load_state_dict``, else the acting networks');
    ConfigError in one line naming ``source`` when it was trained with another algorithm or env (``fits``: what
    it should fit, e.g. ``policy.type='ppo' on env 'CartPole-v1'``; ``fix``: how to fix that)."""
    try:
        # the networks this policy saves must all be there (a policy's loader skips names it does not find)
        missing = sorted(set(policy.state_dict() if whole else policy.model_state_dict()) - set(state))
        if missing:
            raise KeyError(f"no {', '.join(missing)} in it (it has {', '.join(sorted(map(str, state)))})")
        (policy.load_state_dict if whole else policy.load_model_state_dict)(state)
    except (KeyError, RuntimeError, ValueError, TypeError) as exc:
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        first = str(text).strip().splitlines()[0] if str(text).strip() else type(exc).__name__
        raise ConfigError(f"{source} does not fit {fits} ({type(exc).__name__}: {first[:200]}); {fix}") from None
