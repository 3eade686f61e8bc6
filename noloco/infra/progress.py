"""Progress of long work that a user can watch: a tqdm bar on a terminal, and in a log (stderr
redirected to a file, a batch scheduler, torchrun's rank 0) plain lines instead of a bar: one at most every
``every`` seconds, each with the steps done, the time elapsed and an estimate of the time left. Every
:meth:`Progress.note` (an evaluation, a finished figure) is a permanent line in both, as nanoGPT and the
Hugging Face Trainer keep a line per evaluation.
"""

from __future__ import annotations

import sys
import time


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def _columns(stream) -> int | None:
    """The terminal's width, 0 where it reports none, None where it cannot be asked (tqdm then asks itself)."""
    import os

    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return None


class Progress:
    """``total`` units of work named ``desc``; ``show`` None: a bar on a terminal, lines otherwise;
    False: silent."""

    def __init__(self, total: int, desc: str, *, unit: str = "step", initial: int = 0, show: bool | None = None,
                 every: float = 60.0, stream=None):
        self.total, self.desc, self.unit, self.done, self.every = total, desc, unit, initial, every
        self.stream = stream or sys.stderr
        self.silent = show is False
        terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar = None
        if not self.silent and terminal:
            from tqdm import tqdm

            # " inner step": tqdm glues the unit to the rate (78.78inner step/s); a width of 0 (a pseudo-terminal
            # that reports none) would hide the bar, so it falls back to 80 columns
            width = _columns(self.stream)
            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=" " + unit if " " in unit else unit,
                            leave=False, dynamic_ncols=width != 0, ncols=80 if width == 0 else None,
                            file=self.stream)
        self.start, self.first = time.monotonic(), initial
        self.last_line = self.start

    def line(self, text: str = "") -> str:
        """``DESC: DONE/TOTAL UNITs (P%), M:SS elapsed, ~M:SS left[; text]``."""
        elapsed = time.monotonic() - self.start
        rate = (self.done - self.first) / elapsed if elapsed > 0 else 0.0
        left = f", ~{_clock((self.total - self.done) / rate)} left" if rate > 0 and self.done < self.total else ""
        share = 100.0 * self.done / self.total if self.total else 100.0
        return (f"{self.desc}: {self.done}/{self.total} {self.unit}s ({share:.0f}%), {_clock(elapsed)} elapsed{left}"
                + (f"; {text}" if text else ""))

    def _emit(self, text: str = "") -> None:
        print(self.line(text), file=self.stream, flush=True)
        self.last_line = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif not self.silent and time.monotonic() - self.last_line >= self.every:
            self._emit()

    def note(self, text: str) -> None:
        """A milestone (an evaluation): a permanent line, above the bar on a terminal (where the bar, cleared at the
        end, would lose it), a line of its own in a log."""
        if self.bar is not None:
            self.bar.write(self.line(text), file=self.stream)
            self.last_line = time.monotonic()
        elif not self.silent:
            self._emit(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
