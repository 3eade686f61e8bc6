"""The directions a paper audit judges: the spectrum's representative curvatures and the flat limit."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from noloco.theory import numeric
from noloco.theory.config import InnerConfig, OuterConfig
from noloco.theory.exchangeable import spectral_radius
from noloco.theory.spectrum import Spectrum
from noloco.theory.stability import (MARGINAL, STABLE, describe)

#: spectra up to this many directions are audited direction by direction; a larger one by this many of its
#: directions (spread evenly in log rank, its extremes and its least stable directions included; the spectral
#: radii of every direction are scanned chunk by chunk)
AUDIT_LISTED = 16
#: eta lambda H of the flat limit where a statement needs a direction that still moves (Eq 22's ratio)
FLAT_LIMIT = 1e-9


@dataclass(frozen=True)
class Direction:
    """One eigen-direction: its curvature (0 for the flat limit c -> 0), c and s2 of one inner phase."""

    curvature: float
    c: float
    s2: float

    @property
    def flat(self) -> bool:
        return self.curvature == 0.0

    @property
    def name(self) -> str:
        return "flat (c -> 0)" if self.flat else f"curvature {self.curvature:.4g} (c = {self.c:.3g})"


def direction(inner: InnerConfig, curvature: float) -> Direction:
    c, s2 = numeric.inner_sgd(inner.lr, curvature, inner.steps, inner.noise)
    return Direction(float(curvature), float(c), float(s2))


def _radii(outer: OuterConfig, c):
    rule = (outer.alpha, outer.beta, outer.gamma, c)
    return (numeric.mean_spectral_radius(*rule, outer.momentum),
            numeric.variance_decay_factor_fast(*rule, outer.kappa, outer.momentum))


def audit_directions(outer: OuterConfig, inner: InnerConfig, spectrum: Spectrum) -> list:
    """The curvatures audited one by one, largest first: every one up to :data:`AUDIT_LISTED`, else a
    representative set (module constant) with the directions of the largest mean and spread radii."""
    if spectrum.count <= AUDIT_LISTED:
        return sorted(set(spectrum.values()), reverse=True)
    ranks = set(np.unique(np.round(np.geomspace(1, spectrum.count, AUDIT_LISTED)).astype(np.int64) - 1).tolist())
    picked, worst = [], {0: (-math.inf, None), 1: (-math.inf, None)}
    chunks = [np.sort(spectrum.array)] if spectrum.kind == "list" else spectrum.chunks()
    start = 0
    for lam in chunks:
        picked += [float(lam[k - start]) for k in ranks if start <= k < start + len(lam)]
        c, _ = numeric.inner_sgd(inner.lr, lam, inner.steps, 0.0)
        for key, r in enumerate(_radii(outer, c)):
            r = np.where(np.isnan(r), np.inf, np.broadcast_to(r, lam.shape))
            k = int(np.argmax(r))
            if r[k] > worst[key][0]:
                worst[key] = (float(r[k]), float(lam[k]))
        start += len(lam)
    picked += [lam for _, lam in worst.values() if lam is not None]
    return sorted(set(picked), reverse=True)


def spread_state(outer: OuterConfig, d: Direction) -> tuple:
    """(T's radius from the closed form, its class with the growth of a marginal spread, whether the spread
    stays bounded: stable, or marginal and bounded) in direction ``d``."""
    rule = (outer.alpha, outer.beta, outer.gamma, d.c, outer.kappa, outer.momentum)
    _, T, f = numeric.transition(*rule)
    r = float(numeric.variance_decay_factor(*rule))
    state = describe(r, T, d.s2 * float(numeric.noise_share(outer.replicas, outer.group_size)) * f)
    if outer.group_size == outer.replicas:  # classified by the one rule; from identical starts there is no spread
        return r, f"{state} (n = N: no spread from identical starts)", True
    return r, state, state in (STABLE, f"{MARGINAL} (bounded)")


def mean_state(outer: OuterConfig, d: Direction, c=None) -> tuple:
    """(M's radius, its class with the growth of the mean's second moments) at ``c`` (default d.c)."""
    c = d.c if c is None else c
    _, T, f = numeric.transition(outer.alpha, outer.beta, 0.0, c, 1.0, outer.momentum)
    r = float(numeric.mean_spectral_radius(outer.alpha, outer.beta, outer.gamma, c, outer.momentum))
    return r, describe(r, T, d.s2 / outer.replicas * f)


def eig_radius(outer: OuterConfig, c: float, which: int) -> float:
    """numpy's spectral radius of M (which 0) or T (1): independent of the closed-form roots."""
    matrix = numeric.transition(outer.alpha, outer.beta, outer.gamma, c, outer.kappa, outer.momentum)[which]
    return spectral_radius(matrix)


def few_directions(dirs: list, key) -> list:
    """Up to three directions to show one by one: the largest curvature, the smallest, the worst by ``key``."""
    if len(dirs) <= 3:
        return list(dirs)
    return list(dict.fromkeys([dirs[0], max(dirs, key=key), dirs[-1]]))
