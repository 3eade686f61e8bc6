"""The symbolic results of :mod:`noloco.theory.symbolic`, as vectorised numpy.

Every function broadcasts over its arguments, so a whole grid of hyperparameters is
one call. The expressions come from :mod:`noloco.theory.compiled`, a module generated from the
sympy derivation and kept in the repository (``python -m noloco.theory.codegen`` rewrites it;
``tests/test_compiled.py`` fails while it is stale), so nothing here needs sympy.
"""

from __future__ import annotations

import numpy as np

from noloco.theory.compiled import FUNCTIONS
from noloco.theory.config import MOMENTUM_CONVENTIONS, group_kappa
from noloco.theory.stability import classify_codes


def _eval(momentum: str, part: str, alpha, beta, gamma, c, kappa=0.0):
    if momentum not in MOMENTUM_CONVENTIONS:
        raise ValueError(f"momentum={momentum!r}; allowed: {', '.join(MOMENTUM_CONVENTIONS)}")
    # numpy broadcasts inside the expressions, so terms in scalar arguments stay scalar
    args = [np.asarray(a, dtype=float) for a in (alpha, beta, gamma, c, kappa)]
    shape = np.broadcast_shapes(*(a.shape for a in args))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return [np.broadcast_to(e, shape) for e in FUNCTIONS[momentum][part](*args)]


# ---------------------------------------------------------------- inner phase

def inner_sgd(lr, curvature, steps, noise):
    """(c, s2) of ``steps`` SGD steps: c = 1 - r^H, s2 = lr^2 noise^2 sum_{k<H} r^(2k), r = 1 - lr*curvature."""
    lr, curvature, noise = (np.asarray(x, dtype=float) for x in (lr, curvature, noise))
    r = 1.0 - lr * curvature
    c = 1.0 - r ** steps
    r2 = r * r
    with np.errstate(divide="ignore", invalid="ignore"):
        geometric = np.where(np.isclose(r2, 1.0, rtol=0, atol=1e-12), float(steps), (1.0 - r2 ** steps) / (1.0 - r2))
    return c, lr ** 2 * noise ** 2 * geometric


# ------------------------------------------------------------ polynomial roots
# Real arithmetic throughout: one real root of the cubic in closed form, polished by
# Newton's method, then the remaining quadratic by deflation. Several times faster
# than complex Cardano or batched eigvals on a 1000 x 1000 grid.

def _quadratic_radius(b1, b0):
    """max |root| of z^2 + b1 z + b0 with real coefficients."""
    disc = b1 * b1 - 4 * b0
    sq = np.sqrt(np.abs(disc))
    # real roots: the larger magnitude is (|b1| + sqrt(disc)) / 2; complex pair: sqrt(b0)
    return np.where(disc >= 0, (np.abs(b1) + sq) / 2, np.sqrt(np.abs(b0)))


def _cubic_real_root(a2, a1, a0):
    """One real root of z^3 + a2 z^2 + a1 z + a0 (the largest, when all three are real)."""
    p = a1 - a2 * a2 / 3
    q = 2 * a2 ** 3 / 27 - a2 * a1 / 3 + a0
    disc = q * q / 4 + p ** 3 / 27
    sq = np.sqrt(np.maximum(disc, 0))
    one_real = np.cbrt(-q / 2 + sq) + np.cbrt(-q / 2 - sq)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.sqrt(np.maximum(-p / 3, 0))
        cos_arg = np.clip(np.where(m > 0, -q / (2 * m ** 3), 0.0), -1, 1)
        three_real = 2 * m * np.cos(np.arccos(cos_arg) / 3)
    z = np.where(disc >= 0, one_real, three_real) - a2 / 3
    for _ in range(3):  # Newton: closed forms lose digits near multiple roots
        value = ((z + a2) * z + a1) * z + a0
        slope = (3 * z + 2 * a2) * z + a1
        with np.errstate(invalid="ignore", divide="ignore"):
            step = value / slope
        z = np.where(np.isfinite(step) & (np.abs(slope) > 1e-12), z - step, z)
    return z


