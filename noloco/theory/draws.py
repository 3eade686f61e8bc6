"""Fast random variates for the Monte Carlo (normal and gamma draws from a numpy generator's raw bits), used
by the quadratic simulator's inner phase and the jitter model."""

from __future__ import annotations


import numpy as np


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
    if tail is not None and tail_words is not None and tail.size:  # fine_tail
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
