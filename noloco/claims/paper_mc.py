"""The paper audit's Monte Carlo: the scalar model's moments, the inner phase, seeds and trial budgets."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from noloco.theory import stats
from noloco.theory.config import OuterConfig
from noloco.quadratic.scalar import scalar_path

@dataclass(frozen=True)
class Moments:
    """Per trial, the mean over the recorded steps of phi_i^2, phi_i (phi_i' - phi_i), (phi_i - mean_G phi)^2
    (each over the replicas) and replica 0's phi_0 - mean_G(0) phi (arrays of one value per trial)."""

    phi2: np.ndarray
    phi_step: np.ndarray
    group2: np.ndarray
    lemma: np.ndarray


@dataclass(frozen=True)
class InnerPhase:
    """The inner phase's coefficient of Var(phi) in Var(Delta) and its noise term, each ``(mean, se)``."""

    coefficient: tuple
    noise: tuple


def simulate_moments(outer: OuterConfig, c: float, s2: float, *, steps: int, trials: int, seed, start: float = 0.0,
                     record_from: int = 0) -> Moments:
    """Monte Carlo of the scalar model (:func:`noloco.quadratic.scalar.scalar_path`, identical replicas at
    ``start``): per trial, the mean over steps t >= ``record_from`` of phi_i^2, phi_i (phi_i' - phi_i),
    (phi_i - mean_G phi)^2 (each averaged over the replicas; G is step t's fresh group) and of
    replica 0's own phi_0 - mean_G(0) phi (the replica average of that is 0 by construction)."""
    rng = np.random.default_rng(seed)
    phi2, phi_step, group2, lemma = (np.zeros(trials) for _ in range(4))
    y0 = np.full((trials, outer.replicas), float(start))
    for t, (y, mean_phi, new) in enumerate(scalar_path(outer, c, s2, steps, trials, rng, y0)):
        if t >= record_from:
            phi2 += (y * y).mean(1)
            phi_step += (y * (new - y)).mean(1)
            group2 += ((y - mean_phi) ** 2).mean(1)
            lemma += y[:, 0] - mean_phi[:, 0]
    recorded = steps - record_from
    return Moments(phi2=phi2 / recorded, phi_step=phi_step / recorded, group2=group2 / recorded,
                   lemma=lemma / recorded)


def ratio_se(numerator, denominator, batches: int = 40) -> tuple[float, float]:
    """sum(numerator) / sum(denominator) over independent trials and its delete-one jackknife
    standard error over ``batches`` blocks of trials (:func:`noloco.theory.stats.jackknife`)."""
    pairs = np.stack([np.asarray(numerator, float), np.asarray(denominator, float)], axis=1)
    blocks = np.array([b.sum(0) for b in np.array_split(pairs, min(batches, len(pairs)))])
    return stats.jackknife(lambda b: b[:, 0].sum() / b[:, 1].sum(), blocks)


def inner_phase_mc(lr: float, curvature: float, steps: int, noise: float, *, samples: int, seed) -> InnerPhase:
    """H real SGD steps theta <- theta - lr (lambda theta + sigma xi) from phi ~ N(0, 1) and from
    phi = 0: E Delta^2 = c^2 + s2 and s2, so the coefficient of Var(phi) in Var(Delta) is their
    difference."""
    rng = np.random.default_rng(seed)
    out = []
    for phi in (rng.standard_normal(samples), np.zeros(samples)):
        theta = phi.copy()
        for _ in range(steps):
            theta -= lr * (curvature * theta + noise * rng.standard_normal(samples))
        out.append(stats.mean_se((theta - phi) ** 2))
    (with_phi, se1), (alone, se0) = out
    return InnerPhase(coefficient=(with_phi - alone, math.hypot(se1, se0)), noise=(alone, se0))


def seed_stream(seed, *more) -> list:
    """A seed (an int or a list of ints) extended by ``more``: independent streams for the parts of one run."""
    return [*np.atleast_1d(seed).tolist(), *more]


def trial_count(replicas: int, steps: int, budget: float) -> int:
    """Trials for ``budget`` replica-steps, at most 2000 and at least 32, or 8 to 32 for large N (each
    trial already averages over N replicas; a standard error needs a few trials)."""
    return int(max(8, min(32, 16384 // replicas), min(2000, budget // (replicas * steps))))


def burn_in_steps(decay: float) -> int | None:
    """Burn-in to stationarity (:func:`noloco.theory.stats.burn_in`), or None where its cap would cut it
    short (a spread that relaxes too slowly for a Monte Carlo of a few hundred steps)."""
    burn = stats.burn_in(decay)
    return burn if burn == stats.burn_in(decay, cap=10 ** 9) else None
