"""Monte Carlo of the scalar model of one eigen-direction: the progress of an inner phase
is ``Delta = -c y + eps`` with ``Var(eps) = s2``, vectorised over trials and replicas with
the shared outer step and partitions (the model the closed forms of :mod:`theory` describe)."""

from __future__ import annotations

import numpy as np

from noloco.theory.config import OuterConfig
from noloco.theory.outer import outer_step
from noloco.theory.partitions import group_mean, random_permutations


def simulate_scalar(outer: OuterConfig, c: float, s2: float, steps: int, trials: int, rng,
                    y0=None, record_from: int = 0):
    """Monte Carlo of the scalar model. Returns the per-trial replica variance
    mean_i (y_i - mean_j y_j)^2 at every step t >= record_from: shape (trials, steps + 1 - record_from)."""
    N, n = outer.replicas, outer.group_size
    y = np.zeros((trials, N)) if y0 is None else np.array(y0, dtype=float)
    outer_momentum = np.zeros_like(y)
    noise_std = np.sqrt(s2)
    spread = []
    for t in range(steps + 1):
        if t >= record_from:
            spread.append(y.var(axis=1))
        if t == steps:
            break
        perm = random_permutations(rng, (trials,), N)
        delta_y = -c * y + noise_std * rng.standard_normal(y.shape)  # the inner phase's progress
        y, outer_momentum = outer_step(y, outer_momentum, group_mean(y, perm, n), group_mean(delta_y, perm, n),
                                       **outer.rule())
    return np.stack(spread, axis=1)
