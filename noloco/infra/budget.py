"""Memory and time budgets of a command: what a run will allocate, and how long it will take, are
estimated before any work, and a run that does not fit is refused with one line giving the estimate,
the budget and the flag that changes it (``--max-memory``, ``--max-time``).

The budget is ``--max-memory`` (``2G``, ``500M``, ``1.5GiB``, or bytes) or, by default,
:data:`DEFAULT_FRACTION` of the memory the kernel reports as available (psutil's ``available``: ``MemAvailable``
of ``/proc/meminfo`` on Linux; 4 GiB where it cannot be read). Work that can be streamed is streamed
(a spectrum's totals are summed chunk by chunk, a simulation runs block by block), so what is
estimated is what cannot be: per-trial and per-direction results, dense matrices, the result
document. A refusal is a :class:`BudgetError`, a :class:`MemoryError`: exit code 3 (an
environment fault, like running out of memory), before any work.

The time budget is ``--max-time`` (``90``, ``30m``, ``2h``, ``none``), by default
:data:`DEFAULT_MAX_SECONDS` (one hour). The estimate is the work's size times a per-unit cost measured on
the project's 2-core machine (the constants beside each estimate say where they come from); above
:data:`SHOW_SECONDS` it is printed on stderr before the work (``noloco: estimate: ...``), above the budget
the work is refused (:class:`TimeBudgetError`, a DataError: exit 3), before anything is computed.
"""

from __future__ import annotations

import math
import re
import sys

from noloco.infra.errors import ConfigError, DataError

#: share of the available memory a run may plan to use by default (the machine is shared)
DEFAULT_FRACTION = 0.5
#: budget when the available memory cannot be read
FALLBACK_BYTES = 4 << 30
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class BudgetError(MemoryError):
    """The estimated memory of the requested work is above its budget (exit 3).

    Checked before any work, so a refusal costs nothing; the message names the estimate, the budget and
    what to lower. A ``MemoryError``.

    Args:
        message: the one line: the work, its estimate, the budget and what to lower.

    Returns:
        The exception; the command line prints its line and exits 3.

    Raises:
        Nothing itself: raised by :func:`noloco.simulate`, ``noloco llm train`` and the studies when the
        estimate is above ``max_memory`` (the time budget's refusal is :class:`TimeBudgetError`).

    Examples:
        >>> import noloco
        >>> _, outer, inner = noloco.resolve("paper")
        >>> try:
        ...     noloco.simulate("noloco", outer, inner, noloco.Spectrum.uniform(0.1, 1, 10**6), max_memory="1M")
        ... except noloco.BudgetError as err:
        ...     print(type(err).__name__, isinstance(err, MemoryError))
        BudgetError True
    """


def parse_size(text) -> int:
    """Bytes of ``text``: a number with an optional unit K, M, G or T (powers of 1024; ``B``,
    ``iB`` and ``B`` suffixes accepted), e.g. ``2G``, ``500MB``, ``1.5GiB``, ``1048576``."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", str(text))
        if not match:
            raise ConfigError(f"max_memory={text!r} is not a size; allowed: a number of bytes with an optional "
                              "unit K, M, G or T, e.g. 2G or 500M")
        value, unit = float(match.group(1)), match.group(2).lower()
    size = value * _UNITS[unit]
    if not size >= 1 << 20 or size != size or size == float("inf"):
        raise ConfigError(f"max_memory={text!r} is out of range; allowed: at least 1M")
    return int(size)


def available_bytes() -> int | None:
    """The memory the kernel reports as available, in bytes (psutil: ``MemAvailable`` of ``/proc/meminfo`` on
    Linux, its equivalent on macOS and Windows), or None where it cannot be read."""
    try:
        import psutil  # here, not at the top: most commands never ask

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError, RuntimeError):
        return None


def default_budget() -> int:
    available = available_bytes()
    return FALLBACK_BYTES if available is None else int(DEFAULT_FRACTION * available)


class Budget(int):
    """Bytes a run may plan to use; ``given`` tells whether they came from ``--max-memory``."""

    given: bool = False


def resolve(max_memory=None) -> Budget:
    """The budget in bytes: ``max_memory`` parsed, or :func:`default_budget`."""
    if max_memory is None:
        return Budget(default_budget())
    budget = Budget(parse_size(max_memory))
    budget.given = True
    return budget


def human(size: float) -> str:
    """``size`` bytes as a short text with a binary unit (``1.5 GiB``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(size) < 1024 or unit == "PiB":
            return f"{size:.3g} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.3g} PiB"


def require(estimate: int, budget: int, what: str, smaller: str = "") -> None:
    """Refuse (:class:`BudgetError`) when ``estimate`` bytes exceed ``budget``; ``what`` names the
    work, ``smaller`` the flags that would shrink it."""
    if estimate <= budget:
        return
    hint = f", or {smaller}" if smaller else ""
    if getattr(budget, "given", False):
        limit = f"--max-memory {human(budget)} (raise it{hint})"
    else:
        limit = f"the budget of {human(budget)} (half the available memory; --max-memory to change it{hint})"
    raise BudgetError(f"{what} needs about {human(estimate)} of memory, above {limit}")


def retain_freed_memory() -> None:
    """Ask glibc to keep freed memory for reuse instead of returning it to the kernel after every
    array: with its defaults, each temporary of more than 128 kB is mapped afresh and page-faulted
    in, which made numpy expressions on such arrays up to 50 times slower (measured on the project's 2-core machine).
    Freed memory is then kept up to 256 MiB. A no-op where the C library is not glibc."""
    global _RETAINED
    if _RETAINED:
        return
    _RETAINED = True
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)    # M_MMAP_THRESHOLD: arrays below 32 MiB come from the heap
        libc.mallopt(-1, 256 << 20)   # M_TRIM_THRESHOLD: keep up to 256 MiB of freed heap
    except (OSError, AttributeError):
        pass


