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
``unstable``       a one-sided test, per tensor, of "this outer step converges at the tensor's c": c as
                   ``noloco llm predict`` reads it (the exact recursion's reading of the meter's c, the run so
                   far held in memory as its run record) over the latest :data:`C_WINDOW` outer steps (never the
                   first), its confidence interval at level :data:`FALSE_ALARM` shared over the tensors tested
                   (Bonferroni; Student's t on the steps' scatter, or the coordinates' standard error of c where
                   that is larger), and the theory's noise-free decay factor >= 1 at every c of the interval,
                   at two checks in a row. Tensors under :data:`MIN_NUMEL` coordinates are pooled into one.
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
#: tensors smaller than this are pooled into one (numel-weighted c): alone, over a few outer steps their c is
#: noise (a 1-coordinate bias measured c = -2.8 at outer step 3 of a stable run, docs/own_run.md)
MIN_NUMEL = 64
#: the unstable test's false-alarm rate per check when the tensor's c_t scatter independently about a c at which
#: the outer step converges (one-sided; shared over the tensors tested); a run has 4 checks by default
FALSE_ALARM = 0.01
#: the latest outer steps whose c a check reads: early in a run c moves (it is strongly negative at first and
#: rises), so the steps' scatter, not only each step's coordinate error, is c's uncertainty
C_WINDOW = 6
FLAGS = ("unequal_start", "wrong_sign", "unstable", "spread_budget")


def prepare(budget: bool) -> None:
    """Import what the checks that replay the run need (scipy's special functions, the advice, the theory's
    recursion: most of a second on a loaded machine) when the observer starts, not at its first check."""
    import scipy.special  # noqa: F401

    import noloco.advice.predict  # noqa: F401
    import noloco.theory.exchangeable  # noqa: F401

    if budget:
        import noloco.advice.forecast  # noqa: F401


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


def c_estimates(run, outer) -> list[dict]:
    """Per tensor (those under :data:`MIN_NUMEL` coordinates pooled into one): the mean of c as the theory reads it
    (:func:`noloco.advice.predict.trajectory`, the long-run noise model) over the latest :data:`C_WINDOW` measured
    outer steps after the first, its standard error (the larger of the steps' scatter and the meter's coordinate
    error, ``c_se`` or a sample's ``se``) and its degrees of freedom (steps - 1)."""
    import numpy as np

    from noloco.advice.predict import groups_inputs, trajectory

    inputs = run.inputs
    first = max(1, len(inputs) - C_WINDOW)  # index 0 is outer step 1, where c is 0 by definition
    series = []
    for name, g in groups_inputs(inputs, list(inputs[0]["groups"])).items():
        s2, rho, drift = g["long-run"]
        c = trajectory(outer, g["c"], s2, rho, drift)[1][first:]
        se = np.array([_coordinate_se(row["groups"][name]) for row in inputs[first:]])
        series.append((name, g["numel"], c, se))
    small = [x for x in series if x[1] < MIN_NUMEL]
    series = [x for x in series if x[1] >= MIN_NUMEL]
    if small:  # one pooled tensor, numel-weighted
        total = sum(n for _, n, _, _ in small)
        c = sum(n * c for _, n, c, _ in small) / total
        se = np.sqrt(sum((n * e) ** 2 for _, n, _, e in small)) / total
        series.append((f"{len(small)} tensors under {MIN_NUMEL} coordinates, pooled", total, c, se))
    out = []
    for name, numel, c, se in series:
        k = len(c)
        scatter = float(np.var(c, ddof=1) / k) if k > 1 else math.inf
        coordinates = float(np.mean(se ** 2) / k)
        out.append({"tensor": name, "numel": numel, "c": float(np.mean(c)), "se": math.sqrt(max(scatter, coordinates)),
                    "df": k - 1, "steps": k})
    return out


def _coordinate_se(group: dict) -> float:
    value = group.get("c_se", (group.get("se") or {}).get("c"))
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0


def unstable(run, outer, step: int, hits: list) -> dict | None:
    """The stability test of the module docstring at the run so far (``run``, a record); ``hits`` the outer steps at
    which a tensor's whole interval was unstable so far (appended to here). A flag at the second check in a row."""
    from scipy.special import stdtrit  # Student's t quantile (scipy.stats.t.ppf's own; scipy.stats imports in seconds)

    from noloco.theory.exchangeable import decay_factor

    if not run.inputs or len(run.inputs) < 3 or outer.group_size == outer.replicas:  # n = N: no spread, no c
        return None
    found = None
    estimates = c_estimates(run, outer)
    for e in sorted(estimates, key=lambda e: e["c"]):
        if decay_factor(outer, e["c"]) < 1:  # the mean converges: so does the interval's test
            continue
        q = float(stdtrit(e["df"], 1 - FALSE_ALARM / len(estimates))) if e["df"] >= 1 else math.inf
        low, high = e["c"] - q * e["se"], e["c"] + q * e["se"]
        if not math.isfinite(high - low):
            continue
        factors = [decay_factor(outer, low + (high - low) * i / 16) for i in range(17)]
        if min(factors) >= 1:
            found = {**e, "low": low, "high": high, "factor": decay_factor(outer, e["c"]), "least": min(factors)}
            break
    if found is None:
        hits.clear()
        return None
    hits.append(step)
    if len(hits) < 2:
        return None
    f = found
    return {"flag": "unstable", "outer_step": step, "decay_factor": f["factor"], "flattest_c": f["c"],
            "c_interval": [f["low"], f["high"]], "false_alarm": FALSE_ALARM,
            "message": f"this outer step cannot converge at the measured inputs: at tensor {f['tensor']} c {f['c']:.4g} "
                       f"(interval {f['low']:.3g} to {f['high']:.3g} over outer steps {len(run.inputs) - f['steps'] + 1}"
                       f" to {len(run.inputs)}) the decay factor per outer step is {f['factor']:.4f}, and at least "
                       f"{f['least']:.4f} across the interval, at the checks of outer steps {', '.join(map(str, hits))} "
                       f"(false-alarm rate {FALSE_ALARM:g} per check); lower alpha or beta, or bring gamma into the "
                       f"stable region (noloco check shows it)"}


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
