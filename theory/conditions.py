"""Conditions of the convergence analysis for concrete hyperparameters.

:func:`analyse` evaluates, per eigen-direction of a quadratic and in total, whether
the setting is stable, how fast the replica mean converges, how fast the spread
between replicas decays and where it settles. Totals: the stationary variance is
the sum over directions; stability and the slowest rate are the worst direction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from theory import numeric
from theory.config import InnerConfig, OuterConfig
from theory.io import SCHEMA_VERSION
from theory.spectrum import Spectrum


@dataclass(frozen=True)
class Condition:
    name: str
    value: float
    holds: bool
    requirement: str


@dataclass(frozen=True)
class Analysis:
    outer: OuterConfig
    inner: InnerConfig
    curvatures: list
    c: list                       # per direction: contraction of one inner phase
    s2: list                      # per direction: inner-phase noise variance
    mean_radius: list             # per direction
    decay_factor: list            # per direction
    variance: list                # per direction, stationary spread per coordinate
    conditions: list = field(default_factory=list)

    @property
    def stable(self) -> bool:
        return all(c.holds for c in self.conditions)

    @property
    def mean_spectral_radius(self) -> float:
        return max(self.mean_radius)

    @property
    def variance_decay_factor(self) -> float:
        return max(self.decay_factor)

    @property
    def stationary_variance(self) -> float:
        return float(sum(self.variance))

    @property
    def stationary_std(self) -> float:
        with np.errstate(invalid="ignore"):  # an unstable setting's variance may be negative: nan
            return float(np.sqrt(self.stationary_variance))

    def to_json(self) -> dict:
        """The analysis as data. Unbounded quantities (an unstable setting) stay inf here; strict
        JSON output (:func:`theory.io.print_json`) writes them as null with the reason beside them."""
        return {
            "schema_version": SCHEMA_VERSION,
            "outer": asdict(self.outer),
            "inner": asdict(self.inner),
            "kappa": self.outer.kappa,
            "stable": self.stable,
            "mean_spectral_radius": self.mean_spectral_radius,
            "variance_decay_factor": self.variance_decay_factor,
            "stationary_variance": self.stationary_variance,
            "stationary_std": self.stationary_std,
            "conditions": [asdict(c) for c in self.conditions],
            "directions": [
                {"curvature": lam, "c": c, "s2": s2, "mean_spectral_radius": r,
                 "variance_decay_factor": d, "stationary_variance": v}
                for lam, c, s2, r, d, v in zip(self.curvatures, self.c, self.s2, self.mean_radius,
                                               self.decay_factor, self.variance)
            ],
        }


def spread_condition(outer: OuterConfig, decay: float) -> Condition:
    name = "replica spread decays: spectral radius of T"
    if outer.group_size == outer.replicas:
        # every replica applies the same update: from identical initialisation the
        # spread is exactly 0 whatever T does to (absent) deviations
        return Condition(name, decay, True, "n = N: no spread from identical initialisation (DiLoCo)")
    return Condition(name, decay, decay < 1, "< 1 (second moments of the deviations from the mean)")


def analyse(outer: OuterConfig, inner: InnerConfig, spectrum: Spectrum) -> Analysis:
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        # a diverging setting overflows to inf (or nan): that is the answer, reported as unstable
        return _analyse(outer, inner, spectrum)


def _analyse(outer: OuterConfig, inner: InnerConfig, spectrum: Spectrum) -> Analysis:
    lam = spectrum.array
    c, s2 = numeric.inner_sgd(inner.lr, lam, inner.steps, inner.noise)
    rule = (outer.alpha, outer.beta, outer.gamma)
    mean_r = numeric.mean_spectral_radius(*rule, c, outer.momentum)
    decay = numeric.variance_decay_factor(*rule, c, outer.kappa, outer.momentum)
    variance = numeric.stationary_variance(*rule, c, s2, outer.replicas, outer.group_size, outer.momentum)
    inner_factor = float(np.max(np.abs(1 - inner.lr * lam)))
    conditions = [
        Condition("inner SGD contracts: max |1 - eta*lambda|", inner_factor, inner_factor < 1,
                  "< 1 (else each inner phase amplifies the distance to the optimum)"),
        Condition("replica mean converges: spectral radius of M", float(mean_r.max()), bool(mean_r.max() < 1),
                  "< 1 (heavy-ball/Nesterov on step beta*c, momentum alpha)"),
        spread_condition(outer, float(decay.max())),
    ]
    as_list = lambda a: [float(x) for x in np.broadcast_to(a, lam.shape)]
    return Analysis(outer, inner, as_list(lam), as_list(c), as_list(s2), as_list(mean_r),
                    as_list(decay), as_list(variance), conditions)
