"""The observer's early warnings: faults of an outer step that its first outer steps show.

Each check returns a flag ``{"flag", "outer_step", "message"}`` or None; :class:`noloco.training.observer.
Observer` runs them while it observes and keeps the first of each kind (docs/own_run.md says what each means
and what to do):

``unequal_start``  the replicas' spread at the first outer step (phi before any exchange) is above rounding,
                   or (a sampled run) a whole-tensor checksum differs between replicas: they did not start
                   from the same weights.
``wrong_sign``     the outer step moved the replicas against their own progress (the alignment of
                   :func:`noloco.training.sample.update_alignment` < 0), at the first outer step or at two in a
                   row: a pseudo-gradient with the wrong sign (phi - theta used where theta - phi is meant).
``unstable``       the exact stability test at the measured inputs: the theory's noise-free decay factor per
                   outer step at the flattest tensor's measured c (as ``noloco llm predict`` reads it from the
                   run so far, held in memory as its run record; tensors of at least MIN_NUMEL coordinates) is
                   >= 1 at two checks in a row: the replicas' spread cannot settle.
``spread_budget``  the spread measured, or forecast to the run's last outer step from the steps so far
                   (:func:`noloco.advice.forecast.forecast`), crosses the user's ``spread_budget``.
"""

from __future__ import annotations

import math

#: relative spread (weight_std over the RMS of the weights) that rounding of equal replicas stays below
ROUNDING = 1e-6
#: the first outer steps at which the checks that replay the run so far run (the theory's recursion over every
#: tensor and step: the costly part of the observer's early steps)
WARN_STEPS = 10  # (at every other one of them: 2, 4, ...)
#: tensors smaller than this are left out of the flattest c: over a few outer steps their c is noise (a
#: 1-coordinate bias measured c = -2.8 at outer step 3 of a stable run, docs/own_run.md)
MIN_NUMEL = 64
FLAGS = ("unequal_start", "wrong_sign", "unstable", "spread_budget")


def unequal_start(weight_std: float, rms: float, step: int, differ: list | None = None) -> dict | None:
    """``differ``: where the sample does not see every coordinate, the tensors whose whole-tensor checksums
    differ between replicas (:meth:`noloco.training.observer.Observer._checksums_differ`)."""
    if step != 0 or not (weight_std > ROUNDING * max(rms, 1e-30) or differ):
        return None
    where = f"; the tensors that differ: {', '.join(differ[:5])}" + (" ..." if len(differ) > 5 else "") if differ else ""
    return {"flag": "unequal_start", "outer_step": 0,
            "message": f"the replicas did not start equal: weight_std {weight_std:.3g} at the first outer step "
                       f"({weight_std / max(rms, 1e-30):.2g} of the weights' RMS {rms:.3g}; rounding is below "
                       f"{ROUNDING:g}){where}; seed torch alike on every rank (or copy one replica's weights to all) "
                       f"before training"}


def wrong_sign(alignments: list, step: int) -> dict | None:
    """``alignments``: the update alignment of outer steps 1, 2, ... so far (None where no progress)."""
    seen = [a for a in alignments if a is not None]
    first = len(alignments) >= 1 and alignments[0] is not None and alignments[0] < 0
    twice = len(seen) >= 2 and seen[-1] < 0 and seen[-2] < 0
    if not (first or twice):
        return None
    return {"flag": "wrong_sign", "outer_step": step,
            "message": f"the outer step moved the replicas against their own progress (alignment "
                       f"{seen[-1]:+.3g}, positive for a correct outer step whatever the loss): a pseudo-gradient "
                       f"with the wrong sign? the progress is theta - phi (inner weights after the phase minus outer "
                       f"weights) and the outer step adds beta times it"}


def unstable(run, outer, step: int, hits: list) -> dict | None:
    """The decay factor at the flattest c of the tensors of at least :data:`MIN_NUMEL` coordinates (all tensors
    where none is that large), c as ``noloco llm predict`` reads it from ``run`` (a record); ``hits`` the outer steps at
    which it was >= 1 so far (appended to here). A flag at the second check in a row that finds it >= 1."""
    from noloco.advice.predict import predict
    from noloco.theory.exchangeable import decay_factor

    groups = predict(run)["groups"]
    large = {k: g for k, g in groups.items() if g["numel"] >= MIN_NUMEL} or groups
    if not large:
        return None
    c, where = min((g["c_late"], k) for k, g in large.items())
    factor = decay_factor(outer, c)
    if not factor >= 1:
        hits.clear()
        return None
    hits.append(step)
    if len(hits) < 2:
        return None
    return {"flag": "unstable", "outer_step": step, "decay_factor": factor, "flattest_c": c,
            "message": f"this outer step cannot converge at the measured inputs: decay factor {factor:.4f} >= 1 per "
                       f"outer step at the flattest tensor ({where}, c {c:.4g}) at outer steps "
                       f"{', '.join(map(str, hits))}; lower alpha or beta, or raise gamma (noloco check shows the "
                       f"stable region)"}


def spread_budget(run, outer, budget: float, measured: float, step: int, outer_steps: int) -> dict | None:
    if measured > budget:
        return {"flag": "spread_budget", "outer_step": step, "measured": measured,
                "message": f"weight_std {measured:.3g} at outer step {step} is above the spread budget {budget:.3g}"}
    measured_steps = step + 1  # the inputs of outer step step + 1 were just measured
    if measured_steps < 3 or measured_steps >= outer_steps or outer.group_size == outer.replicas:  # n = N: 0
        return None
    from noloco.advice.forecast import forecast

    report = forecast(run, from_step=measured_steps)
    rows = [r for r in report["rows"] if math.isfinite(r["forecast"])]
    over = next((r for r in rows if r["forecast"] > budget), None)
    if over is None and len(rows) == len(report["rows"]):
        return None
    at = over["outer_step"] if over else "a later step (the forecast diverges)"
    return {"flag": "spread_budget", "outer_step": step, "forecast_step": over and over["outer_step"],
            "forecast": over and over["forecast"], "forecast_flags": report["flags"],
            "message": f"the spread forecast from outer step {measured_steps} crosses the budget {budget:.3g} at outer step "
                       f"{at}" + (f" (forecast {over['forecast']:.3g}, 80 % interval {over['low']:.3g} to "
                                  f"{over['high']:.3g})" if over else "")
                       + (f"; the forecast's own flags: {'; '.join(report['flags'])}" if report["flags"] else "")}
