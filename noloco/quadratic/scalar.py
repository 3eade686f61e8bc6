"""Monte Carlo of the scalar model of one eigen-direction: the progress of an inner phase
is ``Delta = -c y + eps`` with ``Var(eps) = s2``, vectorised over trials and replicas with
the shared outer step and partitions (the model the closed forms of :mod:`noloco.theory` describe)."""

from __future__ import annotations

import numpy as np

from noloco.theory.config import OuterConfig
from noloco.theory.outer import outer_step
from noloco.theory.partitions import group_mean, random_permutations


def scalar_path(outer: OuterConfig, c: float, s2: float, steps: int, trials: int, rng, y0=None):
    """The scalar model's outer steps from ``y0`` (default: every replica at the optimum), one at a time:
    yields ``(y, group means of y, next y)``, arrays of shape (trials, N), for each of ``steps`` steps.
    Each step draws a fresh partition per trial, then the progress noise."""
    N, n = outer.replicas, outer.group_size
    y = np.zeros((trials, N)) if y0 is None else np.array(y0, dtype=float)
    outer_momentum = np.zeros_like(y)
    noise_std = np.sqrt(s2)
    for _ in range(steps):
        perm = random_permutations(rng, (trials,), N)
        mean_y = group_mean(y, perm, n)
        delta_y = -c * y + noise_std * rng.standard_normal(y.shape)  # the inner phase's progress
        new, outer_momentum = outer_step(y, outer_momentum, mean_y, group_mean(delta_y, perm, n), **outer.rule())
        yield y, mean_y, new
        y = new


def simulate_scalar(outer: OuterConfig, c: float, s2: float, steps: int, trials: int, rng,
                    y0=None, record_from: int = 0):
    """Monte Carlo of the scalar model. Returns the per-trial replica variance
    mean_i (y_i - mean_j y_j)^2 at every step t >= record_from: shape (trials, steps + 1 - record_from)."""
    y = np.zeros((trials, outer.replicas)) if y0 is None else np.array(y0, dtype=float)
    spread = []
    for t, (y, _, new) in enumerate(scalar_path(outer, c, s2, steps, trials, rng, y)):
        if t >= record_from:
            spread.append(y.var(axis=1))
        y = new
    if steps >= record_from:
        spread.append(y.var(axis=1))
    return np.stack(spread, axis=1)
