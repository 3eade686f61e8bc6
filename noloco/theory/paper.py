"""The NoLoCo paper's own forms (arXiv 2506.10911, Appendix A and Section 5.3), written once, in the
toolkit's notation, next to the exact theory they approximate.

Notation (docs/paper.md has the full map): the paper's m inner steps are H, its inner learning rate
omega is ``lr``, an eigenvalue Lambda_i of A is ``curvature`` (lambda), b = 1 - lr * lambda, and the
gradient noise per direction has standard deviation ``noise`` (sigma^2 = lambda^2 Sigma in the
paper's terms). Every function broadcasts over numpy arrays. The exact counterparts live in
:mod:`noloco.theory.numeric` (c = 1 - b^H and s2 from :func:`~noloco.theory.numeric.inner_sgd`, the mean's
and the spread's stability, the stationary spread); :mod:`noloco.claims.paper` sets the two side by side.

Where the printed equation is garbled the reading is a parameter: ``power`` is the exponent of
gamma in Eq 55 (2 as printed, 1 the other reading) and ``factor`` the multiple k of Conjecture 1's
k (n - 1)/n (1: the reading of independent replicas, 2: the one Eq 56 uses).
"""

from __future__ import annotations


import numpy as np
from scipy.special import erf

from noloco.theory.numeric import inner_sgd
from noloco.theory.stability import is_stable

#: the printed readings: gamma squared in Eq 55, and Eq 56's 2 gamma^2 (n - 1)/n (Conjecture 1 with k = 2)
PRINTED_POWER, PRINTED_FACTOR = 2, 2


def _share(n):
    """(n - 1) / n, the factor every A.3 approximation carries."""
    n = np.asarray(n, dtype=float)
    return (n - 1) / n


# ------------------------------------------------------------------ A.1: one inner phase

def inner_coefficient(lr, curvature, steps):
    """Eq 30 per direction: B_V = lr^2 lambda^2 (1 - b^(2H)) / (1 - b^2), the coefficient of
    Var(phi) in the paper's Var(Delta) (Eq 22 drops the covariance between inner steps, so it
    sums squares, lr^2 lambda^2 sum_k b^(2k), where the exact coefficient is the square of the
    sum, c^2 = (lr lambda sum_k b^k)^2 = (1 - b^H)^2). The Kronecker power printed B^k is read
    B^m (m = H). It is lambda^2 times the inner noise variance at unit noise."""
    _, unit_noise = inner_sgd(lr, curvature, steps, 1.0)
    return np.asarray(curvature, dtype=float) ** 2 * unit_noise


def inner_noise_term(lr, curvature, steps, noise):
    """Eqs 23-25 per direction: R' = lr^2 (H sigma^2 + lambda^2 sum_{k<H} Var(theta_k)), the
    paper's noise part of Var(Delta), with Var(theta_k) = lr^2 sigma^2 (1 - b^(2k)) / (1 - b^2)
    the inner weights' variance after k steps from a fixed start (Eq 16). The exact noise
    variance of the progress is s2 = lr^2 sigma^2 sum_{k<H} b^(2k) (inner steps anticorrelated)."""
    lr, curvature, noise = (np.asarray(x, dtype=float) for x in (lr, curvature, noise))
    _, per_phase = inner_sgd(lr, curvature, steps, 1.0)        # lr^2 sum_{k<H} b^(2k)
    b2 = (1 - lr * curvature) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        # sum_{k<H} (1 - b^(2k)) / (1 - b^2) = (H - sum_k b^(2k)) / (1 - b^2); H (H - 1) / 2 as b^2 -> 1
        spread_sum = np.where(np.isclose(b2, 1.0, rtol=0, atol=1e-12), steps * (steps - 1) / 2.0,
                              (steps - per_phase / lr ** 2) / (1 - b2))
    return lr ** 2 * noise ** 2 * (steps + lr ** 2 * curvature ** 2 * spread_sum)


# ------------------------------------------------------------------ A.2: the mean (Theorem 2)

def mean_eigenvalue(alpha, beta, lr, curvature, steps):
    """Eq 53: D_i = 1 + alpha - beta (1 - (1 - lr Lambda_i)^m), the eigenvalue of D in the mean's
    recursion E phi(t+1) = D E phi(t) - alpha E phi(t-1) (Eq 43). Its characteristic polynomial
    z^2 - D z + alpha is the heavy-ball one of the exact theory (step beta c, momentum alpha)."""
    c, _ = inner_sgd(lr, curvature, steps, 0.0)
    return 1 + np.asarray(alpha, dtype=float) - np.asarray(beta, dtype=float) * c


def mean_roots(D, alpha):
    """Eqs 45-46: r1, r2 = (D +- sqrt(D^2 - 4 alpha)) / 2, complex where D^2 < 4 alpha."""
    root = np.sqrt(np.asarray(D * D - 4 * np.asarray(alpha), dtype=complex))
    return (D + root) / 2, (D - root) / 2


def roots_ordered(D, alpha):
    """The paper's claim after Eq 46, that 0 < r2 <= r1 <= D (real roots), as a test: True where it holds."""
    r1, r2 = mean_roots(D, alpha)
    real = (np.asarray(D * D - 4 * np.asarray(alpha)) >= 0)
    return real & (r2.real > 0) & (r2.real <= r1.real) & (r1.real <= D)


def mean_criterion(D):
    """After Eq 46: the mean converges if |D_i| < 1 for every direction (the paper's test)."""
    return is_stable(np.abs(D))


