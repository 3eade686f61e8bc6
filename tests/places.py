"""Folders the command-line tests refer to: fresh empty ones, and a finished cpu-tiny run trained once and
copied per use (tests/test_cli_table.py, tests/test_fuzz_families.py); and a time limit for a block that could hang."""

from __future__ import annotations

import contextlib
import shutil
import signal
from pathlib import Path
from typing import Callable


class RunPlaces:
    """``fresh()`` a new folder under ``root``; ``run()`` a copy of the run ``train(out)`` makes once (it returns
    an error text, empty when the run finished)."""

    def __init__(self, root: Path, train: Callable[[Path], str]):
        self.root, self.count, self._train, self._template = root, 0, train, None

    def fresh(self) -> Path:
        self.count += 1
        path = self.root / f"p{self.count}"
        path.mkdir()
        return path

    def template(self) -> Path:
        if self._template is None:
            self._template = self.root / "template"
            error = self._train(self._template)
            assert not error, f"the template run failed: {error}"
            (self._template / "run.lock").unlink(missing_ok=True)
        return self._template

    def run(self) -> Path:
        path = self.fresh() / "run"
        shutil.copytree(self.template(), path)
        return path


@contextlib.contextmanager
def within(seconds: int):
    """Fail (instead of hanging the test run) when the block takes longer than ``seconds`` (SIGALRM)."""
    def hang(signum, frame):
        raise AssertionError(f"blocked for more than {seconds} s")
    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
