"""The recurrent state a collector or an evaluator carries for each env lane (policies with memory).

A policy with memory says so with its modes' ``initial_state(n)`` (a dict of float32 arrays, one row per
lane: ``hidden_h``, ``hidden_c`` for an LSTM core; see :mod:`parallel_rl.policy.nets`). The loop then calls
``forward(obs, state=state, ...)``; the policy returns its usual output with the lanes' next state under
``"next_state"`` (a dict output: ``{"action", ..., "next_state"}``). Feed-forward policies have no
``initial_state`` (or return None) and are called as they always were.

The state is zeroed where an episode ended (terminated or truncated) and where a step was an auto-reset
(gymnasium's next-step auto-reset: the row carries no transition, the lane's next observation is a first
one), so every episode starts from zeros and nothing else resets it: a collect call, a chunk or a new policy
version carries on where the last one stopped. Collectors store the state each row was acted with as that
row's columns (``hidden_h``, ``hidden_c``): a learner can start a sequence at any row.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import numpy as np

State = Dict[str, np.ndarray]


class LaneMemory:
    """The state of ``num_envs`` lanes for a policy mode with memory."""

    def __init__(self, initial: Callable[[int], State], num_envs: int):
        self._initial = initial
        self._zero = initial(1)
        self.state: State = initial(num_envs)

    @classmethod
    def of(cls, policy: Any, num_envs: int) -> Optional["LaneMemory"]:
        """The memory of ``policy`` (a mode) over ``num_envs`` lanes; None for a policy without one."""
        initial = getattr(policy, "initial_state", None)
        if initial is None or initial(1) is None:
            return None
        return cls(initial, num_envs)

    def advance(self, output: Any, step) -> None:
        """Take the lanes' next state from a policy's ``output`` (a random policy's output has none: the state
        stays), then zero the lanes whose episode ended or that were auto-reset in ``step``."""
        if isinstance(output, dict) and "next_state" in output:
            self.state = {k: np.array(v, dtype=np.float32) for k, v in output["next_state"].items()}
        fresh = step.terminated | step.truncated | ~step.valid
        if fresh.any():
            for key, value in self.state.items():
                value[fresh] = self._zero[key][0]

    def reset(self) -> None:
        """Every lane back to its initial state (the envs were reset)."""
        self.state = self._initial(len(next(iter(self.state.values()))))


def strip_state(output: Any) -> Any:
    """A policy's output without its ``next_state`` (what the loop records and acts on)."""
    if isinstance(output, dict) and "next_state" in output:
        output = {k: v for k, v in output.items() if k != "next_state"}
        if set(output) == {"action"}:
            return output["action"]
    return output
