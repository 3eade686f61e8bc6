"""The estimators every theory-versus-measurement comparison uses, written once.

Monte Carlo results are averages over independent trials (or seeds); each comes with
its standard error, and a prediction is judged by the z-score ``(estimate - prediction)
/ se`` at a stated tolerance. Only numpy; vectorised over any trailing axes.

The se = 0 policy (:func:`z_score`): a quantity with no sampling noise (identical
replicas, DiLoCo's zero spread, a noise-free run) is compared to rounding. z is 0 when
the estimate equals the prediction to a relative 1e-9 (or both are within 1e-300 of 0),
and +-inf otherwise, so "deterministic and wrong" never passes a tolerance.
"""

from __future__ import annotations

import math

import numpy as np

#: relative agreement that counts as equal for a quantity with no sampling noise
EXACT_RTOL = 1e-9


def mean_se(samples, axis: int = 0) -> tuple:
    """Mean over ``axis`` (independent trials) and its standard error, ``std(ddof=1)/sqrt(n)``.
    Returns floats for 1-d input, arrays otherwise; the se of a single sample is NaN."""
    x = np.asarray(samples, dtype=float)
    count = x.shape[axis]
    mean = x.mean(axis)
    se = x.std(axis, ddof=1) / math.sqrt(count) if count > 1 else np.full_like(mean, np.nan)
    if np.ndim(mean) == 0:
        return float(mean), float(se)
    return mean, se


def finite_mean_se(values) -> tuple[float, float]:
    """:func:`mean_se` of the finite values among ``values`` (None and non-finite ones left out; NaN, NaN
    when none is left): a run that diverged or never reached a level does not enter the mean."""
    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    return mean_se(kept) if kept else (math.nan, math.nan)


def z_score(estimate, se, prediction) -> float | None:
    """(estimate - prediction) / se, with the module's se = 0 policy; None when there is
    no finite prediction to compare with (an unstable setting, a missing closed form)."""
    if prediction is None or estimate is None or not math.isfinite(prediction) or not math.isfinite(estimate):
        return None
    if se is None or not math.isfinite(se) or se <= EXACT_RTOL * abs(prediction) or se == 0:
        if math.isclose(estimate, prediction, rel_tol=EXACT_RTOL, abs_tol=1e-300):
            return 0.0
        return math.copysign(math.inf, estimate - prediction)
    return float((estimate - prediction) / se)


def holds(z, tolerance: float) -> bool:
    """True when a z-score is within ``tolerance`` standard errors (None never holds)."""
    return z is not None and abs(z) <= tolerance


def decay_ratio(early, late, steps: int) -> tuple[float, float]:
    """Per-step ratio ``(E late / E early) ** (1 / steps)`` of a positive quantity measured on
    the same trials at two times ``steps`` apart, and its standard error by the delta method
    on ``log E late - log E early`` with the per-trial covariance of the two."""
    early, late = np.asarray(early, dtype=float), np.asarray(late, dtype=float)
    m1, m2 = early.mean(), late.mean()
    if not (m1 > 0 and m2 > 0):
        raise ValueError(f"decay_ratio needs positive means, got {m1!r} and {m2!r}")
    ratio = (m2 / m1) ** (1 / steps)
    relative = np.std(late / m2 - early / m1, ddof=1) / math.sqrt(len(early))
    return float(ratio), float(ratio * relative / steps)


def burn_in(decay_factor, tolerance: float = 1e-3, minimum: int = 10, cap: int = 400) -> int:
    """Outer steps for a transient that shrinks by ``decay_factor`` per step to fall to
    ``tolerance`` of its size, clipped to [minimum, cap] (a factor >= 1 gives ``cap``)."""
    factor = float(decay_factor)
    if not math.isfinite(factor) or factor >= 1:
        return cap
    steps = math.ceil(math.log(tolerance) / math.log(max(factor, 1e-3)))
    return int(min(cap, max(minimum, steps)))


def jackknife(estimator, batches) -> tuple[float, float]:
    """Delete-one jackknife over independent batches: ``estimator(batches)`` and its standard
    error from the ``len(batches)`` leave-one-out estimates (``batches`` indexable on axis 0)."""
    batches = np.asarray(batches)
    k = len(batches)
    full = float(estimator(batches))
    leave_one_out = np.array([estimator(np.delete(batches, i, axis=0)) for i in range(k)], dtype=float)
    se = math.sqrt((k - 1) / k * np.sum((leave_one_out - leave_one_out.mean()) ** 2))
    return full, float(se)


def rms_se(values) -> tuple[float, float]:
    """Root mean square of ``values`` (e.g. a spread measured at several times) and its
    standard error by the delta method on the mean of squares."""
    squares = np.asarray(values, dtype=float) ** 2
    ms, se = mean_se(squares)
    rms = math.sqrt(ms)
    return rms, (se / (2 * rms) if rms > 0 else 0.0)
