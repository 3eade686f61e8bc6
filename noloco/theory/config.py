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
    """The NoLoCo outer step and its averaging groups, validated at construction.

    Every outer step the N replicas are split into a fresh random partition into groups of n; replica i
    moves by ``delta_i <- alpha delta_i + beta mean_G(Delta) + gamma (mean_G(phi) - phi_i)``
    (:func:`noloco.outer_step`). Special cases: DiLoCo is n = N, no synchronisation is n = 1, data
    parallel is H = 1, n = N, alpha = 0, beta = 1. Stability is not a validation rule: an unstable but
    well-formed setting is accepted, and :func:`noloco.analyse` says which condition it violates.

    Args:
        replicas: N, an integer >= 1.
        group_size: n, dividing N.
        alpha: outer momentum, 0 <= alpha < 1.
        beta: outer learning rate on the group-mean progress, >= 0.
        gamma: pull towards the group-mean weights, >= 0.
        momentum: ``"heavy-ball"`` (the NoLoCo reference code) or ``"nesterov"`` (torch
            ``SGD(nesterov=True)``, as DiLoCo implementations use).

    Returns:
        The frozen setting; ``kappa`` = (N - n) / (n (N - 1)), the weight of a deviation a random group
        mean leaves.

    Raises:
        ConfigError: a value out of range, naming the field, the value and what is allowed.

    Examples:
        >>> import noloco
        >>> outer = noloco.OuterConfig(replicas=8, group_size=2)
        >>> outer.alpha, outer.beta, outer.gamma, round(outer.kappa, 4)
        (0.5, 0.7, 0.7, 0.4286)
        >>> noloco.OuterConfig(replicas=8, group_size=3)
        Traceback (most recent call last):
        ...
        noloco.infra.errors.ConfigError: group_size=3 is out of range; allowed: an integer >= 1 dividing replicas=8
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
    """The inner phase of the theory's model problem: H steps of SGD with additive gradient noise.

    On a quadratic with curvature lambda each inner step is ``theta <- theta - eta (lambda theta + xi)``,
    ``xi ~ N(0, sigma^2)`` per coordinate; H such steps contract by ``c = 1 - (1 - eta lambda)^H``.

    Args:
        lr: eta, the inner learning rate, > 0 (named ``inner_lr`` in errors and flags).
        steps: H, inner steps per outer step, >= 1 (``inner_steps``).
        noise: sigma, the gradient noise's standard deviation per coordinate, >= 0.

    Returns:
        The frozen setting.

    Raises:
        ConfigError: a value out of range, naming the flag.

    Examples:
        >>> import noloco
        >>> noloco.InnerConfig(lr=0.05, steps=10)
        InnerConfig(lr=0.05, steps=10, noise=1.0)
        >>> noloco.InnerConfig(steps=0)
        Traceback (most recent call last):
        ...
        noloco.infra.errors.ConfigError: inner_steps=0 is out of range; allowed: an integer >= 1
    """

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
