"""N-step transitions from raw vector steps, in bulk (the collectors' hot loop appends; ``build`` computes)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..data.columns import Columns


def action_column(action: np.ndarray) -> np.ndarray:
    """Actions as stored: int64 for discrete actions, float32 for continuous ones."""
    if np.issubdtype(action.dtype, np.integer):
        return action.astype(np.int64, copy=False)
    return action.astype(np.float32, copy=False)


class NStepBuilder:
    """Turns raw vector steps into n-step transitions, in bulk.

    The hot loop only appends each step's arrays to lists; ``build()`` then
    computes every transition whose window is complete (n steps seen, or the
    episode ended) with a few vectorized passes, and keeps the steps that
    incomplete windows still need for the next call. The battle collectors
    feed it one player's own moves (one lane per game) through ``add_row``.
    """

    FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "done", "valid", "pending")

    def __init__(self, nstep: int, gamma: float):
        self.n, self.gamma = nstep, gamma
        self.steps = {f: [] for f in self.FIELDS}
        self.pending = 0  # valid rows whose transition is not built yet

    def clear(self) -> None:
        self.steps = {f: [] for f in self.FIELDS}
        self.pending = 0

    def enough_after(self, missing: int, lanes: int):
        """Whether ``steps`` more valid steps make ``missing`` rows certain: at most ``n - 1`` rows per lane are
        incomplete, so ``missing + (n - 1) * lanes - pending`` steps suffice."""
        need = missing + (self.n - 1) * lanes - self.pending
        return lambda steps: steps >= need

    def add(self, obs: np.ndarray, action: np.ndarray, step, extra: Optional[Columns] = None) -> None:
        s = self.steps
        if extra is not None:  # on-policy columns (logp, value, ...), kept as "x:<name>"
            for key, value in extra.items():
                s.setdefault("x:" + key, []).append(value)
        s["obs"].append(obs)
        s["action"].append(action)
        s["reward"].append(step.reward)
        s["next_obs"].append(step.obs)
        s["terminated"].append(step.terminated)
        s["done"].append(step.terminated | step.truncated)
        s["valid"].append(step.valid)
        s["pending"].append(step.valid)

    def add_row(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        extra: Optional[Columns] = None,
        after: Optional[Columns] = None,
    ) -> None:
        """One step from plain arrays (leading axis: the lanes); ``after`` columns describe ``next_obs``
        (e.g. its action mask) and are taken from a transition's last step."""
        s = self.steps
        if extra is not None:  # on-policy columns, as in add()
            for key, value in extra.items():
                s.setdefault("x:" + key, []).append(value)
        if after is not None:
            for key, value in after.items():
                s.setdefault("n:" + key, []).append(value)
        valid = np.ones(len(obs), dtype=bool)
        s["obs"].append(obs)
        s["action"].append(action)
        s["reward"].append(reward)
        s["next_obs"].append(next_obs)
        s["terminated"].append(terminated)
        s["done"].append(terminated | truncated)
        s["valid"].append(valid)
        s["pending"].append(valid)

    def build(self, collect_iter: int) -> Columns:
        """All transitions that are complete now, time-major, as columns."""
        if not self.steps["obs"]:
            return {}
        arr = {f: np.array(v) for f, v in self.steps.items()}  # (T, E, ...); np.array beats np.stack 3x here
        T = arr["obs"].shape[0]
        pending = arr["pending"]
        ret = np.zeros(pending.shape, dtype=np.float64)
        k = np.zeros(pending.shape, dtype=np.int64)
        ended = np.zeros(pending.shape, dtype=bool)
        open_ = pending.copy()  # window still open at offset j
        for j in range(min(self.n, T)):
            rows = T - j  # rows t whose step t+j exists
            add = open_[:rows]
            ret[:rows] += np.where(add, arr["reward"][j:], 0.0) * self.gamma**j
            k[:rows] += add
            ends = add & arr["done"][j:]
            ended[:rows] |= ends
            open_[:rows] = add & ~arr["done"][j:]
            open_[rows:] = False
        complete = pending & (ended | (k == self.n))
        t_idx, e_idx = np.nonzero(complete)
        last = t_idx + k[t_idx, e_idx] - 1
        out = {
            "obs": arr["obs"][t_idx, e_idx],
            "action": action_column(arr["action"][t_idx, e_idx]),
            "reward": ret[t_idx, e_idx].astype(np.float32),
            "next_obs": arr["next_obs"][last, e_idx],
            "done": arr["terminated"][last, e_idx],
            "discount": (self.gamma ** k[t_idx, e_idx]).astype(np.float32),
            "collect_iter": np.full(len(t_idx), collect_iter, dtype=np.int64),
        }
        for f in arr:
            if f.startswith("n:"):  # describes next_obs: from the last step
                out[f[2:]] = arr[f][last, e_idx]
        extras = [f for f in arr if f.startswith("x:")]
        if extras:
            for f in extras:
                value = arr[f][t_idx, e_idx]
                out[f[2:]] = value if value.dtype == bool else value.astype(np.float32)  # masks stay masks
            out["env_id"] = e_idx.astype(np.int64)
            out["end"] = arr["done"][last, e_idx]
        # keep the steps from the first incomplete window on
        still = pending & ~complete
        first = int(np.argmax(still.any(axis=1))) if still.any() else T
        self.steps = {f: list(arr[f][first:]) for f in arr}
        self.steps["pending"] = list(still[first:])
        self.pending = int(still.sum())
        return out
