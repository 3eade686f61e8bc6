"""Jury (Schur-Cohn) stability tests for monic real polynomials of degree 2 and 3.

Plain arithmetic, so ``noloco.theory.symbolic`` applies them to sympy coefficients (the
stability region as inequalities) and ``noloco.theory.numeric`` to numpy arrays.
Every returned expression must be > 0 for all roots to lie strictly inside the unit circle.
"""


def jury_quadratic(a1, a0) -> tuple:
    """z^2 + a1 z + a0: p(1) > 0, p(-1) > 0, |a0| < 1."""
    return (1 + a1 + a0, 1 - a1 + a0, 1 - a0)


def jury_cubic(a2, a1, a0) -> tuple:
    """z^3 + a2 z^2 + a1 z + a0: p(1) > 0, -p(-1) > 0, |a0| < 1 and
    |1 - a0^2| > |a1 - a0 a2|, the last two written as pairs of linear conditions."""
    return (
        1 + a2 + a1 + a0,
        1 - a2 + a1 - a0,
        (1 - a0) * (1 + a0),
        (1 - a0 ** 2) - (a1 - a0 * a2),
        (1 - a0 ** 2) + (a1 - a0 * a2),
    )
