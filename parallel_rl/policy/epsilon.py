"""Exploration schedules (torch-free: the coordinator computes epsilon for collectors)."""

from __future__ import annotations

import math
from typing import Callable

from easydict import EasyDict


def epsilon_schedule(eps_cfg: EasyDict) -> Callable[[int], float]:
    """Epsilon as a function of collected env steps (``exp`` or ``linear`` decay)."""
    start, end, decay = float(eps_cfg.start), float(eps_cfg.end), float(eps_cfg.decay)
    if eps_cfg.type == "exp":
        return lambda envstep: end + (start - end) * math.exp(-1.0 * envstep / decay)
    return lambda envstep: max(end, start - (start - end) * envstep / decay)


def exploration_schedule(policy_cfg: EasyDict) -> Callable[[int], float]:
    """The policy's epsilon schedule (``policy.other.eps``), or 0 for policies that explore by themselves."""
    eps_cfg = policy_cfg.other.get("eps")
    return epsilon_schedule(eps_cfg) if eps_cfg is not None else (lambda envstep: 0.0)
