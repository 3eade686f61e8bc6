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


# ------------------------------------------------------------- random draws

#: below this many draws numpy's own sampler is faster than :func:`fast_normal` (fewer calls)
FAST_NORMAL_MIN = 8192
_ONE_BITS = np.uint32(0x3F800000)  # the bits of 1.0f: OR-ing 23 random bits gives [1, 2)
#: radius words from which ``fast_normal(fine_tail=True)`` uses all 32 bits: the top 2^10 of 2^23 cells
TAIL_WORDS = np.uint32(2 ** 32 - 2 ** 19)


def fast_normal(rng: np.random.Generator, out: np.ndarray, scale: float = 1.0, scratch=None,
                fine_tail: bool = False) -> np.ndarray:
    """Write ``scale`` times independent N(0, 1) draws into the contiguous float32 or float64
    array ``out`` and return it: about 2 ns a draw where ``rng.standard_normal`` takes 9 ns.

    Box-Muller on the generator's raw bits: each 64-bit word gives a radius from 23 bits,
    ``r = sqrt(-2 ln u)`` with ``u`` the midpoint of one of 2^23 equal cells of (0, 1], and an
    angle from 23 more bits; ``r cos`` and ``r sin`` are two independent N(0, 1) draws. The
    arithmetic is float32 (7 significant digits a draw). What differs from a Gaussian: the
    radius is cut at 5.77 (a |z| beyond it has probability 8e-9) and the variance is low by
    4e-8 of itself (the midpoint rule on ``E[-ln u] = 1``), both far below the Monte Carlo error
    of any sum or mean the toolkit computes (``tests/test_scale.py`` checks the moments).

    Not so for the *maximum* of millions of draws, which lives in the few coarse cells of the
    largest radii: the mean maximum of 10^7 lognormal draws came out low by 2.8 standard errors.
    ``fine_tail`` takes the radius of the top 2^10 cells (u below 1.2e-4, r above 4.25) from all
    32 bits, ``u = (2^32 - word - 1/2) 2^-32``: the cut moves to 6.76 (probability 1.4e-11), the
    cells in the tail shrink 512-fold, and every other draw stays bit for bit the same.

    Below :data:`FAST_NORMAL_MIN` draws it is ``rng.standard_normal``. ``scratch``: a float32
    buffer of at least half of ``out``'s size to reuse."""
    flat = out.reshape(-1)  # a view: out is contiguous
    size = flat.size
    if size < FAST_NORMAL_MIN:
        rng.standard_normal(out=flat, dtype=flat.dtype)
        if scale != 1.0:
            flat *= scale
        return out
    m = (size + 1) // 2
    words = rng.bit_generator.random_raw(m).view(np.uint32)  # 2m random 32-bit words
    tail = np.flatnonzero(words[:m] >= TAIL_WORDS) if fine_tail else None
    tail_words = words[tail].astype(float) if fine_tail else None
    np.right_shift(words, 9, out=words)
    np.bitwise_or(words, _ONE_BITS, out=words)
    floats = words.view(np.float32)                          # 1 + k 2^-23, k uniform in [0, 2^23)
    radius, angle = floats[:m], floats[m:]
    np.subtract(np.float32(2.0 - 2.0 ** -24), radius, out=radius)  # u = (2^23 - k - 1/2) 2^-23
    np.log(radius, out=radius)
    np.multiply(radius, np.float32(-2.0 * scale * scale), out=radius)
    np.sqrt(radius, out=radius)                              # scale * sqrt(-2 ln u)
    if fine_tail and tail.size:
        radius[tail] = scale * np.sqrt(-2.0 * np.log((2.0 ** 32 - tail_words - 0.5) * 2.0 ** -32))
    np.multiply(angle, np.float32(2 * np.pi), out=angle)     # 2 pi (1 + k' 2^-23): the same cos and sin
    tmp = np.empty(m, np.float32) if scratch is None else scratch[:m]
    np.cos(angle, out=tmp)
    np.multiply(radius, tmp, out=flat[:m])
    np.sin(angle, out=tmp)
    np.multiply(radius[: size - m], tmp[: size - m], out=flat[m:])
    return out


def fast_gamma(rng: np.random.Generator, shape: float, out: np.ndarray, scale: float = 1.0,
               scratch=None) -> np.ndarray:
    """Write Gamma(``shape``, ``scale``) draws into the contiguous float32 or float64 array ``out``
    and return it: 6.5 to 8 ns a float32 draw for shapes from 1 up (12.5 ns below 1), where
    ``rng.gamma`` takes 21 to 28 ns.

    Marsaglia and Tsang's method, vectorised. With a the shape (shape + 1 below 1),
    d = a - 1/3 and c = 1/sqrt(9 d), the candidate d v, v = (1 + c x)^3, from x ~ N(0, 1)
    (:func:`fast_normal`, fine tail) is accepted when a uniform u falls below the squeeze
    1 - 0.0331 x^4, or, tested in float64, when v > 0 and ln u < x^2/2 + d (1 - v + ln v).
    Accepted candidates are exactly Gamma(a) up to the normal draws' own approximation and the
    float32 rounding of the squeeze. The squeeze misses 8 % of the candidates, which take the
    float64 test; a candidate that fails it too (0.03 % at a = 100, 0.8 % at 4, 4.8 % at 1) is
    replaced by numpy's own gamma draw, which leaves the law exact: the attempts are
    independent, so a rejection says nothing of the value that fills the slot. A shape below 1
    draws Gamma(a) times U^(1/shape), the uniform in float64.

    Below :data:`FAST_NORMAL_MIN` draws it is ``rng.gamma``. ``scratch``: :func:`fast_normal`'s."""
    flat = out.reshape(-1)  # a view: out is contiguous
    if flat.size < FAST_NORMAL_MIN:
        flat[...] = rng.gamma(shape, scale, flat.size)
        return out
    a = shape + 1.0 if shape < 1.0 else shape
    d = a - 1.0 / 3.0
    c = 1.0 / np.sqrt(9.0 * d)
    x = fast_normal(rng, flat, scratch=scratch, fine_tail=True)
    u = rng.random(flat.size, dtype=np.float32)
    work = np.square(x)
    np.square(work, out=work)
    work *= work.dtype.type(-0.0331)
    work += 1
    accept = u < work                                         # below the squeeze 1 - 0.0331 x^4
    np.multiply(x, work.dtype.type(c), out=work)
    work += 1                                                 # 1 + c x
    np.logical_and(accept, work > 0, out=accept)
    left = np.flatnonzero(~accept)
    x_left, u_left = x[left].astype(float), u[left].astype(float)  # x is out: v overwrites it next
    np.multiply(work, work, out=flat)
    flat *= work                                              # v = (1 + c x)^3
    if left.size:
        v = (1.0 + c * x_left) ** 3
        with np.errstate(divide="ignore", invalid="ignore"):  # v <= 0: no candidate
            ok = (v > 0) & (np.log(u_left) < 0.5 * x_left * x_left + d * (1.0 - v + np.log(v)))
        redraw = left[~ok]
        flat[redraw] = rng.gamma(a, 1.0 / d, redraw.size)    # d v of numpy's own Gamma(a) draw
    flat *= flat.dtype.type(d * scale)
    if shape < 1.0:
        boost = rng.random(flat.size)
        np.power(boost, 1.0 / shape, out=boost)
        flat *= boost
    return out