def mean_sufficient(alpha, beta):
    """End of A.2: for m large and 0 < lr Lambda_i <= 1, beta > alpha is sufficient for E phi -> 0."""
    return np.asarray(beta) > np.asarray(alpha)


# ------------------------------------------------------------------ A.2-A.3: the spread

def conjecture_factor(n, factor: int = 1):
    """Conjecture 1: Var(phi_i - mean_G phi) ~ k (n - 1)/n Var(phi_i); k = 1 for independent
    replicas, k = 2 the other reading of the garbled print (the one Eq 56 uses)."""
    return factor * _share(n)


def covariance_factor(gamma, n, power: int = PRINTED_POWER):
    """Eq 55: Cov(phi, delta) ~ -gamma^power ((n - 1)/n) Var(phi) (printed with gamma squared;
    the first power is what the pull term alone gives for independent replicas)."""
    return -np.asarray(gamma, dtype=float) ** power * _share(n)


def variance_recursion(alpha, beta, gamma, n, coefficient, noise_term, power: int = PRINTED_POWER,
                       factor: int = PRINTED_FACTOR):
    """Eqs 54-70: (d_V, E_V, R'') of the paper's recursion U(t+1) = d_V U(t) + E_V U(t-1) + R''
    for U = Var(phi) per direction, under its independence assumption:

        d_V = 1 + alpha^2 - 2 q,   q = gamma^power (n - 1)/n        (Eqs 54-55, 69)
        C_V = beta^2 B_V / n + k gamma^2 (n - 1)/n                  (Eqs 56, 60)
        E_V = C_V - alpha^2 (1 - 2 q),   R'' = beta^2 R' / n        (Eqs 61, 70)

    with B_V = ``coefficient`` (:func:`inner_coefficient`) and R' = ``noise_term``
    (:func:`inner_noise_term`). As printed, power = 2 and k = 2."""
    alpha, beta = np.asarray(alpha, dtype=float), np.asarray(beta, dtype=float)
    q = -covariance_factor(gamma, n, power)
    d = 1 + alpha ** 2 - 2 * q
    C = beta ** 2 * coefficient / n + np.asarray(gamma, dtype=float) ** 2 * conjecture_factor(n, factor)
    return d, C - alpha ** 2 * (1 - 2 * q), beta ** 2 * noise_term / n


def recursion_radius(d, E):
    """Largest |root| of z^2 - d z - E, the characteristic polynomial of Eq 68."""
    root = np.sqrt(np.asarray(d * d + 4 * np.asarray(E), dtype=complex))
    return np.maximum(np.abs((d + root) / 2), np.abs((d - root) / 2))


def recursion_stationary(d, E, R):
    """U* = R'' / (1 - d_V - E_V), the fixed point of Eq 68, where both roots lie inside the unit
    circle; inf elsewhere (the recursion diverges, whatever |d_V| is)."""
    with np.errstate(divide="ignore"):
        value = np.asarray(R, dtype=float) / (1 - d - np.asarray(E))
    return np.where(is_stable(recursion_radius(d, E)), value, np.inf)


def spread_window(alpha, n, power: int = PRINTED_POWER):
    """Eq 74, |d_V| < 1 solved for gamma (n >= 2): sqrt(n / (2 (n-1))) alpha < gamma <
    sqrt(n (2 + alpha^2) / (2 (n-1))) as printed (power 2); with the first power of Eq 55,
    n alpha^2 / (2 (n-1)) < gamma < n (2 + alpha^2) / (2 (n-1)). Pairs, printed: alpha < gamma < sqrt(2 + alpha^2)."""
    alpha = np.asarray(alpha, dtype=float)
    scale = 1 / (2 * _share(n))
    low, high = scale * alpha ** 2, scale * (2 + alpha ** 2)
    return low ** (1 / power), high ** (1 / power)


def window_d(alpha, gamma, n, power: int = PRINTED_POWER):
    """d_V = 1 + alpha^2 - 2 gamma^power (n - 1)/n (Eqs 54-55, 69)."""
    return 1 + np.asarray(alpha, dtype=float) ** 2 + 2 * covariance_factor(gamma, n, power)


def in_window(alpha, gamma, n, power: int = PRINTED_POWER):
    """The paper's spread stability test |d_V| < 1 (Eq 74; E_V is not used), with the one tolerance of
    :mod:`noloco.theory.stability`: at the window's endpoints |d_V| = 1 and the test says no, whatever the
    rounding. Also defined for n = 1, where d_V = 1 + alpha^2 and the window is empty."""
    return is_stable(np.abs(window_d(alpha, gamma, n, power)))


# ------------------------------------------------------------------ 5.3: latency

def lognormal_sigma(cv):
    """sigma of a log-normal time with coefficient of variation std/mean = ``cv``: sqrt(ln(1 + cv^2))."""
    return np.sqrt(np.log1p(np.asarray(cv, dtype=float) ** 2))


def pair_max_mean(mu, sigma):
    """Eq 7: E max(t1, t2) = (1 + erf(sigma / 2)) exp(mu + sigma^2 / 2) for iid t ~ LogNormal(mu, sigma^2)."""
    sigma = np.asarray(sigma, dtype=float)
    return (1 + erf(sigma / 2)) * np.exp(np.asarray(mu, dtype=float) + sigma ** 2 / 2)


def tree_allreduce_time(message_time, world_size):
    """Eq 5: t_all ~ 2 t_c log2(n), a reduce to the root and a broadcast back, one message time per level."""
    return 2 * np.asarray(message_time, dtype=float) * np.log2(np.asarray(world_size, dtype=float))

