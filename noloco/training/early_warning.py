"""The observer's early warnings: faults of an outer step that its first outer steps show.

Each check returns a :class:`Flag` (``{"flag", "outer_step", "message"}`` and its kind's numbers) or None; :class:`noloco.training.observer.
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
                   at two checks in a row; the checks at :func:`check_steps` (from inner step
                   :data:`WARN_FROM_INNER`). Tensors under :data:`MIN_NUMEL` coordinates are pooled into one.
``spread_budget``  the spread measured, or forecast to the run's last outer step from the steps so far
                   (:func:`noloco.advice.forecast.forecast`), crosses the user's ``spread_budget``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from noloco.advice.run_rows import GroupInputs, InputsRow
from noloco.infra.record import JsonRecord

#: relative spread (weight_std over the RMS of the weights) that rounding of equal replicas stays below
ROUNDING = 1e-6
#: the inner steps a run has taken before its first unstable check: through Adam's warm-up and first moments c is
#: strongly negative and rising (checked from inner step 20 at H 5, one clean run in 1,298 was flagged,
#: docs/own_run.md); 40 is where the checks at H 10, calibrated first, begin
WARN_FROM_INNER = 40
#: the unstable checks a run gets by default (at every other outer step): the false-alarm budget is per check
CHECKS = 4
#: tensors smaller than this are pooled into one (numel-weighted c): alone, over a few outer steps their c is
#: noise (a 1-coordinate bias measured c = -2.8 at outer step 3 of a stable run, docs/own_run.md)
MIN_NUMEL = 64
#: the unstable test's false-alarm rate per check when the tensor's c_t scatter independently about a c at which
#: the outer step converges (one-sided; shared over the tensors tested); a run has CHECKS by default
FALSE_ALARM = 0.01
#: the latest outer steps whose c a check reads: early in a run c moves (it is strongly negative at first and
#: rises), so the steps' scatter, not only each step's coordinate error, is c's uncertainty
C_WINDOW = 6
FLAGS = ("unequal_start", "wrong_sign", "unstable", "spread_budget")


@dataclass(frozen=True)
class Flag(JsonRecord):
    """A warning as result.json's ``flags`` hold it: the kind (one of :data:`FLAGS`), the outer step it was raised
    at, the numbers its kind reports (only those: the others are left out) and the message, last."""

    OPTIONAL_KEYS = ("measured", "forecast_step", "forecast", "forecast_flags", "decay_factor", "flattest_c",
                     "c_interval", "false_alarm")

    flag: str
    outer_step: int
    measured: Optional[float] = None
    forecast_step: Optional[int] = None
    forecast: Optional[float] = None
    forecast_flags: Optional[list] = None
    decay_factor: Optional[float] = None
    flattest_c: Optional[float] = None
    c_interval: Optional[list] = None
    false_alarm: Optional[float] = None
    message: str = ""


@dataclass(frozen=True)
class CEstimate:
    """One tensor's (or the small tensors' pooled) c over the latest outer steps, for the unstable test."""

    tensor: str
    numel: int
    c: float  # the mean of c_t
    se: float  # its standard error
    df: int  # degrees of freedom: steps - 1
    steps: int


def check_steps(inner_steps: int, last: int | None = None) -> list[int]:
    """The outer steps of the unstable checks (each replays the run so far: the theory's recursion over every
    tensor and step, the costly part of the observer's early steps): every other outer step from the first even one
    >= 4 by which :data:`WARN_FROM_INNER` inner steps have run (4 at H >= 10, 8 at H 5), :data:`CHECKS` of them, or
    up to outer step ``last`` (the observer's ``warn_steps``) where that is given."""
    first = max(4, math.ceil(WARN_FROM_INNER / inner_steps))
    first += first % 2
    return list(range(first, first + 2 * CHECKS, 2) if last is None else range(first, last + 1, 2))


def prepare(budget: bool) -> None:
    """Import what the checks that replay the run need (scipy's special functions, the advice, the theory's
    recursion: most of a second on a loaded machine) when the observer starts, not at its first check."""
    import scipy.special  # noqa: F401

    import noloco.advice.predict  # noqa: F401
    import noloco.theory.exchangeable  # noqa: F401

    if budget:
        import noloco.advice.forecast  # noqa: F401


def unequal_start(weight_std: float, rms: float, step: int, differ: list | None = None) -> Flag | None:
    """``differ``: where the sample does not see every coordinate, the tensors whose whole-tensor checksums
    differ between replicas (:meth:`noloco.training.observer.Observer._checksums_differ`)."""
    if step != 0 or not (weight_std > ROUNDING * max(rms, 1e-30) or differ):
        return None
    where = f"; the tensors that differ: {', '.join(differ[:5])}" + (" ..." if len(differ) > 5 else "") if differ else ""
    return Flag("unequal_start", 0,
                message=f"the replicas did not start equal: weight_std {weight_std:.3g} at the first outer step "
                        f"({weight_std / max(rms, 1e-30):.2g} of the weights' RMS {rms:.3g}; rounding is below "
                        f"{ROUNDING:g}){where}; seed torch alike on every rank (or copy one replica's weights to all) "
                        f"before training")


def wrong_sign(alignments: list, step: int) -> Flag | None:
    """``alignments``: the update alignment of outer steps 1, 2, ... so far (None where no progress)."""
    seen = [a for a in alignments if a is not None]
    first = len(alignments) >= 1 and alignments[0] is not None and alignments[0] < 0
    twice = len(seen) >= 2 and seen[-1] < 0 and seen[-2] < 0
    if not (first or twice):
        return None
    return Flag("wrong_sign", step,
                message=f"the outer step moved the replicas against their own progress (alignment "
                        f"{seen[-1]:+.3g}, positive for a correct outer step whatever the loss): a pseudo-gradient "
                        f"with the wrong sign? the progress is theta - phi (inner weights after the phase minus outer "
                        f"weights) and the outer step adds beta times it")


def c_estimates(run, outer) -> list[CEstimate]:
    """Per tensor (those under :data:`MIN_NUMEL` coordinates pooled into one): the mean of c as the theory reads it
    (:func:`noloco.advice.predict.trajectory`, the long-run noise model) over the latest :data:`C_WINDOW` measured
    outer steps after the first, its standard error (the larger of the steps' scatter and the meter's coordinate
    error, ``c_se`` or a sample's ``se``) and its degrees of freedom (steps - 1)."""
    import numpy as np

    from noloco.advice.predict import groups_inputs, trajectory

    inputs = run.inputs
    first = max(1, len(inputs) - C_WINDOW)  # index 0 is outer step 1, where c is 0 by definition
    latest = [InputsRow.from_json(row).groups for row in inputs[first:]]
    series = []
    for name, g in groups_inputs(run.input_rows, list(latest[0])).items():
        s2, rho, drift = g.long_run
        c = trajectory(outer, g.c, s2, rho, drift)[1][first:]
        se = np.array([_coordinate_se(groups[name]) for groups in latest])
        series.append((name, latest[0][name].numel, c, se))
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
        out.append(CEstimate(name, numel, float(np.mean(c)), math.sqrt(max(scatter, coordinates)), k - 1, k))
    return out


def _coordinate_se(group: GroupInputs) -> float:
    value = group.c_se if group.c_se is not None else group.se.c if group.se else None  # exact, or a sample's
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0


def unstable(run, outer, step: int, hits: list) -> Flag | None:
    """The stability test of the module docstring at the run so far (``run``, a record); ``hits`` the outer steps at
    which a tensor's whole interval was unstable so far (appended to here). A flag at the second check in a row."""
    from scipy.special import stdtrit  # Student's t quantile (scipy.stats.t.ppf's own; scipy.stats imports in seconds)

    from noloco.theory.exchangeable import decay_factor

    if not run.inputs or len(run.inputs) < 3 or outer.group_size == outer.replicas:  # n = N: no spread, no c
        return None
    found = None
    estimates = c_estimates(run, outer)
    for e in sorted(estimates, key=lambda e: e.c):
        if decay_factor(outer, e.c) < 1:  # the mean converges: so does the interval's test
            continue
        q = float(stdtrit(e.df, 1 - FALSE_ALARM / len(estimates))) if e.df >= 1 else math.inf
        low, high = e.c - q * e.se, e.c + q * e.se
        if not math.isfinite(high - low):
            continue
        factors = [decay_factor(outer, low + (high - low) * i / 16) for i in range(17)]
        if min(factors) >= 1:
            found = (e, low, high, decay_factor(outer, e.c), min(factors))
            break
    if found is None:
        hits.clear()
        return None
    hits.append(step)
    if len(hits) < 2:
        return None
    e, low, high, factor, least = found
    return Flag("unstable", step, decay_factor=factor, flattest_c=e.c, c_interval=[low, high], false_alarm=FALSE_ALARM,
                message=f"this outer step cannot converge at the measured inputs: at tensor {e.tensor} c {e.c:.4g} "
                        f"(interval {low:.3g} to {high:.3g} over outer steps {len(run.inputs) - e.steps + 1}"
                        f" to {len(run.inputs)}) the decay factor per outer step is {factor:.4f}, and at least "
                        f"{least:.4f} across the interval, at the checks of outer steps {', '.join(map(str, hits))} "
                        f"(false-alarm rate {FALSE_ALARM:g} per check); lower alpha or beta, or bring gamma into the "
                        f"stable region (noloco check shows it)")


def replay(run) -> Flag | None:
    """The ``unstable`` flag a recorded run (:func:`noloco.advice.record.read_run`) gets at today's checks
    (:func:`check_steps` at its H) from its inputs.jsonl: the observer's own test on the run so far at each check, as
    it would have raised it (an older run re-checked after the checks changed)."""
    import dataclasses

    hits: list = []
    for step in check_steps(run.setting.inner_steps):
        if step + 1 > len(run.inputs):  # at outer step k the observer holds the inputs of steps 1..k + 1
            return None
        flag = unstable(dataclasses.replace(run, inputs=run.inputs[:step + 1]), run.outer, step, hits)
        if flag:
            return flag
    return None


def spread_budget(run, outer, budget: float, measured: float, step: int, outer_steps: int) -> Flag | None:
    if measured > budget:
        return Flag("spread_budget", step, measured=measured,
                    message=f"weight_std {measured:.3g} at outer step {step} is above the spread budget {budget:.3g}")
    measured_steps = step + 1  # the inputs of outer step step + 1 were just measured
    if measured_steps < 3 or measured_steps >= outer_steps or outer.group_size == outer.replicas:  # n = N: 0
        return None
    from noloco.advice.forecast import forecast

    report = forecast(run, from_step=measured_steps)
    every, own_flags = report.rows, report.flags
    rows = [r for r in every if math.isfinite(r.forecast)]
    over = next((r for r in rows if r.forecast > budget), None)
    if over is None and len(rows) == len(every):
        return None
    at, value, low, high = (over.outer_step, over.forecast, over.low, over.high) if over else (None,) * 4
    # forecast_step and forecast are null where the forecast diverges before crossing: the keys are always written
    return Flag("spread_budget", step, forecast_step=at, forecast=value, forecast_flags=own_flags,
                message=f"the spread forecast from outer step {measured_steps} crosses the budget {budget:.3g} at outer "
                        f"step {at if over else 'a later step (the forecast diverges)'}"
                        + (f" (forecast {value:.3g}, 80 % interval {low:.3g} to {high:.3g})" if over else "")
                        + (f"; the forecast's own flags: {'; '.join(own_flags)}" if own_flags else ""),
                order=("flag", "outer_step", "forecast_step", "forecast", "forecast_flags", "message"))
