"""The exact stationary moments of one replica about the optimum, on the scalar model of one
eigen-direction: what the NoLoCo paper calls Var(phi), Cov(phi, delta) and Var(phi_i - mean_G phi).

The replica mean x_bar = (y_bar, u_bar) follows x_bar' = M x_bar + l mean(eps) (its second moments: the
three-moment recursion at kappa = 1, i.e. M (x) M, with forcing s2 / N), the deviations z_i the
recursion v' = T v + s2 (1/n - 1/N) f; the two are uncorrelated (exchangeability), so
Var(phi_i) = E y_bar^2 + E z^2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from noloco.theory import numeric
from noloco.theory.config import OuterConfig
from noloco.theory.exchangeable import step_maps


@dataclass(frozen=True)
class Moments:
    """Stationary second moments of one replica per coordinate (inf where unbounded)."""

    var_phi: float         # Var(phi_i) about the optimum: the mean part plus the spread
    mean_part: float       # E (mean_j phi_j)^2
    spread: float          # E (phi_i - mean_j phi_j)^2
    cov_phi_step: float    # Cov(phi_i,t, phi_i,t+1 - phi_i,t): the paper's Cov(phi, delta) (Eqs 3, 54)
    var_phi_group: float   # Var(phi_i - mean_G phi), G a fresh group (Conjecture 1)
    correlation: float     # corr(phi_i, phi_j), i != j (what the independence assumption sets to 0)


def _stationary(T, forcing) -> np.ndarray:
    return np.linalg.solve(np.eye(3) - T, forcing)


def _symmetric(v) -> np.ndarray:
    return np.array([[v[0], v[1]], [v[1], v[2]]])


def exact_moments(outer: OuterConfig, c: float, s2: float) -> Moments:
    """The exact stationary moments (module docstring). With S_z = E z_i z_i^T and P the mean's
    covariance, E[x_i mean_G(x)^T] = P + kappa S_z, so one step gives
    Cov(x_i, x_i') = (P + S_z) L0^T + (P + kappa S_z) L1^T (L0, L1 the own and group-mean maps of
    the outer step, :func:`noloco.theory.exchangeable.step_maps`)."""
    N, n, kappa = outer.replicas, outer.group_size, outer.kappa
    rule = (outer.alpha, outer.beta, outer.gamma)
    _, T, f = numeric.transition(*rule, c, kappa, outer.momentum)
    # kappa = 1: M (x) M, in which the pull cancels exactly; gamma = 0 keeps a huge gamma's terms from cancelling
    # in floating point (gamma = 1e6 left I - T singular)
    _, T_mean, _ = numeric.transition(outer.alpha, outer.beta, 0.0, c, 1.0, outer.momentum)
    inf = np.full(3, math.inf)
    mean = _stationary(T_mean, s2 / N * f) if numeric.mean_stable(*rule, c, outer.momentum) else inf
    share = float(numeric.noise_share(N, n))
    if share == 0:
        dev = np.zeros(3)
    elif numeric.spread_stable(*rule, c, kappa, outer.momentum):
        dev = _stationary(T, s2 * share * f)
    else:
        dev = inf
    var_phi = float(mean[0] + dev[0])
    if not math.isfinite(var_phi):
        return Moments(math.inf, float(mean[0]), float(dev[0]), math.nan, math.nan, math.nan)
    F0, F1, _, _ = step_maps(outer, c, 0.0, s2)
    Pm, Sz = _symmetric(mean), _symmetric(dev)
    cross = (Pm + Sz) @ F0[:2, :2].T + (Pm + kappa * Sz) @ F1[:2, :2].T
    group = float(dev[0]) * N * (n - 1) / ((N - 1) * n) if N > 1 else 0.0
    corr = (float(mean[0]) - float(dev[0]) / (N - 1)) / var_phi if N > 1 and var_phi > 0 else math.nan
    return Moments(var_phi, float(mean[0]), float(dev[0]), float(cross[0, 0]) - var_phi, group, corr)
