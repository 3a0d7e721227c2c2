"""V-trace (Espeholt et al. 2018, IMPALA, section 4): off-policy value targets and policy-gradient advantages.

Rows are flat columns in the on-policy layout (:mod:`.ppo`): time-ordered within each ``env_id`` lane, with
``end`` (the episode ended there: terminated or truncated) and ``terminated``. With the importance ratio
``pi(a_t | x_t) / mu(a_t | x_t)`` of the learner's policy ``pi`` over the behaviour policy ``mu`` that acted,

- ``rho_t = min(rho_bar, ratio_t)``, ``c_t = lambda * min(c_bar, ratio_t)`` (truncated importance weights),
- ``delta_t = rho_t * (r_t + gamma * V(x_{t+1}) - V(x_t))``,
- ``v_s = V(x_s) + sum_{t >= s} gamma^(t-s) * (prod_{s <= i < t} c_i) * delta_t``, computed backwards as
  ``v_s - V(x_s) = delta_s + gamma * c_s * (v_{s+1} - V(x_{s+1}))``,
- the policy-gradient advantage ``rho_s * (r_s + gamma * v_{s+1} - V(x_s))``.

``V(x_{t+1})`` is the critic's value of the row's ``next_obs`` (``next_value``); a terminated episode has
none (0), a truncated one and a lane's last row in the segment bootstrap from it (``v_{s+1} = V(x_{s+1})``:
nothing is known past it). The sums stop at every episode end. Targets carry no gradient: numpy.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .returns import lane_backward_sum, lane_order


class VTrace(NamedTuple):
    vs: np.ndarray  # the value targets v_s
    pg_advantage: np.ndarray  # rho_s * (r_s + gamma * v_{s+1} - V(x_s))
    rho: np.ndarray  # the truncated importance weights rho_s


def vtrace(
    behaviour_logp: np.ndarray,
    target_logp: np.ndarray,
    reward: np.ndarray,
    value: np.ndarray,
    next_value: np.ndarray,
    terminated: np.ndarray,
    end: np.ndarray,
    env_id: np.ndarray,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    lam: float = 1.0,
) -> VTrace:
    """V-trace targets and advantages of a segment of rows (float64); ``lam`` is the paper's lambda in ``c_t``."""
    ratio = np.exp(np.asarray(target_logp, np.float64) - np.asarray(behaviour_logp, np.float64))
    rho = np.minimum(rho_bar, ratio)
    c = lam * np.minimum(c_bar, ratio)
    value = np.asarray(value, np.float64)
    future = gamma * (1.0 - np.asarray(terminated, np.float64))  # discount of the next state's value
    delta = rho * (reward + future * next_value - value)
    vs_minus_v = lane_backward_sum(delta, gamma * c, env_id, end)
    # v_{s+1}: the next row's target where the lane continues, the bootstrap V(x_{s+1}) where it does not
    order, continues = lane_order(env_id, end)
    correction = np.zeros(len(reward))
    correction[order[:-1][continues[:-1]]] = vs_minus_v[order[1:][continues[:-1]]]
    pg_advantage = rho * (reward + future * (next_value + correction) - value)
    return VTrace(value + vs_minus_v, pg_advantage, rho)
