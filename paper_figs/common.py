"""Settings and Monte Carlo estimators shared by the figure scripts."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from theory import numeric
from theory.config import PRESETS
from theory.verify import simulate_scalar

PAPER = PRESETS["paper"]          # pairs, alpha 0.5, beta = gamma = 0.7, H 50, N 8, eta 0.01, sigma 1
CURVATURE = 1.0


def paper_c_s2(lr: float = PAPER.inner.lr, steps: int = PAPER.inner.steps, curvature: float = CURVATURE):
    """(c, s2) of the paper's inner phase on one direction of curvature ``curvature``."""
    c, s2 = numeric.inner_sgd(lr, curvature, steps, PAPER.inner.noise)
    return float(c), float(s2)


def outer(**changes):
    return dataclasses.replace(PAPER.outer, **changes)


def mc_stationary(o, c, s2, *, trials: int, burn: int, window: int, seed: int) -> tuple[float, float]:
    """Stationary replica variance: per trial the mean over a window after a burn-in, then
    mean and standard error over independent trials."""
    v = simulate_scalar(o, c, s2, burn + window, trials, np.random.default_rng(seed), record_from=burn + 1)
    per_trial = v.mean(1)
    return float(per_trial.mean()), float(per_trial.std(ddof=1) / math.sqrt(trials))


def burn_in(o, c, tolerance: float = 1e-3, cap: int = 400) -> int:
    """Steps for the noise-free transient to fall to ``tolerance`` of its size."""
    decay = float(numeric.variance_decay_factor(o.alpha, o.beta, o.gamma, c, o.kappa, o.momentum))
    return int(np.clip(math.ceil(math.log(tolerance) / math.log(max(decay, 1e-3))), 10, cap))


def mc_decay(o, c, *, trials: int, t1: int, t2: int, seed: int) -> tuple[float, float]:
    """Per-step ratio (E v_t2 / E v_t1)^(1/(t2 - t1)) of the noise-free replica variance from
    independent unit initial offsets; standard error by the delta method over trials."""
    rng = np.random.default_rng(seed)
    v = simulate_scalar(o, c, 0.0, t2, trials, rng, y0=rng.standard_normal((trials, o.replicas)))
    m1, m2 = v[:, t1].mean(), v[:, t2].mean()
    k = t2 - t1
    ratio = (m2 / m1) ** (1 / k)
    rel = np.std(v[:, t2] / m2 - v[:, t1] / m1, ddof=1) / math.sqrt(trials)
    return float(ratio), float(ratio * rel / k)
