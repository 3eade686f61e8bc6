"""Inner optimizers and learning-rate schedules, vectorised over (trials, N, d).

Inner optimizer state (momentum buffer, Adam moments) is per replica and persists
across outer steps, as in DiLoCo implementations; the outer step only moves phi.
"""

from __future__ import annotations

import math

import numpy as np

from quadratic.names import OPTIMIZERS, SCHEDULES
from theory.config import ConfigError



def learning_rates(schedule: str, lr: float, total: int, *, warmup: int = 0, decay_time: float = 1.0) -> np.ndarray:
    """Learning rate of every inner step k = 0..total-1 of the run.

    constant: lr. cosine: linear warm-up over ``warmup`` steps, then lr * (1 + cos(pi p)) / 2
    with p the fraction of the remaining steps done. inverse: lr / (1 + k / decay_time), the
    1/t schedule under which SGD's noise vanishes.
    """
    k = np.arange(total, dtype=float)
    if schedule == "constant":
        return np.full(total, lr)
    if schedule == "cosine":
        if not 0 <= warmup < total:
            raise ConfigError(f"warmup={warmup} is out of range; allowed: 0 <= warmup < total inner steps ({total})")
        ramp = np.minimum(1.0, (k + 1) / warmup) if warmup else np.ones(total)
        p = np.clip((k - warmup) / max(total - warmup, 1), 0, 1)
        return lr * ramp * np.where(k < warmup, 1.0, 0.5 * (1 + np.cos(math.pi * p)))
    if schedule == "inverse":
        if not decay_time > 0:
            raise ConfigError(f"decay_time={decay_time} is out of range; allowed: > 0")
        return lr / (1.0 + k / decay_time)
    raise ConfigError(f"schedule={schedule!r} is not allowed; allowed: {', '.join(SCHEDULES)}")


def phase_coefficients(lrs, curvatures, noise):
    """(c, s2) per direction of one inner phase of SGD with per-step rates ``lrs``:
    y -> (1 - c) y + eps with c = 1 - prod_h r_h, r_h = 1 - eta_h lambda, and
    Var(eps) = sigma^2 sum_h eta_h^2 prod_{h' > h} r_h'^2. Generalises
    :func:`theory.numeric.inner_sgd` (constant rate) to any schedule."""
    lrs = np.asarray(lrs, dtype=float)[:, None]
    r = 1.0 - lrs * np.asarray(curvatures, dtype=float)[None, :]
    after = np.cumprod(r[::-1], axis=0)[::-1]            # prod_{h' >= h} r_h'
    tail = np.vstack([after[1:], np.ones_like(after[:1])])  # prod_{h' > h} r_h'
    return 1.0 - after[0], noise ** 2 * np.sum(lrs ** 2 * tail ** 2, axis=0)


class InnerOptimizer:
    """One optimizer for all replicas; ``step`` updates theta in place."""

    def __init__(self, kind: str, shape, *, momentum: float = 0.9, betas=(0.9, 0.999), eps: float = 1e-8):
        if kind not in OPTIMIZERS:
            raise ConfigError(f"inner optimizer={kind!r} is not allowed; allowed: {', '.join(OPTIMIZERS)}")
        if not 0 <= momentum < 1:
            raise ConfigError(f"inner_momentum={momentum} is out of range; allowed: 0 <= inner_momentum < 1")
        self.kind, self.momentum, self.betas, self.eps = kind, momentum, betas, eps
        self.buf = np.zeros(shape) if kind != "sgd" else None
        self.sq = np.zeros(shape) if kind == "adam" else None
        self.count = 0

    def step(self, theta, grad, lr):
        """theta -= lr * direction(grad); ``grad`` is used as scratch."""
        if self.kind == "sgd":
            grad *= lr
            theta -= grad
        elif self.kind == "momentum":  # torch SGD(momentum): buf = mu buf + g; theta -= lr buf
            self.buf *= self.momentum
            self.buf += grad
            theta -= lr * self.buf
        else:
            b1, b2 = self.betas
            self.count += 1
            self.buf *= b1
            self.buf += (1 - b1) * grad
            self.sq *= b2
            grad *= grad
            grad *= 1 - b2
            self.sq += grad
            step = lr / (1 - b1 ** self.count)
            denom = np.sqrt(self.sq / (1 - b2 ** self.count))
            denom += self.eps
            theta -= step * self.buf / denom