_RETAINED = False


# ------------------------------------------------------------------ time

#: the time budget of long work when ``--max-time`` is not given (seconds)
DEFAULT_MAX_SECONDS = 3600.0
#: an estimate above this many seconds is printed before the work starts
SHOW_SECONDS = 60.0
_TIME_UNITS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


class TimeBudgetError(DataError):
    """The estimated time of the requested work is above ``max_time`` (``--max-time``; a DataError, exit 3).

    Checked before any work from the measured costs per unit (docs/performance.md), so a refusal costs
    nothing; the message names the estimate, the budget, how to allow it and what to shrink.

    Args:
        message: the one line: the work, its estimated duration, the budget and what to change.

    Returns:
        The exception; the command line prints its line and exits 3.

    Raises:
        Nothing itself: raised by :func:`noloco.simulate` and the long studies above their time budget.

    Examples:
        >>> import noloco
        >>> _, outer, inner = noloco.resolve("paper")
        >>> try:
        ...     noloco.simulate("noloco", outer, inner, noloco.Spectrum.uniform(0.1, 1, 10**4), trials=10**4,
        ...                     max_time="1s")
        ... except noloco.TimeBudgetError as err:
        ...     print(type(err).__name__, isinstance(err, noloco.DataError))
        TimeBudgetError True
    """


def parse_time(text) -> float | None:
    """Seconds of ``--max-time``: a number with an optional unit s, m (min), h or d (``90``, ``30m``, ``1.5h``),
    or ``none`` (no limit: None)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        if str(text).strip().lower() in ("none", "inf", "unlimited"):
            return None
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(s|sec|m|min|h|d)?\s*", str(text).lower())
        if not match:
            raise ConfigError(f"max_time={text!r} is not a duration; allowed: seconds with an optional unit s, m, h "
                              "or d (e.g. 90, 30m, 2h), or none (no limit)")
        value, unit = float(match.group(1)), match.group(2) or ""
    seconds = value * _TIME_UNITS[unit]
    if not 1 <= seconds < math.inf:
        raise ConfigError(f"max_time={text!r} is out of range; allowed: at least 1 second, or none (no limit)")
    return seconds


class TimeBudget(float):
    """Seconds a run may plan to take; ``given`` tells whether they came from ``--max-time``."""

    given: bool = False


def resolve_time(max_time=None, default: float | None = None) -> TimeBudget | None:
    """The time budget in seconds: ``max_time`` parsed (None for ``none``), or ``default`` (a command's own, such
    as a quick run's), or :data:`DEFAULT_MAX_SECONDS`."""
    if max_time is None:
        return TimeBudget(DEFAULT_MAX_SECONDS if default is None else default)
    seconds = parse_time(max_time)
    if seconds is None:
        return None
    budget = TimeBudget(seconds)
    budget.given = True
    return budget


def duration(seconds: float) -> str:
    """``seconds`` as a short text: ``45 s``, ``12 min``, ``3.2 h``, ``5.1 days``, ``1.2e+06 years``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    if seconds < 2 * 365 * 86400:
        return f"{seconds / 86400:.1f} days"
    return f"{seconds / (365 * 86400):.2g} years"


def require_time(seconds: float, max_time, what: str, smaller: str = "", how: str = "", stream=None,
                 default: float | None = None) -> None:
    """Before long work: refuse it (:class:`TimeBudgetError`, exit 3) when its estimate ``seconds`` exceeds the
    time budget (``max_time``: ``--max-time``; default :data:`DEFAULT_MAX_SECONDS`), else print the estimate on
    stderr when it is above :data:`SHOW_SECONDS`. ``what`` names the work, ``how`` what the estimate is made
    of (size x per-unit cost), ``smaller`` the flags that shrink it."""
    budget = resolve_time(max_time, default)
    basis = f" ({how})" if how else ""
    if budget is not None and seconds > budget:
        hint = f"; or {smaller}" if smaller else ""
        limit = (f"--max-time {duration(budget)}" if budget.given else
                 f"the default time budget of {duration(budget)}")
        raise TimeBudgetError(f"{what} would take about {duration(seconds)}{basis}, above {limit}: allow it with "
                              f"--max-time {_allow(seconds)} or none{hint}")
    if seconds > SHOW_SECONDS:
        print(f"noloco: estimate: {what} takes about {duration(seconds)}{basis}", file=stream or sys.stderr,
              flush=True)


def _allow(seconds: float) -> str:
    """A ``--max-time`` value a little above ``seconds`` (whole hours, or days)."""
    hours = math.ceil(seconds * 1.5 / 3600)
    return f"{hours}h" if hours < 48 else f"{math.ceil(hours / 24)}d"
