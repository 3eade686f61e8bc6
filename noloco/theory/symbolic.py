"""Exact theory of NoLoCo on a quadratic, derived with sympy from :func:`noloco.theory.outer.outer_step`.

Model (one eigen-direction of a quadratic with curvature lambda; y = phi - optimum).
The inner phase of H SGD steps with learning rate eta and additive gradient noise of
standard deviation sigma maps the outer weights to the progress::

    Delta_i = -c * y_i + eps_i,   c = 1 - (1 - eta*lambda)^H,
    Var(eps_i) = s2 = eta^2 sigma^2 sum_{k<H} (1 - eta*lambda)^(2k),

independently over replicas and steps. Stack x_i = (y_i, delta_i). Applying the
outer step to symbols shows it is linear::

    x_i' = L0 x_i + L1 mean_G(i)(x) + l mean_G(i)(eps).

With A the averaging matrix of the step's random partition (A_ij = 1/n when i, j
share a group) and J = 11^T / N:

* The replica mean follows x_bar' = M x_bar + l mean(eps) with M = L0 + L1,
  because A J = J: the pull towards the group mean cancels in the mean. M is
  exactly DiLoCo's heavy-ball (or Nesterov) outer step with step beta*c and
  momentum alpha.
* The deviations z = (I - J) x have, when the replicas are exchangeable (same
  initialisation, fresh uniform partitions), a covariance S (x) (I - J) with a
  2 x 2 block S = [[E z^2, E z u], [E z u, E u^2]] (per coordinate, after the
  factor (1 - 1/N) that turns (I - J) into the diagonal), and since
  E[A] (I - J) = kappa (I - J) and E[A (I - J) A] = kappa (I - J),
  kappa = (N - n) / (n (N - 1)), it closes into::

      S' = (1 - kappa) L0 S L0^T + kappa M S M^T + s2 (1/n - 1/N) l l^T.

  The three exchangeable second moments vech(S) = (E z^2, E z u, E u^2) follow a
  3 x 3 linear recursion v' = T v + s2 (1/n - 1/N) f.

Everything below is computed from that, for both momentum conventions.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import sympy as sp

from noloco.theory.jury import jury_cubic, jury_quadratic
from noloco.theory.outer import outer_step

alpha, beta, gamma, c, kappa, s2 = sp.symbols("alpha beta gamma c kappa s2", real=True)
eta, lam, sigma = sp.symbols("eta lambda sigma", positive=True)
H, N, n = sp.symbols("H N n", positive=True, integer=True)
z = sp.Symbol("z")

#: 1/n - 1/N, the per-coordinate noise forcing of the deviations, written with kappa:
#: n = N / (1 + kappa (N - 1)) gives 1/n - 1/N = kappa (N - 1) / N.
NOISE_SHARE = kappa * (N - 1) / N


@dataclass(frozen=True)
class Theory:
    """Symbolic results for one momentum convention."""

    momentum: str
    L0: sp.Matrix          # own-state part of the outer step on (y, delta)
    L1: sp.Matrix          # group-mean part
    l: sp.Matrix           # how the group-mean noise enters
    M: sp.Matrix           # replica-mean transition (L0 + L1)
    T: sp.Matrix           # second-moment transition on vech(S) = (E z^2, E z u, E u^2)
    f: sp.Matrix           # noise forcing direction vech(l l^T)
    mean_charpoly: tuple   # monic coefficients (a1, a0) of det(z I - M)
    spread_charpoly: tuple  # monic coefficients (a2, a1, a0) of det(z I - T)
    spread_ratio: sp.Expr  # R: stationary E z^2 = s2 (1/n - 1/N) R
    mean_stability: tuple  # Jury inequalities (each expr > 0) for |roots of M| < 1
    spread_stability: tuple  # Jury inequalities (each expr > 0) for |roots of T| < 1

    @property
    def stationary_variance(self) -> sp.Expr:
        """Stationary E[(phi_i - mean_j phi_j)^2] per coordinate."""
        return s2 * NOISE_SHARE * self.spread_ratio


def _linearise(momentum: str):
    y, d, gy, gd, geps = sp.symbols("y delta_ gy gdelta geps")
    new_y, new_d = outer_step(y, d, gy, -c * gy + geps, alpha=alpha, beta=beta, gamma=gamma, momentum=momentum)
    out = sp.Matrix([new_y, new_d])
    return (out.jacobian(sp.Matrix([y, d])), out.jacobian(sp.Matrix([gy, gd])),
            out.jacobian(sp.Matrix([geps])))


def _vech_transition(L0: sp.Matrix, M: sp.Matrix) -> sp.Matrix:
    s = sp.symbols("s_zz s_zu s_uu")
    S = sp.Matrix([[s[0], s[1]], [s[1], s[2]]])
    new = (1 - kappa) * L0 * S * L0.T + kappa * M * S * M.T
    return sp.Matrix([new[0, 0], new[0, 1], new[1, 1]]).jacobian(sp.Matrix(s)).expand()


def _monic_coefficients(matrix: sp.Matrix) -> tuple:
    poly = sp.Poly(matrix.charpoly(z).as_expr(), z)
    return tuple(sp.factor(coef) for coef in poly.all_coeffs()[1:])


@functools.lru_cache(maxsize=None)
def derive(momentum: str = "heavy-ball") -> Theory:
    """All symbolic results for ``momentum`` in {"heavy-ball", "nesterov"} (about 1 s each)."""
    L0, L1, l = _linearise(momentum)
    M = (L0 + L1).expand()
    T = _vech_transition(L0, M)
    f = sp.Matrix([l[0] ** 2, l[0] * l[1], l[1] ** 2])
    # Cramer's rule on (I - T) v = f: two polynomial determinants factor quickly,
    # where simplifying a generic LU solution does not.
    A = sp.eye(3) - T
    A_z = A.copy()
    A_z[:, 0] = f
    ratio = sp.factor(A_z.det(method="berkowitz").expand()) / sp.factor(A.det(method="berkowitz").expand())
    mean_cp = _monic_coefficients(M)
    spread_cp = _monic_coefficients(T)
    return Theory(
        momentum=momentum, L0=L0, L1=L1, l=l, M=M, T=T, f=f,
        mean_charpoly=mean_cp, spread_charpoly=spread_cp, spread_ratio=ratio,
        mean_stability=tuple(sp.factor(e) for e in jury_quadratic(*mean_cp)),
        spread_stability=tuple(sp.factor(e) for e in jury_cubic(*spread_cp)),
    )


def inner_map() -> tuple[sp.Expr, sp.Expr]:
    """(c, s2) of H SGD steps, as sympy expressions in eta, lambda, H, sigma."""
    r = 1 - eta * lam
    k = sp.Symbol("k", integer=True, nonnegative=True)
    c_expr = 1 - r ** H
    s2_expr = eta ** 2 * sigma ** 2 * sp.summation(r ** (2 * k), (k, 0, H - 1))
    return c_expr, s2_expr


def limits(momentum: str = "heavy-ball") -> dict[str, sp.Expr]:
    """The stationary spread in special cases (per coordinate).

    ``diloco`` n = N; ``no_sync`` n = 1; ``gamma0`` no pull term; ``flat`` c -> 0;
    ``small_lr``: leading order as eta -> 0 with c = eta lambda H, s2 = eta^2 sigma^2 H
    (for gamma > 0; ``small_lr_gamma0`` for gamma = 0).
    """
    th = derive(momentum)
    V_kappa = th.stationary_variance
    small = {c: eta * lam * H, s2: eta ** 2 * sigma ** 2 * H}
    leading = lambda expr: sp.simplify(sp.limit(expr.subs(small) / eta ** 2, eta, 0) * eta ** 2)
    leading_g0 = lambda expr: sp.simplify(sp.limit(expr.subs(small) / eta, eta, 0) * eta)
    return {
        "diloco": sp.simplify(V_kappa.subs(kappa, 0)),
        "no_sync": sp.factor(V_kappa.subs(kappa, 1)),
        "gamma0": sp.factor(V_kappa.subs(gamma, 0)),
        "flat": sp.factor(sp.limit(V_kappa, c, 0)),
        "small_lr": leading(V_kappa),
        "small_lr_gamma0": leading_g0(V_kappa.subs(gamma, 0)),
    }
