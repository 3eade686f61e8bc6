"""The exchangeable second-moment recursion for any linear per-replica state: correlated
progress noise (the state an inner optimizer carries) and heterogeneous data (a
per-replica drift), on top of the same outer step.

Model, per eigen-direction and replica i (c, s2 as in :mod:`theory.symbolic`)::

    eps_i,t = rho * eps_i,t-1 + sqrt(1 - rho^2) * sqrt(s2) * xi_i,t     (AR(1), stationary Var = s2)
    Delta_i = -c * y_i + d_i + eps_i,t
    (y_i, delta_i) <- outer_step(y_i, delta_i, mean_G(y), mean_G(Delta))

``rho`` is the correlation of a replica's progress noise with its own noise one outer step
earlier; ``d_i`` is a fixed per-replica drift with zero mean over replicas (for a quadratic
whose replica optima are offset by b_i, ``d_i = c * b_i``; in a flat direction it is the
persistent bias of a replica's own data). With the state w_i = (y_i, delta_i, eps_i,t-1, d_i)
one outer step is linear::

    w_i' = F0 w_i + F1 mean_G(w) + g0 xi_i + g1 mean_G(xi),

and, exactly as for the i.i.d. model, for exchangeable replicas and fresh uniform
partitions the deviation covariance is S (x) (I - J) with::

    S' = (1 - kappa) F0 S F0^T + kappa M S M^T + (1 - kappa) g0 g0^T + kappa g g^T,
    M = F0 + F1,  g = g0 + g1,  kappa = (N - n) / (n (N - 1)).

(E[A](I-J) = E[A(I-J)A] = kappa (I-J) for the averaging matrix A, and A^2 = A for the
noise term.) The per-coordinate replica variance is E z^2 = (1 - 1/N) S_yy. The drift block
S_dd is constant, so the stationary S solves the linear system on the other entries; it is
finite when the spectral radius of that block's transition is below 1. With rho = 0 and no
drift this is the three-moment recursion of :mod:`theory.numeric`.

Everything here is numeric (numpy), built by applying :func:`theory.outer.outer_step` to
unit vectors; :func:`symbolic_maps` gives the same maps with sympy (a test compares them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from theory.config import OuterConfig, group_kappa
from theory.outer import outer_step

#: order of the per-replica state
STATE = ("y", "delta", "eps_prev", "drift")
_Y, _D, _E, _B = range(4)


def step_maps(outer: OuterConfig, c: float, rho: float = 0.0, s2: float = 1.0):
    """(F0, F1, g0, g1) of one outer step on w = (y, delta, eps_prev, drift): (4, 4) maps of the
    own state and of the group mean, (4,) maps of the own and the group-mean innovation xi."""
    if not -1 < rho < 1:
        raise ValueError(f"rho={rho!r} is out of range; allowed: -1 < rho < 1")
    rule = outer.rule()
    scale = math.sqrt((1 - rho * rho) * s2)

    def apply(own, mean, xi_own, xi_mean):
        eps_own = rho * own[_E] + scale * xi_own
        eps_mean = rho * mean[_E] + scale * xi_mean
        progress_mean = -c * mean[_Y] + mean[_B] + eps_mean
        y, delta = outer_step(own[_Y], own[_D], mean[_Y], progress_mean, **rule)
        return np.array([y, delta, eps_own, own[_B]])

    zero, eye = np.zeros(4), np.eye(4)
    F0 = np.column_stack([apply(eye[k], zero, 0.0, 0.0) for k in range(4)])
    F1 = np.column_stack([apply(zero, eye[k], 0.0, 0.0) for k in range(4)])
    return F0, F1, apply(zero, zero, 1.0, 0.0), apply(zero, zero, 0.0, 1.0)


def symbolic_maps(momentum: str = "heavy-ball"):
    """The same (F0, F1, g0, g1) as sympy matrices in alpha, beta, gamma, c, rho, s2."""
    import sympy as sp

    from theory.symbolic import alpha, beta, c, gamma, s2

    rho = sp.Symbol("rho", real=True)
    own = sp.symbols("y delta e b")
    mean = sp.symbols("gy gdelta ge gb")
    xi, gxi = sp.symbols("xi gxi")
    scale = sp.sqrt((1 - rho ** 2) * s2)
    progress_mean = -c * mean[_Y] + mean[_B] + rho * mean[_E] + scale * gxi
    y, delta = outer_step(own[_Y], own[_D], mean[_Y], progress_mean, alpha=alpha, beta=beta, gamma=gamma,
                          momentum=momentum)
    w = sp.Matrix([y, delta, rho * own[_E] + scale * xi, own[_B]])
    return (w.jacobian(sp.Matrix(own)), w.jacobian(sp.Matrix(mean)), w.jacobian(sp.Matrix([xi])),
            w.jacobian(sp.Matrix([gxi])))


@dataclass(frozen=True)
class Recursion:
    """S' = T S + forcing on vec(S) (4 x 4, row-major), for one setting and direction."""

    T: np.ndarray          # (16, 16)
    forcing: np.ndarray    # (16,)
    replicas: int

    @staticmethod
    def _indices(with_drift: bool) -> np.ndarray:
        """Entries of vec(S) that evolve: without drift, none that involve it; with drift, all
        but the constant S_dd (the cross moments S_yd, S_deltad then carry the drift in)."""
        if with_drift:
            return np.array([k for k in range(16) if k != _B * 4 + _B])
        return np.array([k for k in range(16) if _B not in divmod(k, 4)])

    def factor(self, with_drift: bool = False) -> float:
        """Spectral radius of the transition of the evolving moments. Without drift: the decay
        factor of the noise-free spread (= ``numeric.variance_decay_factor`` at rho = 0); with
        drift it also holds the cross moments, which relax like the mean deviation itself
        ((1 - kappa) F0 + kappa M); at or above 1 the drift drives the spread without bound."""
        idx = self._indices(with_drift)
        return float(np.max(np.abs(np.linalg.eigvals(self.T[np.ix_(idx, idx)]))))

    def step(self, S: np.ndarray) -> np.ndarray:
        return (self.T @ S.reshape(-1) + self.forcing).reshape(4, 4)

    def stationary(self, drift_var: float = 0.0) -> np.ndarray | None:
        """The fixed point S with S_dd = drift_var, or None when it is unstable."""
        with_drift = drift_var > 0
        if self.factor(with_drift) >= 1:
            return None
        idx, dd = self._indices(with_drift), _B * 4 + _B
        A = np.eye(len(idx)) - self.T[np.ix_(idx, idx)]
        S = np.zeros(16)
        S[idx] = np.linalg.solve(A, self.forcing[idx] + self.T[idx, dd] * drift_var)
        S[dd] = drift_var
        return S.reshape(4, 4)

    def spread(self, S: np.ndarray) -> float:
        """E z^2 per coordinate: (1 - 1/N) S_yy."""
        return (1 - 1 / self.replicas) * float(S[_Y, _Y])


