"""Validated hyperparameters, one dataclass per concern.

A bad value is rejected at construction with a :class:`ConfigError` that names the
field, the value and the allowed range. Stability is *not* a validation rule: an
unstable but well-formed setting is accepted, and :mod:`noloco.theory.conditions` says
which condition it violates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from noloco.infra.checks import check_choice, check_divides, check_fields, check_integer, check_real

MOMENTUM_CONVENTIONS = ("heavy-ball", "nesterov")


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
        """Keyword arguments of :func:`noloco.theory.outer.outer_step`."""
        return dict(alpha=self.alpha, beta=self.beta, gamma=self.gamma, momentum=self.momentum)


#: the outer step's fields, in order (one list for flags, transfers and old run records)
OUTER_FIELDS = ("replicas", "group_size", "alpha", "beta", "gamma", "momentum")


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
