"""Inner optimizers, vectorised over (trials, N, d), the exact ``(c, s2)`` of one inner
phase under any learning-rate schedule (the schedules are :mod:`noloco.theory.schedules`), and
the Gaussian noise the simulator draws (:class:`Noise`).

Inner optimizer state (momentum buffer, Adam moments) is per replica and persists
across outer steps, as in DiLoCo implementations; the outer step only moves phi.
"""

from __future__ import annotations

import numpy as np

from noloco.quadratic.names import OPTIMIZERS
from noloco.infra.checks import check_choice
from noloco.theory.draws import fast_normal


def phase_coefficients(lrs, curvatures, noise):
    """(c, s2) per direction of one inner phase of SGD with per-step rates ``lrs``:
    y -> (1 - c) y + eps with c = 1 - prod_h r_h, r_h = 1 - eta_h lambda, and
    Var(eps) = sigma^2 sum_h eta_h^2 prod_{h' > h} r_h'^2. Generalises
    :func:`noloco.theory.numeric.inner_sgd` (constant rate) to any schedule."""
    lrs = np.asarray(lrs, dtype=float)[:, None]
    r = 1.0 - lrs * np.asarray(curvatures, dtype=float)[None, :]
    after = np.cumprod(r[::-1], axis=0)[::-1]            # prod_{h' >= h} r_h'
    tail = np.vstack([after[1:], np.ones_like(after[:1])])  # prod_{h' > h} r_h'
    with np.errstate(over="ignore"):  # a noise of 1e300 overflows to inf: reported, not raised
        return 1.0 - after[0], np.square(np.float64(noise)) * np.sum(lrs ** 2 * tail ** 2, axis=0)


class Noise:
    """Standard normal draws for the simulator, about 2 ns each where numpy's
    ``standard_normal`` takes 9 ns (the draws, not the arithmetic, bound the inner steps):
    :func:`noloco.theory.draws.fast_normal` (Box-Muller on the generator's raw bits, float32
    arithmetic; its docstring says how close to Gaussian), with a reused scratch buffer."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self._scratch = np.empty(0, np.float32)

    def fill(self, out: np.ndarray, scale: float = 1.0) -> np.ndarray:
        """Write ``scale`` times independent N(0, 1) draws into the contiguous array ``out``."""
        half = (out.size + 1) // 2
        if self._scratch.size < half:
            self._scratch = np.empty(half, np.float32)
        return fast_normal(self.rng, out, scale, self._scratch[:half])


class InnerOptimizer:
    """One optimizer for all replicas; ``step`` updates theta in place."""

    def __init__(self, kind: str, shape, *, momentum: float = 0.9, betas=(0.9, 0.999), eps: float = 1e-8,
                 dtype=np.float64):
        check_choice("optimizer", kind, OPTIMIZERS)  # the momentum is SimConfig's to validate
        self.kind, self.momentum, self.betas, self.eps = kind, momentum, betas, eps
        self.buf = np.zeros(shape, dtype) if kind != "sgd" else None
        self.sq = np.zeros(shape, dtype) if kind == "adam" else None
        self.count = 0

    def permute(self, take) -> None:
        """Move the per-replica state with its replica: ``take(array)`` returns the array in the
        replicas' new order (the simulator regroups replicas by moving their rows)."""
        if self.buf is not None:
            self.buf = take(self.buf)
        if self.sq is not None:
            self.sq = take(self.sq)

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
