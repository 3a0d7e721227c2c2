"""Per-lane recursions over a segment's rows (time-ordered within each ``env_id``, cut where episodes end):
GAE(lambda) advantages, the discounted returns reward normalization divides by, and the backward sum that
V-trace shares."""

from __future__ import annotations

import numpy as np


def lane_order(env_id: np.ndarray, end: np.ndarray):
    """The segment's rows sorted by env lane (time order kept within each), and for each sorted row whether it
    continues into the next sorted row (same lane, its episode not ended there)."""
    order = np.argsort(env_id, kind="stable")
    sorted_env = env_id[order]
    continues = np.zeros(len(env_id), dtype=bool)
    continues[:-1] = sorted_env[:-1] == sorted_env[1:]
    continues &= ~end[order].astype(bool)
    return order, continues


def lane_backward_sum(x: np.ndarray, factor: np.ndarray, env_id: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``y_t = x_t + factor_t * y_{t+1}`` backwards along each env lane, cut where an episode ended (``end``) and
    at each lane's last row: the recursion of GAE and of V-trace.

    The rows are laid out as a (time, lane) grid, so the loop runs over the longest lane's steps with all
    lanes at once (IMPALA's [T, B] layout) rather than over every row."""
    order, continues = lane_order(env_id, end)
    sorted_env = env_id[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = sorted_env[1:] != sorted_env[:-1]
    lane = np.cumsum(first) - 1
    step = np.arange(len(order)) - np.flatnonzero(first)[lane]
    grid_x = np.zeros((int(step.max(initial=-1)) + 1, int(lane.max(initial=-1)) + 1))
    grid_f = np.zeros_like(grid_x)  # 0 past a lane's end and where its rows do not continue
    grid_x[step, lane] = x[order]
    grid_f[step, lane] = np.where(continues, factor[order], 0.0)
    running = np.zeros(grid_x.shape[1])
    for t in range(len(grid_x) - 1, -1, -1):
        running = grid_x[t] + grid_f[t] * running
        grid_x[t] = running
    out = np.empty(len(order), dtype=np.float64)
    out[order] = grid_x[step, lane]
    return out


def gae_advantages(
    reward: np.ndarray,
    value: np.ndarray,
    next_value: np.ndarray,
    terminated: np.ndarray,
    end: np.ndarray,
    env_id: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> np.ndarray:
    """GAE(lambda) over a segment of rows, time-ordered within each ``env_id``.

    ``delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)``: a terminated episode has no
    future, a truncated one (time limit) bootstraps from ``next_value``. The recursion
    ``A_t = delta_t + gamma * lambda * A_{t+1}`` stops where the episode ended (``end``: terminated or
    truncated) and at each env's last row in the segment.
    """
    delta = reward + gamma * (1.0 - terminated.astype(np.float64)) * next_value - value
    decay = np.full(len(reward), gamma * gae_lambda)
    return lane_backward_sum(delta, decay, env_id, end).astype(np.float32)


def discounted_returns(reward: np.ndarray, end: np.ndarray, env_id: np.ndarray, gamma: float) -> np.ndarray:
    """``R_t = gamma * R_{t-1} + r_t`` per env lane, restarting after an episode's end and at each lane's
    first row in the segment: the quantity whose running std gymnasium's NormalizeReward divides by."""
    order, continues = lane_order(env_id, end)
    sorted_reward = reward[order]
    out = np.empty(len(reward), dtype=np.float64)
    running = 0.0
    for i in range(len(reward)):
        running = sorted_reward[i] + (gamma * running if i > 0 and continues[i - 1] else 0.0)
        out[i] = running
    returns = np.empty_like(out)
    returns[order] = out
    return returns
