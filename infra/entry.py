"""The exit-code contract, written once for every entry point.

====  =====================================================================
0     success (also ``--help``, ``--version``, and a reader that closed the pipe early)
1     a checked condition fails (unstable, diverged, a claim does not hold): the command returns 1
2     bad input or usage, detected before any work (:class:`~noloco.infra.errors.ConfigError`,
      an argparse error)
3     an environment or data fault (:class:`~noloco.infra.errors.DataError`, ``OSError``,
      ``MemoryError``, a refused memory budget)
130   interrupted (Ctrl-C, SIGTERM)
====  =====================================================================

Every error is one line on stderr, ``PROG: error: ...``; ``NOLOCO_DEBUG=1`` shows the traceback
instead.
"""

from __future__ import annotations

import argparse
import os
import sys

from noloco.infra.errors import ConfigError, DataError


def exit_code(err: BaseException) -> int | None:
    """The contract's exit code of an error reported in one line: 2 bad input or usage
    (noloco.infra.errors.ConfigError), 3 an environment or data fault (DataError, OSError,
    MemoryError); None for anything else, which is a bug and keeps its traceback."""
    if isinstance(err, ConfigError):
        return 2
    if isinstance(err, (DataError, OSError, MemoryError)):
        return 3
    return None


def describe(err: BaseException) -> str:
    """The one line that says what failed and where."""
    if isinstance(err, OSError) and err.strerror:
        where = err.filename if err.filename is not None else ""
        return f"{where}: {err.strerror}" if where else err.strerror
    if isinstance(err, MemoryError) and not str(err):
        return "out of memory"
    return " ".join((str(err) or type(err).__name__).split())


def report(prog: str, err: BaseException) -> int:
    """Print ``PROG: error: ...`` on one line and return the error's exit code; re-raise a bug, or
    anything under ``NOLOCO_DEBUG=1`` (its traceback)."""
    code = exit_code(err)
    if code is None or os.environ.get("NOLOCO_DEBUG") == "1":
        raise err
    print(f"{prog}: error: {describe(err)}", file=sys.stderr)
    return code


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (``PROG: error: ...``) and exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")
