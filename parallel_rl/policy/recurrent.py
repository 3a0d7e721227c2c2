"""Learning with a recurrent core: a segment's rows cut into sequences, and the core re-run over them.

Every row carries the state the collector acted with (``hidden_h``, ``hidden_c``: see
:mod:`parallel_rl.policy.memory`), so a sequence may start at any row. :func:`cut_sequences` cuts each env
lane (rows of one ``env_id``, in time order) into sequences of ``unroll_len`` rows from the lane's first row
(the last one shorter, padded); :func:`unroll_rows` re-runs the core over some of them from their first row's
stored state, zeroing the state where an episode begins inside a sequence (the row after one whose episode
ended), exactly as the collector did: the re-run reproduces the collector's features for the same weights.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import numpy as np
import torch

from .nets import RecurrentCore, State


class Sequences(NamedTuple):
    """A segment's sequences, (S, unroll_len) each, time along the second axis."""

    rows: torch.Tensor  # long: the segment's row at each step (0 in padding)
    valid: torch.Tensor  # bool: a row (False: padding after a lane's last row)
    starts: torch.Tensor  # bool: an episode begins at this row (the state is zeroed before it)


def cut_sequences(env_id: np.ndarray, end: np.ndarray, unroll_len: int, device="cpu") -> Sequences:
    """Each lane's rows cut into sequences of ``unroll_len`` (``end``: an episode ended at the row)."""
    if unroll_len <= 0:
        raise ValueError(f"policy.learn.unroll_len must be > 0, got {unroll_len}")
    order = np.argsort(env_id, kind="stable")
    lane = env_id[order]
    first = np.ones(len(order), dtype=bool)  # a lane's first row
    first[1:] = lane[1:] != lane[:-1]
    pos = np.arange(len(order)) - np.flatnonzero(first)[np.cumsum(first) - 1]  # step within the lane
    seq = np.cumsum(first | (pos % unroll_len == 0)) - 1
    step = pos % unroll_len
    shape = (int(seq[-1]) + 1 if len(seq) else 0, unroll_len)
    rows, valid, starts = np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)
    rows[seq, step] = order
    valid[seq, step] = True
    after_end = np.zeros(len(order), dtype=bool)
    after_end[1:] = np.asarray(end, dtype=bool)[order][:-1] & ~first[1:]
    starts[seq, step] = after_end
    return Sequences(*(torch.as_tensor(a).to(device) for a in (rows, valid, starts)))


def unroll_rows(
    core: RecurrentCore, obs: torch.Tensor, state: State, seqs: Sequences, which: Optional[torch.Tensor] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The core's features for the rows of sequences ``which`` (None: all): ``(rows, features)``, one feature
    row per segment row, from each sequence's stored starting state (``state``: per row, each (N, H))."""
    rows, valid, starts = seqs if which is None else (seqs.rows[which], seqs.valid[which], seqs.starts[which])
    rows_t = rows.t()  # (L, S): time-major
    first = rows[:, 0]
    features, _ = core.unroll(obs[rows_t], tuple(s[first] for s in state), starts.t())
    keep = valid.t()
    return rows_t[keep], features[keep]
