"""Progress output for long runs: a live tqdm bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from typing import Callable, Iterator, Optional, TextIO

from tqdm import tqdm
from tqdm.contrib import DummyTqdmFile
from tqdm.contrib.logging import logging_redirect_tqdm
from tqdm.std import Bar

# a live bar is redrawn at most this often (a forced update, an evaluation's, is drawn at once)
LIVE_INTERVAL = 0.1


def _number(value: float, spec: str = ".1f") -> Optional[str]:
    """``value`` formatted, or None when it is not known yet (NaN)."""
    return None if value is None or math.isnan(value) else format(value, spec)


class ProgressReporter:
    """Shows env steps, updates, eval return against the stop value, training return, workers and rate.

    On a terminal (stdout and stderr both): one tqdm bar on stderr, the stream log records go to, and while it is
    open log records (and warnings) are written through tqdm, which takes the bar off its line and draws it again
    under them: they never share a line. The bar is cut to the terminal's width, so it never wraps. Before the
    first evaluation it shows ``eval=—``. Otherwise (pipes, CI logs, the launcher's children): one plain line per
    update on stdout, at most every ``min_interval`` s (``math.inf``: forced updates only).

    ``steps/s`` counts the env steps made since this reporter started: ``start_envstep`` is where a resumed run
    started from. Use it as a context manager or call :meth:`close`: it puts the log handlers back.
    """

    def __init__(
        self,
        stop_value: Optional[float],
        name: str = "train",
        stream: Optional[TextIO] = None,
        live: Optional[bool] = None,
        min_interval: float = 1.0,
        start_envstep: int = 0,
    ):
        if live is None:
            live = stream.isatty() if stream is not None else sys.stdout.isatty() and sys.stderr.isatty()
        self.live = live
        self.stream = stream or (sys.stderr if live else sys.stdout)
        self.stop_value = None if stop_value is None else float(stop_value)
        self.name = name
        self.min_interval = min_interval
        self.start_envstep = start_envstep
        self._start = time.perf_counter()
        self._last_line = -math.inf
        self._eval = self._best = self._train = math.nan
        self._redirect = contextlib.ExitStack()
        self._bar = None
        if self.live:
            encoding = getattr(self.stream, "encoding", None) or "utf-8"  # None: an in-memory stream
            self._unicode = "—█".encode(encoding, errors="replace") == "—█".encode("utf-8")
            # the whole line is ours ({unit}: tqdm adds nothing to it); without {bar} tqdm cuts it to the width
            self._bar = tqdm(
                total=None,
                file=self.stream,
                bar_format="{unit}",
                dynamic_ncols=True,
                unit=self._text(start_envstep, 0, 0.0, None),
            )
            self._redirect.enter_context(logging_redirect_tqdm())
            logging.captureWarnings(True)  # warnings too go through logging, so through tqdm
            self._redirect.callback(logging.captureWarnings, False)

    def __enter__(self) -> "ProgressReporter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def console(self, stream: TextIO) -> TextIO:
        """A stream to write whole lines to while the bar is shown (the launcher's children's lines): through
        tqdm on a terminal, so no line lands on the bar's; ``stream`` itself otherwise."""
        return DummyTqdmFile(stream) if self.live else stream

    def update(
        self,
        envstep: int,
        train_iter: int,
        eval_return: float = math.nan,
        best_return: float = math.nan,
        workers: Optional[str] = None,
        force: bool = False,
        train_return: float = math.nan,
    ) -> None:
        """The run's numbers now; a NaN return is "none new": the last known one is shown (none yet: ``—``)."""
        for attr, value in (("_eval", eval_return), ("_best", best_return), ("_train", train_return)):
            if value is not None and not math.isnan(value):
                setattr(self, attr, float(value))
        now = time.perf_counter()
        elapsed = now - self._start
        rate = (envstep - self.start_envstep) / elapsed if elapsed > 0 else 0.0
        if not force and now - self._last_line < (LIVE_INTERVAL if self._bar is not None else self.min_interval):
            return
        self._last_line = now
        if self._bar is not None:
            self._bar.unit = self._text(envstep, train_iter, rate, workers)
            self._bar.refresh()
            return
        fields = [f"env_steps={envstep}", f"updates={train_iter}", f"steps/s={rate:.0f}"]
        if workers:
            fields.append(f"workers={workers}")
        goal = " (no stop value)" if self.stop_value is None else f"/{self.stop_value:g}"
        best = _number(self._best)
        train = _number(self._train)
        print(
            f"[{self.name} {elapsed:6.1f}s] eval_return={_number(self._eval) or 'n/a'}{goal}"
            + (f" best={best}" if best else "")
            + (f" train_return={train}" if train else "")
            + " "
            + " ".join(fields),
            file=self.stream,
            flush=True,
        )

    def _text(self, envstep: int, train_iter: int, rate: float, workers: Optional[str]) -> str:
        """The bar's line: the name, the eval return against the stop value (drawn, then in numbers), then the
        rest, most telling first (the end is what a narrow terminal cuts)."""
        none = "—" if self._unicode else "-"
        value = _number(self._eval) or none
        if self.stop_value is None:
            head = f"{self.name} eval={value} (no stop value)"
        else:
            frac = (
                0.0
                if math.isnan(self._eval) or self.stop_value <= 0
                else max(0.0, min(1.0, self._eval / self.stop_value))
            )
            bar = format(Bar(frac, 12, charset=Bar.UTF if self._unicode else Bar.ASCII))
            head = f"{self.name} |{bar}| eval={value}/{self.stop_value:g}"
        fields = [head, f"env_steps={envstep}", f"steps/s={rate:.0f}"]
        if workers:
            fields.append(f"workers={workers}")
        fields += [f"train={_number(self._train) or none}", f"updates={train_iter}"]
        best = _number(self._best)
        if best:
            fields.append(f"best={best}")
        return "  ".join(fields)

    def close(self) -> None:
        """Leave the bar as it was last drawn and put the log handlers back (plain lines: nothing to do)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        self._redirect.close()


@contextlib.contextmanager
def episode_progress(total: int, name: str = "eval", live: Optional[bool] = None) -> Iterator[Callable[[int], None]]:
    """Episodes played out of ``total``: a tqdm bar on stderr when stdout and stderr are a terminal, log records
    written above it; nothing otherwise (``eval``'s output, a table or JSON, is what scripts read). Yields the
    callback an evaluator calls with the number of episodes finished."""
    if not (sys.stdout.isatty() and sys.stderr.isatty() if live is None else live):
        yield lambda done: None
        return
    with (
        tqdm(total=total, desc=name, unit="episode", file=sys.stderr, dynamic_ncols=True) as bar,
        logging_redirect_tqdm(),
    ):
        yield lambda done: bar.update(done - bar.n)
