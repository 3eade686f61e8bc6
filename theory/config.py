"""Validated hyperparameters, one dataclass per concern.

A bad value is rejected at construction with a :class:`ConfigError` that names the
field, the value and the allowed range. Stability is *not* a validation rule: an
unstable but well-formed setting is accepted, and :mod:`theory.conditions` says
which condition it violates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real

MOMENTUM_CONVENTIONS = ("heavy-ball", "nesterov")


class ConfigError(ValueError):
    """A hyperparameter outside its allowed range."""


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


@dataclass(frozen=True)
class OuterConfig:
    """The NoLoCo outer step and its averaging groups.

    replicas (N) replicas are split every outer step into a fresh random partition
    of groups of ``group_size`` (n). ``alpha`` is the outer momentum, ``beta`` the
    outer learning rate on the group-mean progress, ``gamma`` the pull towards the
    group-mean weights. ``momentum`` is ``"heavy-ball"`` (reference code) or
    ``"nesterov"`` (torch ``SGD(nesterov=True)``, as DiLoCo implementations use).

    Special cases: DiLoCo is n = N, no synchronisation is n = 1, data parallel is
    H = 1, n = N, alpha = 0, beta = 1.
    """

    replicas: int = 8
    group_size: int = 2
    alpha: float = 0.5
    beta: float = 0.7
    gamma: float = 0.7
    momentum: str = "heavy-ball"

    def __post_init__(self):
        N = check_integer("replicas", self.replicas, "an integer >= 1", lambda v: v >= 1)
        object.__setattr__(self, "replicas", N)
        check_fields(self, {
            "group_size": (check_divides, "replicas", N),
            "alpha": (check_real, "0 <= alpha < 1", lambda v: 0 <= v < 1),
            "beta": (check_real, "0 <= beta < inf", lambda v: 0 <= v < math.inf),
            "gamma": (check_real, "0 <= gamma < inf (the spread is stable only for gamma in a bounded range; "
                                  "see `noloco check`)", lambda v: 0 <= v < math.inf),
            "momentum": (check_choice, MOMENTUM_CONVENTIONS),
        })

    @property
    def kappa(self) -> float:
        """Probability-like weight of the un-averaged part of a deviation: (N - n) / (n (N - 1))."""
        return group_kappa(self.replicas, self.group_size)

    def rule(self) -> dict:
        """Keyword arguments of :func:`theory.outer.outer_step`."""
        return dict(alpha=self.alpha, beta=self.beta, gamma=self.gamma, momentum=self.momentum)


@dataclass(frozen=True)
class InnerConfig:
    """Inner phase: ``steps`` (H) steps of SGD with learning rate ``lr`` (eta) and
    additive gradient noise of standard deviation ``noise`` (sigma) per coordinate."""

    lr: float = 0.01
    steps: int = 50
    noise: float = 1.0

    def __post_init__(self):
        check_fields(self, {
            "lr": (check_real, "0 < inner_lr < inf", lambda v: 0 < v < math.inf),
            "steps": (check_integer, "an integer >= 1", lambda v: v >= 1),
            "noise": (check_real, "0 <= noise < inf", lambda v: 0 <= v < math.inf),
        }, names={"lr": "inner_lr", "steps": "inner_steps"})


def group_kappa(replicas, group_size):
    """kappa = (N - n) / (n (N - 1)): E[A] restricted to deviations from the mean,
    for the averaging matrix A of a uniformly random partition into groups of n.
    Defined as 0 for N = 1 (there is no spread)."""
    if replicas == 1:
        return 0.0
    return (replicas - group_size) / (group_size * (replicas - 1))
