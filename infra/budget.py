"""Memory budget of a command: what a run will allocate is estimated before any work, and a
run that does not fit is refused with one line giving the estimate, the budget and the flag
that changes it.

The budget is ``--max-memory`` (``2G``, ``500M``, ``1.5GiB``, or bytes) or, by default,
:data:`DEFAULT_FRACTION` of the memory the kernel reports as available (``MemAvailable`` in
``/proc/meminfo``; 4 GiB where that cannot be read). Work that can be streamed is streamed
(a spectrum's totals are summed chunk by chunk, a simulation runs block by block), so what is
estimated is what cannot be: per-trial and per-direction results, dense matrices, the result
document. A refusal is a :class:`BudgetError`, a :class:`MemoryError`: exit code 3 (an
environment fault, like running out of memory), before any work.
"""

from __future__ import annotations

import re

from noloco.infra.errors import ConfigError

#: share of the available memory a run may plan to use by default (the machine is shared)
DEFAULT_FRACTION = 0.5
#: budget when the available memory cannot be read
FALLBACK_BYTES = 4 << 30
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class BudgetError(MemoryError):
    """The estimated memory of the requested work exceeds the budget (exit code 3)."""


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
    """``MemAvailable`` of ``/proc/meminfo`` in bytes, or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
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
    in, which made numpy expressions on such arrays up to 50 times slower (docs/performance.md).
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