def spectral_radius_monic(coeffs):
    """Largest |root| of a monic real quadratic (a1, a0) or cubic (a2, a1, a0)."""
    coeffs = [np.asarray(a, dtype=float) for a in coeffs]
    if len(coeffs) == 2:
        return _quadratic_radius(*coeffs)
    a2, a1, a0 = coeffs
    z1 = _cubic_real_root(a2, a1, a0)
    b1 = a2 + z1  # deflate: (z - z1)(z^2 + b1 z + b0)
    b0 = a1 + z1 * b1
    return np.maximum(np.abs(z1), _quadratic_radius(b1, b0))


# ------------------------------------------------------------------- results

def mean_spectral_radius(alpha, beta, gamma, c, momentum="heavy-ball"):
    """Asymptotic contraction factor per outer step of the (noise-free) replica mean."""
    return spectral_radius_monic(_eval(momentum, "mean_charpoly", alpha, beta, gamma, c))


def variance_decay_factor(alpha, beta, gamma, c, kappa, momentum="heavy-ball"):
    """Spectral radius of the second-moment transition T: the asymptotic factor per
    outer step by which the noise-free expected replica variance shrinks."""
    return spectral_radius_monic(_eval(momentum, "spread_charpoly", alpha, beta, gamma, c, kappa))


def spread_class(alpha, beta, gamma, c, kappa, momentum="heavy-ball"):
    """:func:`noloco.theory.stability.classify_codes` of T's spectral radius: 0 stable, 1 marginal, 2 unstable
    (the radius from :func:`variance_decay_factor_fast`, equal to rounding and several times faster)."""
    return classify_codes(variance_decay_factor_fast(alpha, beta, gamma, c, kappa, momentum))


def mean_class(alpha, beta, gamma, c, momentum="heavy-ball"):
    """:func:`noloco.theory.stability.classify_codes` of M's spectral radius: 0 stable, 1 marginal, 2 unstable."""
    return classify_codes(mean_spectral_radius(alpha, beta, gamma, c, momentum))


def spread_stable(alpha, beta, gamma, c, kappa, momentum="heavy-ball"):
    """True where T's spectral radius is below 1 - TOLERANCE (noloco.theory.stability): a strict Jury test
    on float coefficients falls on either side of an edge where the radius is exactly 1."""
    return spread_class(alpha, beta, gamma, c, kappa, momentum) == 0


def mean_stable(alpha, beta, gamma, c, momentum="heavy-ball"):
    """True where the replica mean contracts: M's spectral radius below 1 - TOLERANCE."""
    return mean_class(alpha, beta, gamma, c, momentum) == 0


def stationary_variance(alpha, beta, gamma, c, s2, replicas, group_size, momentum="heavy-ball", decay=None):
    """Stationary E[(phi_i - mean_j phi_j)^2] per coordinate, closed form; inf where
    the spread is not stable. Zero for n = N (DiLoCo) and for N = 1. ``decay``: T's spectral radius
    where the caller has it already (it decides stability; computed here otherwise)."""
    # group_kappa branches on N = 1 in Python, so arrays of (N, n) go through it elementwise
    kappa = np.vectorize(group_kappa, otypes=[float])(replicas, group_size)
    (ratio,) = _eval(momentum, "spread_ratio", alpha, beta, gamma, c, kappa)
    share = noise_share(replicas, group_size)
    stable = spread_stable(alpha, beta, gamma, c, kappa, momentum) if decay is None else classify_codes(decay) == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.asarray(s2, dtype=float) * share * ratio
    return np.where(share == 0, 0.0, np.where(stable, value, np.inf))


def transition(alpha, beta, gamma, c, kappa, momentum="heavy-ball"):
    """Numeric (M, T, f): mean transition (..., 2, 2), second-moment transition
    (..., 3, 3) on (E z^2, E z u, E u^2), forcing direction (..., 3)."""
    M, T, f = (_eval(momentum, part, alpha, beta, gamma, c, kappa) for part in ("M", "T", "f"))
    shape = M[0].shape
    return (np.stack(M, -1).reshape(shape + (2, 2)), np.stack(T, -1).reshape(shape + (3, 3)),
            np.stack(f, -1))


