"""One stability classification for every command, map, figure and the tuner.

A linear recursion x' = A x + b is

* ``stable``: spectral radius below ``1 - TOLERANCE``; it converges (to a stationary state when forced);
* ``marginal``: radius within ``TOLERANCE`` of 1: it neither converges nor diverges geometrically. It stays
  bounded, or grows like a power of t: a Jordan block at a unit eigenvalue, or a unit eigenvalue that the
  forcing (the inner noise) feeds, grows (:func:`growth_order` says which);
* ``unstable``: radius above ``1 + TOLERANCE``: geometric growth.

Why a tolerance: at the edges the exact radius is 1 (the flat direction at gamma = 0, beta c = 2 (1 + alpha),
c = 0 in the mean), and a strict float comparison falls on either side by rounding (a strict Jury test called
94 of 241 points on the gamma = 0 flat line stable). The closed-form radii of
:mod:`noloco.theory.numeric` are accurate to about 1e-12 at those edges for alpha <= 0.995 (2e-10 at
0.999; near alpha = 1 three roots meet at 1 and float coefficients fix them only to about 1e-9), so
1e-9 separates rounding from a real margin; a radius 1 - 1e-9 relaxes over 1e9 outer steps, longer
than any run. ``tests/test_stability.py`` checks the classification at exact edge values and shows that
a strict comparison misjudges them.
"""

from __future__ import annotations

import math

import numpy as np

#: |radius - 1| up to which a recursion is marginal
TOLERANCE = 1e-9
STABLE, MARGINAL, UNSTABLE = "stable", "marginal", "unstable"
LABELS = (STABLE, MARGINAL, UNSTABLE)


def classify_codes(radius, tolerance: float | None = None) -> np.ndarray:
    """0 stable, 1 marginal, 2 unstable, elementwise; a NaN radius is unstable (no rate is not a stable one)."""
    tol = TOLERANCE if tolerance is None else tolerance
    r = np.asarray(radius, dtype=float)
    with np.errstate(invalid="ignore"):
        codes = np.where(r < 1 - tol, 0, np.where(r <= 1 + tol, 1, 2))
    return np.where(np.isnan(r), 2, codes).astype(np.int8)


def classify(radius, tolerance: float | None = None) -> str:
    """The label of one spectral radius."""
    return LABELS[int(classify_codes(radius, tolerance))]


def is_stable(radius, tolerance: float | None = None) -> np.ndarray:
    """True where stable (elementwise)."""
    return classify_codes(radius, tolerance) == 0


#: outer steps over which :func:`growth_order` reads the growth (matrix powers: cheap)
GROWTH_STEPS = 1 << 16


def growth_order(A, b=None, steps: int = GROWTH_STEPS) -> float:
    """How x_t of x' = A x + b grows from the worst start: the log2 ratio of the response norm at 2K and
    at K steps (K = ``steps``), rounded where it is polynomial. About 0: bounded; 1: linear (a unit
    eigenvalue fed by b, or a 2-block); 2: quadratic; large positive: geometric; negative: decays.
    Computed with powers of the augmented matrix [[A, b], [0, 1]], so b's accumulated effect is included."""
    A = np.asarray(A, dtype=float)
    k = A.shape[0]
    P = np.zeros((k + 1, k + 1))
    P[:k, :k] = A
    P[k, k] = 1.0
    if b is not None:
        P[:k, k] = np.asarray(b, dtype=float)
    if not np.all(np.isfinite(P)):
        return math.inf
    with np.errstate(over="ignore", invalid="ignore"):
        once = np.linalg.matrix_power(P, steps)[:k]
        twice = np.linalg.matrix_power(P, 2 * steps)[:k]
        a, z = np.linalg.norm(once), np.linalg.norm(twice)
    if not (math.isfinite(a) and math.isfinite(z)):
        return math.inf
    if a == 0 or z == 0:
        return -math.inf
    return math.log2(z / a)


def growth_label(order: float) -> str:
    """Words for :func:`growth_order` of a marginal recursion."""
    if order < 0.5:
        return "bounded"
    if not math.isfinite(order):  # the powers overflowed float64 (a step of 1e308): no power of t describes it
        return "grows without bound (overflows float64)"
    p = round(order)
    return "grows like t" if p == 1 else f"grows like t^{p}"


def describe(radius, A=None, b=None, tolerance: float | None = None) -> str:
    """``stable``, ``unstable`` or ``marginal (bounded | grows like t^p)``, the growth read from A and b."""
    label = classify(radius, tolerance)
    if label != MARGINAL or A is None:
        return label
    return f"{MARGINAL} ({growth_label(growth_order(A, b))})"


def format_radius(value: float, tolerance: float | None = None) -> str:
    """A spectral radius shown so that its rounding never contradicts its classification: a stable or
    unstable value that would print as 1 is written 1 - d or 1 + d."""
    if not math.isfinite(value):
        return f"{value}"
    text = f"{value:.6g}"
    label = classify(value, tolerance)
    if float(text) == 1.0 and label != MARGINAL:
        return f"1 {'-' if value < 1 else '+'} {abs(value - 1):.3g}"
    return text
