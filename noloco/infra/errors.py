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
    """Bad input: a value outside its allowed range, or settings that contradict each other (exit 2).

    Raised before any work, by every validator, with one line that names the field, the value given and
    what is allowed. A ``ValueError``, so code that catches those catches it.

    Args:
        message: the one line (``"alpha=2.0 is out of range; allowed: 0 <= alpha < 1"``).

    Returns:
        The exception; the command line prints its line and exits 2.

    Raises:
        Nothing itself: every public function that validates raises it.

    Examples:
        >>> import noloco
        >>> try:
        ...     noloco.OuterConfig(alpha=2.0)
        ... except noloco.ConfigError as err:
        ...     print(err)
        alpha=2.0 is out of range; allowed: 0 <= alpha < 1
    """


class DataError(RuntimeError):
    """An environment or data fault (exit 3): what the toolkit reads or writes is not as it must be.

    A file it reads is missing, unreadable or of the wrong shape (a run folder, a checkpoint, an outer
    optimizer's state), an output place cannot be written, a run folder is in use (:class:`LockedError`),
    a package an extra installs is missing. The message says what to give or do instead.

    Args:
        message: the one line, naming the file or the thing and what to do.

    Returns:
        The exception; the command line prints its line and exits 3.

    Raises:
        Nothing itself: raised by :func:`noloco.read_run`, ``OuterOptimizer.load_state_dict`` and the
        readers of run folders and checkpoints.

    Examples:
        >>> import noloco
        >>> try:
        ...     noloco.read_run("/nonexistent/run")
        ... except noloco.DataError as err:
        ...     print(type(err).__name__, "/nonexistent/run" in str(err))
        DataError True
    """


class LockedError(DataError):
    """Another live process holds a run folder's lock (a :class:`DataError`, exit 3).

    A run folder is written by one process at a time; a second ``noloco llm train --out DIR`` (or an
    :class:`noloco.Observer` on the same folder) while the first runs is refused, naming the holder.

    Args:
        message: the one line, naming the folder and the process that holds it.

    Returns:
        The exception; the command line prints its line and exits 3.

    Raises:
        Nothing itself: raised when a run folder in use is opened.

    Examples:
        >>> import noloco
        >>> issubclass(noloco.LockedError, noloco.DataError)
        True
    """


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