def recursion(outer: OuterConfig, c: float, s2: float, rho: float = 0.0) -> Recursion:
    F0, F1, g0, g1 = step_maps(outer, c, rho, s2)
    kappa = group_kappa(outer.replicas, outer.group_size)
    M, g = F0 + F1, g0 + g1
    T = (1 - kappa) * np.kron(F0, F0) + kappa * np.kron(M, M)
    forcing = (1 - kappa) * np.outer(g0, g0) + kappa * np.outer(g, g)
    return Recursion(T, forcing.reshape(-1), outer.replicas)


def initial(s2: float, rho: float, drift_var: float, spread0: float = 0.0) -> np.ndarray:
    """S at t = 0: replicas at ``spread0`` (variance of y deviations per coordinate, S units), the
    noise process stationary (Var s2) when it is correlated, the drift at ``drift_var``."""
    S = np.zeros((4, 4))
    S[_Y, _Y] = spread0
    S[_E, _E] = s2 if rho else 0.0
    S[_B, _B] = drift_var
    return S


def stationary_spread(outer: OuterConfig, c: float, s2: float, rho: float = 0.0, drift_var: float = 0.0) -> float:
    """Stationary E[(phi_i - mean_j phi_j)^2] per coordinate; inf where unstable; 0 for n = N or N = 1."""
    if outer.group_size == outer.replicas:
        return 0.0
    rec = recursion(outer, c, s2, rho)
    S = rec.stationary(drift_var)
    return math.inf if S is None else rec.spread(S)


def spread_trajectory(outer: OuterConfig, c: float, s2: float, steps: int, rho: float = 0.0,
                      drift_var: float = 0.0, spread0: float = 0.0) -> np.ndarray:
    """Exact E z_t^2 per coordinate for t = 0..steps."""
    rec = recursion(outer, c, s2, rho)
    S = initial(s2, rho, drift_var, spread0)
    out = [rec.spread(S)]
    for _ in range(steps):
        S = rec.step(S)
        out.append(rec.spread(S))
    return np.array(out)


def decay_factor(outer: OuterConfig, c: float, rho: float = 0.0, with_drift: bool = False) -> float:
    """Noise-free decay factor per outer step of the second moments (the AR(1) noise process's
    own relaxation rho^2 included); see :meth:`Recursion.factor` for ``with_drift``."""
    return recursion(outer, c, 1.0, rho).factor(with_drift)


def momentum_noise_correlation(momentum: float, steps: int, phases: int = 200) -> float:
    """rho produced by an inner SGD with heavy-ball momentum ``momentum`` (buffer b <- mu b + g,
    theta <- theta - eta b) whose buffer is carried from one inner phase of ``steps`` steps into
    the next, in a flat direction with white gradient noise: the exact lag-1 correlation of
    consecutive phases' progress noise (an MA process; its lag-1 correlation is the AR(1) rho that
    matches the first autocovariance). Adam's first moment (an EMA with beta1) carries state the
    same way at small learning rates, with mu = beta1 and the gradient scaled by (1 - beta1)."""
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum={momentum!r} is out of range; allowed: 0 <= momentum < 1")
    j = np.arange(phases * steps)

    def weight(phase):  # weight of noise j in the progress of `phase`: sum over its steps k >= j of mu^(k-j)
        start, stop = phase * steps, (phase + 1) * steps
        first = np.maximum(j, start)
        count = np.clip(stop - first, 0, None)
        return momentum ** (first - j) * (1 - momentum ** count) / (1 - momentum)

    w_t, w_prev = weight(phases - 1), weight(phases - 2)
    return float(w_t @ w_prev / math.sqrt((w_t @ w_t) * (w_prev @ w_prev)))
