"""The validators every settings class and entry point uses, one message format for all:
``NAME=VALUE is out of range; allowed: RANGE`` (or ``is not a number`` / ``is not an integer``),
raised as :class:`noloco.infra.errors.ConfigError` (exit 2) before any work.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from noloco.infra.errors import ConfigError


def check_real(name: str, value, allowed: str, ok=lambda v: True) -> float:
    """A finite-or-infinite real number (never NaN) for which ``ok`` holds."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(f"{name}={value!r} is not a number; allowed: {allowed}")
    value = float(value)
    if math.isnan(value) or not ok(value):
        raise ConfigError(f"{name}={value!r} is out of range; allowed: {allowed}")
    return value


def check_integer(name: str, value, allowed: str, ok=lambda v: True) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigError(f"{name}={value!r} is not an integer; allowed: {allowed}")
    value = int(value)
    if not ok(value):
        raise ConfigError(f"{name}={value!r} is out of range; allowed: {allowed}")
    return value


def check_instance(name: str, value, kinds, what: str):
    """``value`` if it is an instance of ``kinds`` (a public function's argument: a clear ConfigError naming it
    where a wrong object would fail deep inside with a TypeError or an AttributeError)."""
    if isinstance(value, bool) or not isinstance(value, kinds):
        shown = repr(value)
        raise ConfigError(f"{name}={shown if len(shown) <= 60 else shown[:57] + '...'} is "
                          f"{type(value).__name__}; expected {what}")
    return value


def check_flag(name: str, value) -> bool:
    """``value`` if it is True or False: a string such as "no" is truthy and would be read as yes, silently."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name}={value!r} is not allowed; allowed: True or False")
    return value


#: the longest wait for a peer (seconds, about 31 years): datetime.timedelta, which torch.distributed takes,
#: overflows above about 8.6e13 s, and no wait longer than this means anything
MAX_TIMEOUT = 1e9


def check_timeout(name: str, value) -> float:
    """Seconds to wait for a peer: 0 < value <= :data:`MAX_TIMEOUT`."""
    return check_real(name, value, f"0 < {name} <= {MAX_TIMEOUT:g} (seconds)", lambda v: 0 < v <= MAX_TIMEOUT)


def did_you_mean(word: str, names, aliases: dict | None = None) -> str:
    """`` (did you mean 'lr'?)`` for a mistyped or foreign name: an alias from another library's vocabulary
    (``learning_rate``), else the closest name by spelling (``alpah``); '' when nothing is near."""
    import difflib

    names = list(names)
    key = str(word).strip().lower().replace("-", "_")
    near = [aliases[key]] if aliases and aliases.get(key) in names else difflib.get_close_matches(key, names, n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def check_choice(name: str, value, choices) -> str:
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is not allowed; allowed: {', '.join(map(str, choices))}")
    return value


def check_divides(name: str, value, total_name: str, total: int) -> int:
    """An integer >= 1 dividing ``total`` (a group size dividing the replica count)."""
    return check_integer(name, value, f"an integer >= 1 dividing {total_name}={total}",
                         lambda v: v >= 1 and total % v == 0)


def check_fields(obj, rules: dict, names: dict | None = None) -> None:
    """Validate and normalise the fields of a frozen dataclass: ``rules`` maps a field name to
    ``(checker, *args)``, called as ``checker(shown, value, *args)`` with ``shown`` the field's
    name in messages (``names`` may rename it after its flag); the result is stored back."""
    for name, (checker, *args) in rules.items():
        shown = (names or {}).get(name, name)
        object.__setattr__(obj, name, checker(shown, getattr(obj, name), *args))


def check_at_least(name: str, value, low: int) -> int:
    """An integer >= ``low``."""
    return check_integer(name, value, f"an integer >= {low}", lambda v: v >= low)


def check_nonnegative(name: str, value) -> float:
    """A finite real number >= 0."""
    return check_real(name, value, f"0 <= {name} < inf", lambda v: 0 <= v < math.inf)


def check_positive(name: str, value) -> float:
    """A finite real number > 0."""
    return check_real(name, value, f"0 < {name} < inf", lambda v: 0 < v < math.inf)


#: the largest seed: a 64-bit signed integer, what torch's generators and numpy's seed sequences both take
SEED_MAX = 2**63 - 1
#: the largest standard deviation of an input (zeta, an initial spread): its square, a variance, and that
#: times a phase's contraction must stay finite in float64
SCALE_MAX = 1e150


def check_seed(name: str, value) -> int:
    """A random seed: an integer 0 <= seed <= 2**63 - 1."""
    return check_integer(name, value, f"an integer 0 <= {name} <= 2**63 - 1", lambda v: 0 <= v <= SEED_MAX)


def check_scale(name: str, value) -> float:
    """A standard deviation: 0 <= value <= :data:`SCALE_MAX` (its square must be a finite float64)."""
    return check_real(name, value, f"0 <= {name} <= 1e150 (its square, a variance, must be finite)",
                      lambda v: 0 <= v <= SCALE_MAX)