def noise_share(replicas, group_size):
    """1/n - 1/N: the share of the progress noise that group averaging leaves in a deviation."""
    return 1.0 / np.asarray(group_size, dtype=float) - 1.0 / np.asarray(replicas, dtype=float)


def second_moment_step(T, v, s2, replicas, group_size, f):
    """One step of the exact second-moment recursion v' = T v + s2 (1/n - 1/N) f on
    v = (E z^2, E z u, E u^2): T (..., 3, 3), v and f (..., 3), s2 (...), broadcast over
    the leading dimensions."""
    forcing = np.asarray(s2, dtype=float)[..., None] * noise_share(replicas, group_size) * f
    return np.einsum("...ij,...j->...i", T, v) + forcing


def spread_trajectory(outer, c, s2, steps, initial=(0.0, 0.0, 0.0)):
    """Exact E z_t^2 (per coordinate) for t = 0..steps from :func:`second_moment_step`,
    starting from vech(S) = ``initial``."""
    kappa = group_kappa(outer.replicas, outer.group_size)
    _, T, f = transition(outer.alpha, outer.beta, outer.gamma, c, kappa, outer.momentum)
    v = np.broadcast_to(np.asarray(initial, dtype=float), T.shape[:-2] + (3,)).copy()
    out = [v[..., 0].copy()]
    for _ in range(steps):
        v = second_moment_step(T, v, s2, outer.replicas, outer.group_size, f)
        out.append(v[..., 0].copy())
    return np.stack(out, axis=-1)


# ------------------------------------------------------- many directions at once

def _cube(x):
    return x * x * x  # np.power of a negative base takes about 100 ns per number (glibc's pow)


def variance_decay_factor_fast(alpha, beta, gamma, c, kappa, momentum="heavy-ball"):
    """:func:`variance_decay_factor` for many directions at once, about ten times faster: the
    same closed-form real root of the characteristic cubic, polished by the same Newton steps and
    deflated to the same quadratic, with powers written as products (numpy's ``pow`` of a negative
    base takes about 100 ns per number) and only the root formula that applies evaluated.
    Agrees with :func:`variance_decay_factor` to rounding (``tests/test_scale.py``: 1e-12)."""
    # _eval broadcasts the coefficients over every argument (a grid over beta or gamma too)
    a2, a1, a0 = (np.array(a, dtype=float) for a in _eval(momentum, "spread_charpoly", alpha, beta, gamma, c, kappa))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        third = a2 / 3
        p = a1 - a2 * third
        q = 2 * _cube(a2) / 27 - a2 * a1 / 3 + a0
        disc = q * q / 4 + _cube(p) / 27
        one = disc >= 0
        z = np.empty_like(a2)
        if one.any():
            sq = np.sqrt(disc[one])
            h = -q[one] / 2
            z[one] = np.cbrt(h + sq) + np.cbrt(h - sq)
        if not one.all():
            three = ~one
            m = np.sqrt(np.maximum(-p[three] / 3, 0))
            cos_arg = np.clip(np.where(m > 0, -q[three] / (2 * _cube(m)), 0.0), -1, 1)
            z[three] = 2 * m * np.cos(np.arccos(cos_arg) / 3)
        z -= third
        for _ in range(3):  # Newton: closed forms lose digits near multiple roots
            value = ((z + a2) * z + a1) * z + a0
            slope = (3 * z + 2 * a2) * z + a1
            step = value / slope
            z = np.where(np.isfinite(step) & (np.abs(slope) > 1e-12), z - step, z)
        b1 = a2 + z  # deflate: (z - z1)(z^2 + b1 z + b0)
        b0 = a1 + z * b1
        return np.maximum(np.abs(z), _quadratic_radius(b1, b0))
