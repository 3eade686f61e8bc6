"""Conditions of the convergence analysis for concrete hyperparameters.

:func:`analyse` evaluates, per eigen-direction of a quadratic and in total, whether
the setting is stable, how fast the replica mean converges, how fast the spread
between replicas decays and where it settles. Totals: the stationary variance is
the sum over directions; stability and the slowest rate are the worst direction.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np

from noloco.theory import numeric
from noloco.theory.config import InnerConfig, OuterConfig
from noloco.infra.checks import check_instance
from noloco.infra.files import SCHEMA_VERSION
from noloco.theory.spectrum import Spectrum
from noloco.theory.stability import MARGINAL, STABLE, TOLERANCE, UNSTABLE, describe, format_radius

if TYPE_CHECKING:
    from noloco.theory.exchangeable import InnerModel


@dataclass(frozen=True)
class Condition:
    name: str
    value: float
    holds: bool
    requirement: str
    #: noloco.theory.stability's class of ``value`` where it is a spectral radius: stable, marginal (bounded or
    #: growing like a power of t), unstable; "" for a condition that is not a radius
    state: str = ""

    @property
    def shown(self) -> str:
        """The value as the table and the exit-1 line print it: a radius never rounds against its class."""
        return format_radius(self.value) if self.state else f"{self.value:.6g}"


#: spectra up to this many directions also list every direction (``Analysis.curvatures`` and the
#: JSON ``directions``); larger ones give the totals only
LISTED = 100_000


@dataclass(frozen=True)
class Analysis:
    """The conditions and, per direction and in total, the rates and the stationary spread.

    Totals: the stationary variance is the sum over directions (``math.fsum`` of the per-chunk
    sums); stability and the slowest rates are the worst direction. The per-direction lists are
    None for a spectrum of more than :data:`LISTED` directions."""

    outer: OuterConfig
    inner: InnerConfig
    curvatures: list | None
    c: list | None                # per direction: contraction of one inner phase
    s2: list | None               # per direction: inner-phase noise variance
    mean_radius: list | None      # per direction
    decay_factor: list | None     # per direction
    variance: list | None         # per direction, stationary spread per coordinate
    conditions: list = field(default_factory=list)
    mean_spectral_radius: float = 0.0
    variance_decay_factor: float = 0.0
    stationary_variance: float = 0.0
    directions: int = 0
    model: InnerModel | None = None  # beyond i.i.d. SGD noise, if any

    @property
    def stable(self) -> bool:
        return all(c.holds for c in self.conditions)

    @property
    def verdict(self) -> str:
        """``stable``; ``marginal`` (no condition unstable, a radius within the tolerance of 1: neither
        converges nor diverges geometrically); ``unstable`` (a condition fails) or ``not finite`` (only the
        finiteness condition fails: a value overflows float64, so there is no verdict on stability)."""
        failing = [c for c in self.conditions if not c.holds]
        if not failing:
            return "stable"
        if failing == [self.conditions[-1]] and failing[0].name.startswith("finite"):
            return "not finite"
        if all(c.state.startswith(MARGINAL) for c in failing):
            return "marginal"
        return "unstable"

    @property
    def stationary_std(self) -> float:
        with np.errstate(invalid="ignore"):  # an unstable setting's variance may be negative: nan
            return float(np.sqrt(self.stationary_variance))

    def to_json(self) -> dict:
        """The analysis as data. Unbounded quantities (an unstable setting) stay inf here; strict
        JSON output (:func:`noloco.infra.files.print_json`) writes them as null with the reason beside them."""
        out = {
            "schema_version": SCHEMA_VERSION,
            "outer": asdict(self.outer),
            "inner": asdict(self.inner),
            "kappa": self.outer.kappa,
            "stable": self.stable,
            "verdict": self.verdict,
            "stability_tolerance": TOLERANCE,
            "mean_spectral_radius": self.mean_spectral_radius,
            "variance_decay_factor": self.variance_decay_factor,
            "stationary_variance": self.stationary_variance,
            "stationary_std": self.stationary_std,
            "conditions": [asdict(c) for c in self.conditions],
            "direction_count": self.directions,
            "inner_model": asdict(self.model) if self.model is not None else {"optimizer": "sgd", "momentum": None,
                                                                              "correlation": 0.0, "zeta": 0.0},
        }
        if self.curvatures is None:
            out["directions"] = None
            out["directions_omitted"] = f"{self.directions} directions: totals only (more than {LISTED})"
        else:
            out["directions"] = [
                {"curvature": lam, "c": c, "s2": s2, "mean_spectral_radius": r,
                 "variance_decay_factor": d, "stationary_variance": v}
                for lam, c, s2, r, d, v in zip(self.curvatures, *cast("tuple[list, ...]", (  # listed together
                    self.c, self.s2, self.mean_radius, self.decay_factor, self.variance)))
            ]
        return out


def memory_estimate(directions: int) -> int:
    """Bytes :func:`analyse` allocates: the chunks (constant) and, up to :data:`LISTED` directions, the
    per-direction rows (Python floats in six lists and their JSON text)."""
    from noloco.theory.spectrum import CHUNK

    return 60 * 8 * CHUNK + (400 * directions if directions <= LISTED else 0)


def check(outer: OuterConfig, inner: InnerConfig, spectrum: Spectrum, model=None, max_memory=None) -> Analysis:
    """``noloco check`` as a library: :func:`analyse` after its memory is checked against the budget
    (:mod:`noloco.infra.budget`, BudgetError before any work)."""
    from noloco.infra import budget

    budget.require(memory_estimate(spectrum.count), budget.resolve(max_memory),
                   f"check over {spectrum.count} directions")
    budget.retain_freed_memory()  # chunk temporaries of 512 KiB: reuse, do not page-fault them in
    return analyse(outer, inner, spectrum, model)


_VERDICT = {"stable": "STABLE", "unstable": "UNSTABLE (a condition fails)",
            "marginal": f"MARGINAL (a spectral radius within {TOLERANCE:g} of 1: no convergence, no geometric growth)",
            "not finite": "NOT FINITE (a value overflows float64: no verdict on stability)"}


def format_analysis(result: Analysis, method: str, spectrum: Spectrum) -> str:
    """The table ``noloco check`` prints."""
    o, i, m = result.outer, result.inner, result.model
    optimizer = m.optimizer if m is not None else "sgd"
    extras = [(m.momentum if m is not None and m.optimizer == "momentum" else None, "mu"),
              (m.correlation or None if m is not None else None, "rho"), (m.zeta or None if m is not None else None, "zeta")]
    fmt = lambda value: f"{value:.6g}"  # noqa: E731
    width = max(len(c.name) for c in result.conditions)
    lines = [f"{method} setting: N={o.replicas} n={o.group_size} alpha={o.alpha:g} beta={o.beta:g} "
             f"gamma={o.gamma:g} momentum={o.momentum} | inner {optimizer} eta={i.lr:g} H={i.steps} "
             f"sigma={i.noise:g}" + "".join(f" {name}={value:g}" for value, name in extras if value is not None)
             + f" | {spectrum.count} direction(s), curvature {spectrum.low:g}..{spectrum.high:g}",
             f"{'condition'.ljust(width)}  {'value':>12}  holds  requirement"]
    # a radius is shown so that its rounding never contradicts the verdict (1 - 7e-09, not 1)
    lines += [f"{c.name.ljust(width)}  {c.shown:>12}  "
              f"{'yes' if c.holds else 'NO':>5}  {c.requirement}"
              + (f" [{c.state}]" if c.state and c.state != STABLE else "")
              for c in result.conditions]
    lines += [f"kappa = (N - n)/(n (N - 1))       = {fmt(o.kappa)}",
              f"variance decay factor per step   = {format_radius(result.variance_decay_factor)} (noise-free, "
              "slowest direction)",
              f"stability: a spectral radius below 1 - {TOLERANCE:g} is stable, within {TOLERANCE:g} of 1 marginal",
              f"stationary replica variance      = {fmt(result.stationary_variance)} per coordinate, summed over "
              f"directions (std {fmt(result.stationary_std)})",
              f"verdict: {_VERDICT[result.verdict]}"]
    return "\n".join(lines)


def spread_condition(outer: OuterConfig, decay: float, growth=None) -> Condition:
    name = "replica spread decays: spectral radius of T"
    if outer.group_size == outer.replicas:
        # every replica applies the same update: from identical initialisation the spread is exactly 0 whatever T
        # does to (absent) deviations, so the condition holds; T itself is classified by the one rule (at n = N no
        # noise feeds it, so a unit radius is marginal and bounded: spread from unequal starts never decays)
        state = describe(decay)
        state = f"{MARGINAL} (bounded)" if state == MARGINAL else state
        return Condition(name, decay, True, "n = N: no spread from identical initialisation (DiLoCo)", state)
    return radius_condition(name, decay, "< 1 (second moments of the deviations from the mean)", growth)


def inner_condition(name: str, radius: float) -> Condition:
    """The inner phase may leave a direction alone (radius 1 - eta lambda -> 1 as lambda -> 0: the outer
    conditions judge that direction); it fails only when it amplifies (unstable)."""
    state = describe(radius)
    return Condition(name, radius, state != UNSTABLE, "<= 1 (else each inner phase amplifies the distance to "
                     "the optimum)", state)


def radius_condition(name: str, radius: float, requirement: str, growth=None) -> Condition:
    """A spectral-radius condition classified by :mod:`noloco.theory.stability`; ``growth`` (A, b) of the
    worst direction names how a marginal recursion grows."""
    state = describe(radius, *(growth or (None, None)))
    return Condition(name, radius, state == STABLE, requirement, state)


def finite_condition(noise_variance: float, variance: float, stable: bool) -> Condition:
    """Non-finite intermediate results are reported as a failing condition, never as STABLE: the
    inner-phase noise variance s2 (and, where the setting is stable, the stationary spread) must
    be finite in float64 (``--noise 1e300`` overflows). :func:`analyse` lists it when it fails."""
    value = noise_variance if not np.isfinite(noise_variance) or not stable else variance
    return Condition("finite in float64: inner-phase noise s2 and stationary spread", value,
                     bool(np.isfinite(noise_variance) and (not stable or np.isfinite(variance))),
                     "finite (else a value overflows float64: scale the noise or the curvatures down)")


#: the carried-state and drift model is evaluated direction by direction (a small eigenproblem each)
EXTENDED_MAX = 10_000


def check_arguments(outer, inner, spectrum, model=None, spectrum_optional: bool = False) -> None:
    """The public functions' setting, checked for what each argument is before any work (a ConfigError naming
    it, not a TypeError from deep inside)."""
    from noloco.theory.exchangeable import InnerModel

    check_instance("outer", outer, OuterConfig, "an OuterConfig (noloco.resolve gives one)")
    check_instance("inner", inner, InnerConfig, "an InnerConfig (noloco.resolve gives one)")
    if not (spectrum is None and spectrum_optional):
        check_instance("spectrum", spectrum, Spectrum, "a Spectrum (noloco.Spectrum([1.0]))"
                       + (" or None" if spectrum_optional else ""))
    if model is not None:
        check_instance("model", model, InnerModel, "an InnerModel or None")


def analyse(outer: OuterConfig, inner: InnerConfig, spectrum: Spectrum, model=None) -> Analysis:
    """A setting's stability and stationary spread on a quadratic: what ``noloco check`` prints.

    Per direction lambda, H inner SGD steps map a deviation y to ``(1 - c) y + eps`` with
    ``c = 1 - (1 - eta lambda)^H`` and ``eps ~ N(0, s2)``; the outer step then acts on the replica mean
    and on the spread across replicas (through kappa = (N - n) / (n (N - 1))) as two linear recursions.
    The setting is stable when both contract in every direction; the stationary spread is the fixed point
    of the spread's second moment, summed over directions. Evaluated chunk by chunk
    (:meth:`Spectrum.chunks`), so memory is bounded for any number of directions.

    Args:
        outer: the :class:`noloco.OuterConfig`.
        inner: the :class:`noloco.InnerConfig`.
        spectrum: the :class:`noloco.Spectrum` of curvatures.
        model: None (inner SGD with i.i.d. noise), or an
            :class:`noloco.theory.exchangeable.InnerModel` (carried optimizer state, correlated noise or
            heterogeneous optima), evaluated per direction by the exchangeable recursion.

    Returns:
        An :class:`noloco.theory.conditions.Analysis`: ``verdict`` (stable, marginal, unstable or not
        finite), ``conditions`` (each with whether it holds), ``stationary_variance``,
        ``variance_decay_factor``, ``mean_spectral_radius`` and the per-direction lists.

    Raises:
        ConfigError: an argument of the wrong type or a spectrum too large for ``model``.

    Examples:
        >>> import noloco
        >>> _, outer, inner = noloco.resolve("paper")
        >>> a = noloco.analyse(outer, inner, noloco.Spectrum((0.1, 1.0)))
        >>> a.verdict, round(a.variance_decay_factor, 4)
        ('stable', 0.6455)
        >>> _, outer, inner = noloco.resolve("paper", alpha=0.99, beta=5)
        >>> noloco.analyse(outer, inner, noloco.Spectrum((0.1, 1.0))).verdict
        'unstable'
    """
    check_arguments(outer, inner, spectrum, model)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        # a diverging setting overflows to inf (or nan): that is the answer, reported as unstable
        if model is None or model.plain:
            return _analyse(outer, inner, spectrum)
        return _analyse_extended(outer, inner, spectrum, model)


def _analyse_extended(outer: OuterConfig, inner: InnerConfig, spectrum: Spectrum, model) -> Analysis:
    from noloco.theory import exchangeable as X
    from noloco.infra.errors import ConfigError

    if spectrum.count > EXTENDED_MAX:
        raise ConfigError(f"spectrum of {spectrum.count} directions: the {model.optimizer} / correlated / "
                          f"heterogeneous model is evaluated per direction, at most {EXTENDED_MAX}")
    rows = []
    for lam in np.concatenate(list(spectrum.chunks())):
        phase = model.phase(inner.lr, float(lam), inner.steps, inner.noise)
        drift = model.drift_var(phase)
        rows.append((float(lam), phase.c, phase.ar1_inputs()[1], X.mean_radius(outer, phase),
                     X.decay_factor(outer, phase=phase, with_drift=drift > 0),
                     X.stationary_spread(outer, phase=phase, drift_var=drift), X.inner_radius(phase)))
    lam, c, s2, mean_r, decay, variance, inner_r = (list(col) for col in zip(*rows))
    total = math.fsum(variance) if all(map(math.isfinite, variance)) else float(sum(variance))
    conditions = [
        inner_condition(f"inner {model.optimizer} phase contracts: spectral radius on (y, state)",
                        max(inner_r)),
        radius_condition("replica mean converges: spectral radius of M", _worst(mean_r),
                         "< 1 (DiLoCo's outer step around the inner phase, carried state included)"),
        spread_condition(outer, _worst(decay)),
    ]
    finite = finite_condition(max(s2), total, all(cond.holds for cond in conditions))
    if not finite.holds:
        conditions.append(finite)
    return Analysis(outer, inner, lam, c, s2, mean_r, decay, variance, conditions=conditions,
                    mean_spectral_radius=_worst(mean_r), variance_decay_factor=_worst(decay),
                    stationary_variance=total, directions=spectrum.count, model=model)


def _analyse(outer: OuterConfig, inner: InnerConfig, spectrum: Spectrum) -> Analysis:
    rule = (outer.alpha, outer.beta, outer.gamma)
    listed = spectrum.count <= LISTED
    lists: dict[str, list[float]] = {key: [] for key in ("lam", "c", "s2", "mean_r", "decay", "variance")}
    sums, noise_sums = [], []
    mean_max = decay_max = inner_max = -np.inf
    mean_at = decay_at = (0.0, 0.0)  # (c, s2) of the worst direction: how a marginal recursion grows
    for lam in spectrum.chunks():
        c, s2 = numeric.inner_sgd(inner.lr, lam, inner.steps, inner.noise)
        mean_r = numeric.mean_spectral_radius(*rule, c, outer.momentum)
        decay = numeric.variance_decay_factor_fast(*rule, c, outer.kappa, outer.momentum)
        variance = numeric.stationary_variance(*rule, c, s2, outer.replicas, outer.group_size, outer.momentum, decay)
        if _worst(mean_r) > mean_max:
            mean_max, mean_at = _worst(mean_r), _at(c, s2, mean_r)
        if _worst(decay) > decay_max:
            decay_max, decay_at = _worst(decay), _at(c, s2, decay)
        inner_max = max(inner_max, _worst(np.abs(1 - inner.lr * lam)))
        sums.append(float(np.sum(np.broadcast_to(variance, lam.shape))))
        noise_sums.append(float(np.max(s2)))
        if listed:
            for key, value in zip(lists, (lam, c, s2, mean_r, decay, variance)):
                lists[key].extend(float(x) for x in np.broadcast_to(value, lam.shape))
    total = math.fsum(sums) if all(map(math.isfinite, sums)) else float(sum(sums))
    conditions = [
        inner_condition("inner SGD contracts: max |1 - eta*lambda|", inner_max),
        radius_condition("replica mean converges: spectral radius of M", mean_max,
                         "< 1 (heavy-ball/Nesterov on step beta*c, momentum alpha)", _mean_growth(outer, *mean_at)),
        spread_condition(outer, decay_max, _spread_growth(outer, *decay_at)),
    ]
    finite = finite_condition(max(noise_sums), total, all(c.holds for c in conditions))
    if not finite.holds:  # listed only when it fails: a finite setting has the three conditions above
        conditions.append(finite)
    per = [lists[key] if listed else None for key in ("lam", "c", "s2", "mean_r", "decay", "variance")]
    return Analysis(outer, inner, per[0], per[1], per[2], per[3], per[4], per[5], conditions=conditions, mean_spectral_radius=mean_max,
                    variance_decay_factor=decay_max, stationary_variance=total, directions=spectrum.count)


def _at(c, s2, rates) -> tuple:
    """(c, s2) of the direction with the largest rate."""
    k = int(np.nanargmax(np.where(np.isnan(rates), np.inf, np.broadcast_to(rates, np.shape(c)))))
    return float(np.ravel(c)[k]), float(np.ravel(np.broadcast_to(s2, np.shape(c)))[k])


def _mean_growth(outer: OuterConfig, c: float, s2: float) -> tuple:
    """(A, b) of the replica mean's second moments in direction c: kappa = 1, noise s2 / N."""
    _, T, f = numeric.transition(outer.alpha, outer.beta, 0.0, c, 1.0, outer.momentum)
    return T, s2 / outer.replicas * f


def _spread_growth(outer: OuterConfig, c: float, s2: float) -> tuple:
    """(A, b) of the deviations' second moments in direction c: T and its noise forcing."""
    _, T, f = numeric.transition(outer.alpha, outer.beta, outer.gamma, c, outer.kappa, outer.momentum)
    return T, s2 * float(numeric.noise_share(outer.replicas, outer.group_size)) * f


def _worst(values) -> float:
    """The largest value, NaN counting as the largest (a NaN rate is not a stable one)."""
    values = np.asarray(values, dtype=float)
    return math.inf if np.isnan(values).any() else float(values.max())
