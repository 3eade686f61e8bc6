"""A claim's verdict, judged once for every claim (see :mod:`noloco.claims`).

A Monte Carlo claim holds when ``|z| <= tolerance`` (4 standard errors) with
``z = (measured - predicted) / se`` from :func:`noloco.theory.stats.z_score`; a claim about a
whole trajectory is judged at its worst step. A deterministic quantity (se = 0) holds
by the se = 0 policy of :mod:`noloco.theory.stats` (equal to rounding), unless its tolerance
is stated in another unit: ``"absolute"`` (``|measured - predicted| <= tolerance``; the
enumeration, which agrees to floating-point error, not to 1e-9 of a zero prediction) or
``"relative"`` (``|measured - predicted| <= tolerance * |predicted|``; the paper's
order-of-magnitude speed-up). Those report no z.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from noloco.infra.checks import check_choice
from noloco.infra.record import JsonRecord
from noloco.theory import stats

#: standard errors a Monte Carlo claim may miss by (a false alarm per claim about 6e-5)
TOLERANCE = 4.0
UNITS = ("se", "absolute", "relative")


@dataclass(frozen=True)
class Claim:
    """The verdict on one claim. ``tolerance`` is in standard errors (``unit`` "se") or
    in the measured quantity's own units ("absolute", "relative"); ``z`` is None where
    the tolerance is not in standard errors or there is no finite prediction."""

    name: str
    statement: str
    reference: str
    predicted: float
    measured: float
    se: float
    z: float | None
    tolerance: float
    unit: str
    holds: bool
    details: dict = field(default_factory=dict)
    seconds: float = 0.0


def judge(name: str, statement: str, reference: str, predicted, measured, se, *, tolerance: float = TOLERANCE,
          unit: str = "se", also: bool = True, details: dict | None = None) -> Claim:
    """A :class:`Claim` from a prediction and a measurement. ``also`` is a further condition
    the claim needs (stated in ``details``); the verdict is both."""
    check_choice("unit", unit, UNITS)
    predicted, measured, se = float(predicted), float(measured), float(se)
    if unit == "se":
        z = stats.z_score(measured, se, predicted)
        ok = stats.holds(z, tolerance)
    else:
        z = None
        scale = 1.0 if unit == "absolute" else abs(predicted)
        ok = math.isfinite(measured - predicted) and abs(measured - predicted) <= tolerance * scale
    return Claim(name, statement, reference, predicted, measured, se, z, float(tolerance), unit,
                 bool(ok and also), dict(details or {}))


@dataclass(frozen=True)
class Paths(JsonRecord):
    """A path claim's trajectories (steps 0..t) and the step it is judged at: these keys of its ``details``
    (read back with ``Paths.from_json(claim.details)``; the claim's other details stay in ``extra``)."""

    worst_step: int
    predicted_path: np.ndarray
    measured_path: np.ndarray
    se_path: np.ndarray


def judge_path(name: str, statement: str, reference: str, predicted, measured, se, *,
               tolerance: float = TOLERANCE, details: dict | None = None) -> Claim:
    """A claim about a trajectory (steps 1..t; step 0 is the start): judged at its worst step,
    which the returned predicted/measured/se/z describe; the whole paths are in ``details``."""
    predicted, measured, se = (np.asarray(x, dtype=float) for x in (predicted, measured, se))
    z = [stats.z_score(m, s, p) for p, m, s in zip(predicted[1:], measured[1:], se[1:])]
    worst = 1 + max(range(len(z)), key=lambda i: math.inf if z[i] is None else abs(z[i]))
    paths = Paths(worst_step=worst, predicted_path=predicted, measured_path=measured, se_path=se)
    return judge(name, statement, reference, predicted[worst], measured[worst], se[worst], tolerance=tolerance,
                 also=all(stats.holds(v, tolerance) for v in z), details={**(details or {}), **paths.to_json()})
