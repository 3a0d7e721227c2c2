"""Progress output for long runs: a live tqdm bar on a terminal, plain lines otherwise."""
from __future__ import annotations

import math
import sys
import time
from typing import Optional, TextIO

from tqdm import tqdm


class ProgressReporter:
    """Shows env steps, updates, eval return against the stop value, workers and rate.

    On a terminal: one tqdm bar (eval return out of the stop value; a counter when there is none: ``stop_value``
    None, the run trains to its budget). Otherwise (pipes, CI logs): one plain line per update, at most every
    ``min_interval`` s.
    """

    def __init__(self, stop_value: Optional[float], name: str = "train", stream: Optional[TextIO] = None,
                 live: Optional[bool] = None, min_interval: float = 1.0):
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.stop_value = None if stop_value is None else float(stop_value)
        self.name = name
        self.min_interval = min_interval
        self._start = time.perf_counter()
        self._last_line = -math.inf
        self._bar = (
            # the fields ride in {unit}: tqdm prefixes {postfix} with ", "
            tqdm(total=self.stop_value, file=self.stream, desc=f"{name} eval return", unit="",
                 bar_format="{desc}: {n:.1f}/{total:.0f} |{bar:30}| {unit}" if self.stop_value is not None
                 else "{desc}: {n:.1f} (no stop value) {unit}")
            if self.live else None
        )

    def update(self, envstep: int, train_iter: int, eval_return: float = float("nan"),
               best_return: float = float("nan"), workers: Optional[str] = None, force: bool = False) -> None:
        elapsed = time.perf_counter() - self._start
        rate = envstep / elapsed if elapsed > 0 else 0.0
        fields = [f"env_steps={envstep}", f"updates={train_iter}", f"steps/s={rate:.0f}"]
        if workers:
            fields.append(f"workers={workers}")
        if self._bar is not None:
            if not math.isnan(eval_return):
                self._bar.n = eval_return if self.stop_value is None else max(0.0, min(eval_return, self.stop_value))
            self._bar.unit = " ".join(fields)
            self._bar.refresh()
            return
        now = time.perf_counter()
        if not force and now - self._last_line < self.min_interval:
            return
        self._last_line = now
        ret = "n/a" if math.isnan(eval_return) else f"{eval_return:.1f}"
        best = "" if math.isnan(best_return) else f" best={best_return:.1f}"
        goal = " (no stop value)" if self.stop_value is None else f"/{self.stop_value:g}"
        print(f"[{self.name} {elapsed:6.1f}s] eval_return={ret}{goal}{best} " + " ".join(fields),
              file=self.stream, flush=True)

    def close(self, summary: Optional[str] = None) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if summary:
            print(summary, file=self.stream, flush=True)
