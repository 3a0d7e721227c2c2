"""Step data as columns: one numpy array per field (``obs``, ``action``, ``reward``, ...), one row per step.

A per-transition dict costs ~4 us to build, more than an env step, so everything moves in column batches:
collectors build them (the row layout is in :mod:`parallel_rl.collector.serial`), buffers store and sample
them, chunk files hold them (:mod:`parallel_rl.storage`), policies learn from them."""

from __future__ import annotations

from typing import Dict, Mapping

import numpy as np

Columns = Dict[str, np.ndarray]


def columns_len(columns: Mapping[str, np.ndarray]) -> int:
    """Rows in a dict of columns."""
    return len(next(iter(columns.values()))) if columns else 0
