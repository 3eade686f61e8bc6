"""Inner optimizers, vectorised over (trials, N, d), and the exact ``(c, s2)`` of one inner
phase under any learning-rate schedule (the schedules are :mod:`theory.schedules`).

Inner optimizer state (momentum buffer, Adam moments) is per replica and persists
across outer steps, as in DiLoCo implementations; the outer step only moves phi.
"""

from __future__ import annotations

import numpy as np

from quadratic.names import OPTIMIZERS
from theory.config import check_choice


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
        check_choice("optimizer", kind, OPTIMIZERS)  # the momentum is SimConfig's to validate
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
