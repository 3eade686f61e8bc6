"""Validated hyperparameters, one dataclass per concern.

A bad value is rejected at construction with a :class:`ConfigError` that names the
field, the value and the allowed range. Stability is *not* a validation rule: an
unstable but well-formed setting is accepted, and :mod:`theory.conditions` says
which condition it violates.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from numbers import Integral, Real

MOMENTUM_CONVENTIONS = ("heavy-ball", "nesterov")


class ConfigError(ValueError):
    """A hyperparameter outside its allowed range."""


def check_real(name: str, value, allowed: str, ok) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(f"{name}={value!r} is not a number; allowed: {allowed}")
    value = float(value)
    if math.isnan(value) or not ok(value):
        raise ConfigError(f"{name}={value!r} is out of range; allowed: {allowed}")
    return value


def check_integer(name: str, value, allowed: str, ok) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigError(f"{name}={value!r} is not an integer; allowed: {allowed}")
    value = int(value)
    if not ok(value):
        raise ConfigError(f"{name}={value!r} is out of range; allowed: {allowed}")
    return value


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
        n = check_integer(
            "group_size", self.group_size, f"an integer >= 1 dividing replicas={N}",
            lambda v: v >= 1 and N % v == 0,
        )
        object.__setattr__(self, "replicas", N)
        object.__setattr__(self, "group_size", n)
        object.__setattr__(self, "alpha", check_real("alpha", self.alpha, "0 <= alpha < 1", lambda v: 0 <= v < 1))
        object.__setattr__(self, "beta", check_real("beta", self.beta, "beta >= 0 and finite", lambda v: 0 <= v < math.inf))
        object.__setattr__(
            self, "gamma",
            check_real("gamma", self.gamma,
                  "gamma >= 0 and finite (the spread is stable only for gamma in a bounded range; "
                  "see `noloco check`)", lambda v: 0 <= v < math.inf),
        )
        if self.momentum not in MOMENTUM_CONVENTIONS:
            raise ConfigError(f"momentum={self.momentum!r} is not allowed; allowed: {', '.join(MOMENTUM_CONVENTIONS)}")

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
        object.__setattr__(self, "lr", check_real("inner_lr", self.lr, "0 < inner_lr < inf", lambda v: 0 < v < math.inf))
        object.__setattr__(self, "steps", check_integer("inner_steps", self.steps, "an integer >= 1", lambda v: v >= 1))
        object.__setattr__(self, "noise", check_real("noise", self.noise, "0 <= noise < inf", lambda v: 0 <= v < math.inf))


def group_kappa(replicas, group_size):
    """kappa = (N - n) / (n (N - 1)): E[A] restricted to deviations from the mean,
    for the averaging matrix A of a uniformly random partition into groups of n.
    Defined as 0 for N = 1 (there is no spread)."""
    if replicas == 1:
        return 0.0
    return (replicas - group_size) / (group_size * (replicas - 1))


@dataclass(frozen=True)
class Preset:
    outer: OuterConfig
    inner: InnerConfig
    note: str = ""

    def as_dict(self) -> dict:
        return {"outer": asdict(self.outer), "inner": asdict(self.inner), "note": self.note}


PRESETS: dict[str, Preset] = {
    "paper": Preset(
        OuterConfig(replicas=8, group_size=2, alpha=0.5, beta=0.7, gamma=0.7, momentum="heavy-ball"),
        InnerConfig(lr=0.01, steps=50, noise=1.0),
        "NoLoCo reference configuration: pairs, alpha 0.5, beta = gamma = 0.7, H 50, heavy-ball",
    ),
    "diloco": Preset(
        OuterConfig(replicas=8, group_size=8, alpha=0.9, beta=0.7, gamma=0.0, momentum="nesterov"),
        InnerConfig(lr=0.01, steps=500, noise=1.0),
        "DiLoCo: all-reduce (n = N), Nesterov alpha 0.9, beta 0.7, H 500",
    ),
}
