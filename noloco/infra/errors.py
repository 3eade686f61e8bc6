"""The kinds of failure a user is told about, each with its exit code (:mod:`noloco.infra.entry`).

* :class:`ConfigError` (exit 2): bad input, found before any work: a value outside its range,
  conflicting flags, an empty output name.
* :class:`DataError` (exit 3): an environment or data fault: a file the toolkit reads is missing,
  unreadable or of the wrong shape, an output place cannot be written, a run folder is in use, a
  peer is gone. :class:`LockedError` is the run-folder case.
* A refused memory budget is :class:`noloco.infra.budget.BudgetError`, a ``MemoryError`` (exit 3).

A checked condition that fails (unstable, diverged, a claim that does not hold) is not an error:
the entry point returns 1.
"""

from __future__ import annotations

import sys


class ConfigError(ValueError):
    """Bad input: a value outside its allowed range, or flags that contradict each other (exit 2)."""


class DataError(RuntimeError):
    """An environment or data fault (exit 3): a file the toolkit reads is missing, unreadable or of
    the wrong shape, an output place cannot be written, a run folder is in use, a peer is gone."""


class LockedError(DataError):
    """Another live process holds a run folder's lock."""


def warn(message: str) -> None:
    """One line on stderr that does not stop the work."""
    print(f"noloco: warning: {message}", file=sys.stderr)


def require_extra(module: str, package: str, extra: str, what: str) -> None:
    """A :class:`DataError` (exit 3: the environment lacks it) naming the package and the extra that installs
    it when ``module`` cannot be imported; ``what`` says what needs it."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        raise DataError(f"{what} needs {package}, which is not installed: pip install -e '.[{extra}]' "
                        f"(or pip install 'noloco-toolkit[{extra}]')") from None
