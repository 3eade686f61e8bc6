"""The NoLoCo paper's analysis (arXiv 2506.10911, Appendix A, Section 5.3) checked statement by statement.

For one setting, every statement gets what the paper's form says (:mod:`noloco.theory.paper`), what
the exact quadratic theory says (:mod:`noloco.theory.numeric`: the replica mean is DiLoCo's outer
step, the deviations follow the closed three-moment recursion), what Monte Carlo of the scalar model
or an independent computation measures (with its standard error), and a verdict on the paper's form
against the exact value:

* ``holds``: a relative error of at most :data:`HOLDS` (1 %), or a qualitative claim that is true;
* ``approximate``: a relative error of at most :data:`APPROXIMATE` (25 %), shown;
* ``fails``: anything else, with the reason.

The Monte Carlo checks the exact theory, not the paper: its z-score against the exact value at the
point it measures is reported, and a miss beyond 4 standard errors is written into the note (a finding,
never a reason to change the verdict). A statement may have several parts (both readings of a garbled
equation, a flat and a curved direction); the first part is the headline.

The exact stationary moments of one replica are :mod:`noloco.theory.moments`; the stability maps of
``paper_figs/fig_paper_maps.py`` are here, the simulations behind the paper's Fig 5 in
:mod:`noloco.claims.paper_comm`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np

from noloco.claims.judge import TOLERANCE
from noloco.claims.spread import stationary_spread_mc
from noloco.infra.checks import check_integer, check_real
from noloco.infra.errors import ConfigError
from noloco.infra.files import SCHEMA_VERSION
from noloco.theory import numeric, stats
from noloco.theory import paper as P
from noloco.theory.config import InnerConfig, OuterConfig, group_kappa
from noloco.theory.exchangeable import spectral_radius
from noloco.theory.moments import Moments, exact_moments
from noloco.quadratic.scalar import scalar_path

#: relative error up to which the paper's form "holds" and "approximates" the exact value
HOLDS, APPROXIMATE = 0.01, 0.25
VERDICT_RULE = {"holds": f"relative error <= {HOLDS:.0%} (or a qualitative claim that is true)",
                "approximate": f"relative error <= {APPROXIMATE:.0%}", "fails": "otherwise (the reason in the note)"}
#: eta * lambda * H of the decade over which a slope "as eta -> 0" is read
ASYMPTOTIC = (1e-6, 1e-5)


# ------------------------------------------------------------------ verdicts

@dataclass(frozen=True)
class Part:
    """One comparison: the paper's value, the exact one, a measurement of the exact quantity (Monte
    Carlo or an independent computation; se 0 when deterministic) and the verdict."""

    label: str
    paper: object           # a number, or a boolean for a qualitative claim
    exact: object
    measured: float | None
    se: float | None
    verdict: str
    note: str = ""
    relative_error: float | None = None
    z: float | None = None  # measured against the exact value at the point measured
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Statement:
    id: str
    reference: str
    claim: str
    parts: tuple

    def as_dict(self) -> dict:
        head = dataclasses.asdict(self.parts[0])
        head.pop("label")
        return {"id": self.id, "reference": self.reference, "claim": self.claim, **head,
                "parts": [dataclasses.asdict(p) for p in self.parts]}


@dataclass(frozen=True)
class Audit:
    setting: dict
    statements: tuple
    seed: int
    quick: bool
    seconds: float

    def to_json(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "setting": self.setting, "seed": self.seed, "quick": self.quick,
                "verdict_rule": VERDICT_RULE, "seconds": self.seconds,
                "statements": [s.as_dict() for s in self.statements]}


def relative_error(paper: float, exact: float) -> float:
    if exact == 0:
        return 0.0 if paper == 0 else math.inf
    return abs(paper - exact) / abs(exact)


def _mc_note(note: str, z) -> str:
    if z is not None and abs(z) > TOLERANCE:
        return f"{note}; Monte Carlo disagrees with the exact theory (z = {z:.1f}): a finding".lstrip("; ")
    return note


def graded(label: str, paper: float, exact: float, *, measured=None, se=None, at=None, note: str = "",
           details=None) -> Part:
    """A numeric form against the exact value: the verdict from the relative error; ``at`` is the
    exact value at the point the measurement is taken, when that differs from ``exact``."""
    paper, exact = float(paper), float(exact)
    reference = exact if at is None else float(at)
    if measured is not None and not (math.isfinite(measured) and math.isfinite(se)):
        measured = se = None
        note = f"{note}; the Monte Carlo diverges (no finite estimate)".lstrip("; ")
    z = stats.z_score(measured, se, reference) if measured is not None else None
    if not (math.isfinite(paper) and math.isfinite(exact)):
        which = "the paper's form" if not math.isfinite(paper) else "the exact value"
        verdict, err = "fails", None
        note = f"{which} is not finite (unbounded: no stationary value); {note}".rstrip("; ")
    else:
        err = relative_error(paper, exact)
        verdict = "holds" if err <= HOLDS else "approximate" if err <= APPROXIMATE else "fails"
    return Part(label, paper, exact, measured, se, verdict, _mc_note(note, z), err, z, dict(details or {}))


def agreement(label: str, paper: bool, exact: bool, *, sufficient: bool = False, measured=None,
              note: str = "", details=None) -> Part:
    """A qualitative claim against the exact answer. ``sufficient``: the paper claims only that its
    condition implies the exact property (a false condition claims nothing)."""
    paper, exact = bool(paper), bool(exact)
    if sufficient and not paper:
        verdict = "holds"
        note = f"the condition is not met, so it claims nothing (exact: {'yes' if exact else 'no'}" \
               f"{'; the condition is not necessary' if exact else ''}); {note}".rstrip("; ")
    elif paper == exact:
        verdict = "holds"
    else:
        verdict = "fails"
        note = f"the paper says {'yes' if paper else 'no'}, the exact theory {'yes' if exact else 'no'}; {note}" \
            .rstrip("; ")
    return Part(label, paper, exact, measured, None if measured is None else 0.0, verdict, note,
                details=dict(details or {}))


# ------------------------------------------------------------------ Monte Carlo

def simulate_moments(outer: OuterConfig, c: float, s2: float, *, steps: int, trials: int, seed, start: float = 0.0,
                     record_from: int = 0) -> dict:
    """Monte Carlo of the scalar model (:func:`noloco.quadratic.scalar.scalar_path`, identical replicas at
    ``start``): per trial, the mean over steps t >= ``record_from`` of phi_i^2, phi_i (phi_i' - phi_i),
    (phi_i - mean_G phi)^2 (each averaged over the replicas; G is step t's fresh group) and of
    replica 0's own phi_0 - mean_G(0) phi (the replica average of that is 0 by construction)."""
    rng = np.random.default_rng(seed)
    sums = {key: np.zeros(trials) for key in ("phi2", "phi_step", "group2", "lemma")}
    y0 = np.full((trials, outer.replicas), float(start))
    for t, (y, mean_phi, new) in enumerate(scalar_path(outer, c, s2, steps, trials, rng, y0)):
        if t >= record_from:
            sums["phi2"] += (y * y).mean(1)
            sums["phi_step"] += (y * (new - y)).mean(1)
            sums["group2"] += ((y - mean_phi) ** 2).mean(1)
            sums["lemma"] += y[:, 0] - mean_phi[:, 0]
    return {key: value / (steps - record_from) for key, value in sums.items()}


def ratio_se(numerator, denominator, batches: int = 40) -> tuple[float, float]:
    """sum(numerator) / sum(denominator) over independent trials and its delete-one jackknife
    standard error over ``batches`` blocks of trials (:func:`noloco.theory.stats.jackknife`)."""
    pairs = np.stack([np.asarray(numerator, float), np.asarray(denominator, float)], axis=1)
    blocks = np.array([b.sum(0) for b in np.array_split(pairs, min(batches, len(pairs)))])
    return stats.jackknife(lambda b: b[:, 0].sum() / b[:, 1].sum(), blocks)


def inner_phase_mc(lr: float, curvature: float, steps: int, noise: float, *, samples: int, seed) -> dict:
    """H real SGD steps theta <- theta - lr (lambda theta + sigma xi) from phi ~ N(0, 1) and from
    phi = 0: E Delta^2 = c^2 + s2 and s2, so the coefficient of Var(phi) in Var(Delta) is their
    difference. Returns ``{"coefficient": (mean, se), "noise": (mean, se)}``."""
    rng = np.random.default_rng(seed)
    out = []
    for phi in (rng.standard_normal(samples), np.zeros(samples)):
        theta = phi.copy()
        for _ in range(steps):
            theta -= lr * (curvature * theta + noise * rng.standard_normal(samples))
        out.append(stats.mean_se((theta - phi) ** 2))
    (with_phi, se1), (alone, se0) = out
    return {"coefficient": (with_phi - alone, math.hypot(se1, se0)), "noise": (alone, se0)}


def seed_stream(seed, *more) -> list:
    """A seed (an int or a list of ints) extended by ``more``: independent streams for the parts of one run."""
    return [*np.atleast_1d(seed).tolist(), *more]


def _trials(replicas: int, steps: int, budget: float) -> int:
    """Trials for ``budget`` replica-steps, at most 2000 and at least 32, or 8 to 32 for large N (each
    trial already averages over N replicas; a standard error needs a few trials)."""
    return int(max(8, min(32, 16384 // replicas), min(2000, budget // (replicas * steps))))


def _burn_in(decay: float) -> int | None:
    """Burn-in to stationarity (:func:`noloco.theory.stats.burn_in`), or None where its cap would cut it
    short (a spread that relaxes too slowly for a Monte Carlo of a few hundred steps)."""
    burn = stats.burn_in(decay)
    return burn if burn == stats.burn_in(decay, cap=10 ** 9) else None


# ------------------------------------------------------------------ the statements

def _slope(values, lrs) -> float:
    """d log(value) / d log(eta) between two points; nan unless both values are positive and finite."""
    if not all(0 < v < math.inf for v in values):
        return math.nan
    return math.log(values[1] / values[0]) / math.log(lrs[1] / lrs[0])


def _no_variance(label: str) -> Part:
    return Part(label, 2.0, None, None, None, "holds", "the variance is 0 at every eta (no noise reaches the "
                                                        "outer weights, e.g. beta = 0): proportional to anything")


def _spread_at(outer, inner, curvature, lr):
    c, s2 = numeric.inner_sgd(lr, curvature, inner.steps, inner.noise)
    return exact_moments(outer, float(c), float(s2)), (float(c), float(s2))


def theorem_1(outer, inner, curvature, budget, seed) -> Statement:
    """Theorem 1 (and Theorem 3's conclusion): Var(phi) proportional to eta^2 as eta -> 0. Exact:
    the log-log slope of the stationary spread at eta lambda H in 1e-6..1e-5 (the limit), with
    gamma as given and at gamma = 0, and of Var(phi_i) about the optimum (the mean included).
    Measured: Monte Carlo of the stationary spread at eta / 10 and eta (``claims.spread.stationary_spread_mc``),
    its slope against the exact slope over that decade."""
    tiny = [x / (curvature * inner.steps) for x in ASYMPTOTIC]
    decade = [inner.lr / 10, inner.lr]
    parts = []
    for gamma in dict.fromkeys((outer.gamma, 0.0)):
        o = dataclasses.replace(outer, gamma=gamma)
        label = f"spread E(phi_i - mean phi)^2, gamma = {gamma:g}"
        if o.group_size == o.replicas:
            parts.append(Part(label, 2.0, None, None, None, "holds", "n = N: the replicas stay identical "
                              "(spread 0 at every eta)"))
            continue
        spreads = [_spread_at(o, inner, curvature, lr)[0].spread for lr in tiny]
        if spreads == [0.0, 0.0]:
            parts.append(_no_variance(label))
            continue
        limit = _slope(spreads, tiny)
        runs = [_spread_at(o, inner, curvature, lr) for lr in decade]
        finite = all(math.isfinite(m.spread) for m, _ in runs)
        measured = se = at = None
        note = f"limit: slope over eta lambda H = {ASYMPTOTIC[0]:g}..{ASYMPTOTIC[1]:g}"
        decays = [float(numeric.variance_decay_factor(o.alpha, o.beta, o.gamma, c, o.kappa, o.momentum))
                  for _, (c, _) in runs]
        if finite:
            at = _slope([m.spread for m, _ in runs], decade)
            note += f"; over this setting's decade eta = {decade[0]:g}..{decade[1]:g} the exact slope is {at:.3f}"
        else:
            note += f"; at eta = {decade[0]:g}..{decade[1]:g} the spread is unbounded (no Monte Carlo)"
        if finite and all(_burn_in(d) is not None for d in decays):
            window = 150
            trials = _trials(o.replicas, 400 + window, budget)
            mc = [stationary_spread_mc(o, c, s2, trials=trials, window=window, seed=seed_stream(seed, k))[:2]
                  for k, (_, (c, s2)) in enumerate(runs)]
            measured = _slope([m for m, _ in mc], decade)
            se = math.hypot(*(s / m for m, s in mc)) / math.log(10)
        elif finite:
            note += f"; no Monte Carlo: the spread relaxes too slowly (decay factor {max(decays):.4g} per step)"
        if gamma == 0 and abs(limit - 1) < 0.01:
            note += "; without the pull the spread is O(eta) (nothing but c ~ eta damps it)"
        parts.append(graded(label, 2.0, limit, measured=measured, se=se, at=at, note=note))
    label = "Var(phi_i) about the optimum, replica mean included"
    values = [_spread_at(outer, inner, curvature, lr)[0].var_phi for lr in tiny]
    about = _slope(values, tiny)
    parts.append(_no_variance(label) if values == [0.0, 0.0] else graded(label, 2.0, about,
                        note="the replica mean's own stationary variance is O(eta), as for DiLoCo and SGD: noise "
                             "s2/N ~ eta^2 against a restoring step beta c ~ eta" if abs(about - 1) < 0.01 else ""))
    return Statement("theorem-1-variance-scaling", "Theorem 1; Theorem 3 (A.3)",
                     "Var(phi) is proportional to eta^2 as eta -> 0 (log-log slope 2)", tuple(parts))


def theorem_2(outer, inner, curvature) -> Statement:
    """Theorem 2 (A.2): the mean's recursion (Eq 43) with D_i = 1 + alpha - beta c (Eq 53), roots
    0 < r2 <= r1 <= D (after Eq 46), |D_i| < 1 as the test, and beta > alpha sufficient for m large
    and 0 < eta lambda <= 1. Exact: the heavy-ball Jury conditions (numeric.mean_stable). Measured:
    numpy's eigenvalues of the exact mean transition M (independent of the Jury test)."""
    a, b = outer.alpha, outer.beta
    c, _ = numeric.inner_sgd(inner.lr, curvature, inner.steps, 0.0)
    c = float(c)
    D = float(P.mean_eigenvalue(a, b, inner.lr, curvature, inner.steps))
    premises = 0 < inner.lr * curvature <= 1

    def radius(c_value):
        M, _, _ = numeric.transition(a, b, outer.gamma, c_value, outer.kappa, outer.momentum)
        if not np.all(np.isfinite(M)):  # beta * c overflows: unbounded eigenvalues, their parts unknown
            return np.full(len(M), complex(math.inf, math.nan))
        return np.linalg.eigvals(M)

    eig = radius(c)
    stable = bool(numeric.mean_stable(a, b, outer.gamma, c, outer.momentum))
    premise_note = f"0 < eta lambda = {inner.lr * curvature:g} <= 1: {'yes' if premises else 'no'}; c = {c:.4g} " \
                   f"(m large means c -> 1)"
    r1, r2 = P.mean_roots(D, a)
    ordered = bool(P.roots_ordered(D, a))
    roots = f"D = {D:.4g}, roots {complex(r1):.4g} and {complex(r2):.4g}"
    parts = [
        agreement("beta > alpha => the mean converges (this c)", P.mean_sufficient(a, b) and premises, stable,
                  sufficient=True, measured=float(np.max(np.abs(eig))),
                  note=f"{premise_note}; measured: spectral radius of M"),
        agreement("beta > alpha => the mean converges (m large: c = 1)", P.mean_sufficient(a, b) and premises,
                  bool(numeric.mean_stable(a, b, outer.gamma, 1.0, outer.momentum)), sufficient=True,
                  measured=float(np.max(np.abs(radius(1.0)))),
                  note="exact at c = 1: 0 < beta < 2 (1 + alpha) (heavy-ball)"),
        agreement("roots real and 0 < r2 <= r1 <= D", True, ordered, measured=float(np.max(np.abs(eig.imag))),
                  note=f"{roots}; measured: largest |imaginary part| of M's eigenvalues"
                       + ("; complex roots of modulus sqrt(alpha): the mean still converges" if not ordered
                          and D * D < 4 * a else "")),
        agreement("|D_i| < 1 => the mean converges (Eq 53's test)", bool(P.mean_criterion(D)), stable, sufficient=True,
                  measured=float(np.max(np.abs(eig))), note=roots),
    ]
    if outer.momentum != "heavy-ball":
        parts[0] = dataclasses.replace(parts[0], note=parts[0].note + "; the paper's outer step is heavy-ball (Eq 3)")
    return Statement("theorem-2-mean-condition", "Theorem 2; Eqs 43-53",
                     "E phi -> 0 when beta > alpha (m large, 0 < eta lambda <= 1); real ordered roots",
                     tuple(parts))


def theorem_3(outer, inner, curvature) -> Statement:
    """Theorem 3's window (Eq 74, |d_V| < 1) against the exact spread stability (Jury test of T,
    which depends on N through kappa) in this direction and in a flat one (c = 0), for both readings
    of Eq 55. Measured: numpy's spectral radius of T."""
    c, _ = numeric.inner_sgd(inner.lr, curvature, inner.steps, 0.0)
    a, g, n = outer.alpha, outer.gamma, outer.group_size
    parts = []
    for power in (P.PRINTED_POWER, 1):
        low, high = P.spread_window(a, n, power) if n > 1 else (math.inf, -math.inf)
        for name, c_value in (("curved", float(c)), ("flat", 0.0)):
            rule = (a, outer.beta, g, c_value, outer.kappa, outer.momentum)
            _, T, _ = numeric.transition(*rule)
            exact = bool(numeric.spread_stable(*rule)) or n == outer.replicas
            reading = "gamma^2 (printed)" if power == 2 else "gamma^1"
            parts.append(agreement(
                f"{name} direction (c = {c_value:.3g}), Eq 55 with {reading}", bool(P.in_window(a, g, n, power)),
                exact, measured=spectral_radius(T),
                note=f"window {low:.4g} < gamma < {high:.4g}; measured: spectral radius of T (N = {outer.replicas})"
                     + ("; n = N: no spread at all" if n == outer.replicas else "")))
    return Statement("theorem-3-window", "Theorem 3; Eq 74",
                     "the spread is bounded for sqrt(n/(2(n-1))) alpha < gamma < sqrt(n (2+alpha^2)/(2(n-1)))",
                     tuple(parts))


def _moment_parts(outer, c, s2, budget, seed):
    """The exact moments and their Monte Carlo (per-trial window means, :func:`simulate_moments`), or
    None for the Monte Carlo with the reason."""
    exact = exact_moments(outer, c, s2)
    if not math.isfinite(exact.var_phi):
        return exact, None, "no Monte Carlo: Var(phi_i) is unbounded here"
    rule = (outer.alpha, outer.beta, outer.gamma, c)
    slowest = max(float(numeric.variance_decay_factor(*rule, outer.kappa, outer.momentum)),
                  float(numeric.mean_spectral_radius(*rule, outer.momentum)) ** 2)
    burn, window = _burn_in(slowest), 200
    if burn is None:
        return exact, None, f"no Monte Carlo: the moments relax too slowly (factor {slowest:.4g} per step)"
    mc = simulate_moments(outer, c, s2, steps=burn + window, trials=_trials(outer.replicas, burn + window, budget),
                          seed=seed, record_from=burn)
    return exact, mc, ""


def lemma_1(outer, c, s2, budget, seed) -> Statement:
    """Lemma 1: E(phi_i - mean_G phi) = 0. Exact: 0 (the replicas are exchangeable from an identical
    start). Measured: Monte Carlo from identical replicas at distance 1 from the optimum, replica 0's
    phi_0 - mean_G(0) phi averaged over outer steps 1..20 (the mean moves, so the statement is not trivial)."""
    steps = 21
    mc = simulate_moments(outer, c, s2, steps=steps, trials=_trials(outer.replicas, steps, budget), seed=seed,
                          start=1.0, record_from=1)
    measured, se = stats.mean_se(mc["lemma"])
    part = graded("E(phi_0 - mean_G phi), steps 1..20 from phi = 1", 0.0, 0.0, measured=measured, se=se,
                  note="exact: 0 by exchangeability (identical start, uniform groups)")
    return Statement("lemma-1", "Lemma 1; Appendix B", "E(phi_i - mean_G phi) = 0", (part,))


def _ratio(numerator: float, m: Moments) -> float:
    return numerator / m.var_phi if math.isfinite(m.var_phi) and m.var_phi > 0 else math.inf


def _by_N(values: dict) -> str:
    return ", ".join(f"{N}: {v:.3g}" for N, v in values.items())


def conjecture_1(outer, moments, mc, by_N, why="") -> Statement:
    """Conjecture 1: Var(phi_i - mean_G phi) ~ k (n - 1)/n Var(phi_i), k = 1 and 2. Exact:
    Var(phi_i - mean_G phi) = E z^2 N (n - 1) / ((N - 1) n) over Var(phi_i) (exact_moments)."""
    measured, se = ratio_se(mc["group2"], mc["phi2"]) if mc else (None, None)
    shared = f"the replicas are correlated (corr {moments.correlation:.3g}): they share the mean; " \
        if math.isfinite(moments.correlation) else ""
    note = f"{shared}exact ratio at " \
           f"N = {_by_N({N: _ratio(m.var_phi_group, m) for N, m in by_N.items()})}; {why}".rstrip("; ")
    parts = [graded(f"factor {k} (n-1)/n" + (" (independent replicas)" if k == 1 else " (as Eq 56 uses)"),
                    float(P.conjecture_factor(outer.group_size, k)), _ratio(moments.var_phi_group, moments),
                    measured=measured, se=se, note=note)
             for k in (1, 2)]
    return Statement("conjecture-1", "Conjecture 1 (A.2)", "Var(phi_i - mean_G phi) ~ (n-1)/n Var(phi_i)",
                     tuple(parts))


def eq_22(outer, inner, curvature, samples, seed) -> Statement:
    """Eq 22/30: Var(Delta) ~ B_V Var(phi) + R' (covariance between inner steps dropped) against the
    exact Var(Delta) = c^2 Var(phi) + s2. Measured: real inner SGD steps (``inner_phase_mc``)."""
    c, s2 = (float(x) for x in numeric.inner_sgd(inner.lr, curvature, inner.steps, inner.noise))
    mc = inner_phase_mc(inner.lr, curvature, inner.steps, inner.noise, samples=samples, seed=seed)
    parts = (graded("coefficient of Var(phi): B_V (Eq 30) vs c^2",
                    float(P.inner_coefficient(inner.lr, curvature, inner.steps)), c * c, measured=mc["coefficient"][0],
                    se=mc["coefficient"][1],
                    note="the paper sums squares, eta^2 lambda^2 sum_k b^2k; the exact coefficient is the square "
                         "of the sum, (1 - b^H)^2 (equal only at H = 1)"),
             graded("noise: R' (Eqs 23-25) vs s2", float(P.inner_noise_term(inner.lr, curvature, inner.steps,
                                                                          inner.noise)),
                    s2, measured=mc["noise"][0], se=mc["noise"][1],
                    note="R' grows like H eta^2 sigma^2; the exact s2 saturates at eta sigma^2 / (lambda (2 - eta "
                         "lambda)) (SGD's steps are anticorrelated)"))
    return Statement("eq22-inner-variance", "Eqs 22-30 (A.1)",
                     "Var(Delta) ~ B_V Var(phi) + R', neglecting covariances between inner steps", parts)


def eq_55(outer, moments, mc, by_N, why="") -> Statement:
    """Eq 55: Cov(phi, delta) ~ -gamma^2 (n-1)/n Var(phi) (and the first-power reading). Exact:
    Cov(phi_t, phi_t+1 - phi_t) / Var(phi_t) at stationarity (exact_moments)."""
    measured, se = ratio_se(mc["phi_step"], mc["phi2"]) if mc else (None, None)
    note = "exact: the momentum and the progress terms correlate with phi too (Eq 55 omits them); exact at " \
           f"N = {_by_N({N: _ratio(m.cov_phi_step, m) for N, m in by_N.items()})}; {why}".rstrip("; ")
    parts = [graded(f"-gamma^{power} (n-1)/n" + (" (printed)" if power == 2 else ""),
                    float(P.covariance_factor(outer.gamma, outer.group_size, power)),
                    _ratio(moments.cov_phi_step, moments), measured=measured, se=se, note=note)
             for power in (P.PRINTED_POWER, 1)]
    return Statement("eq55-covariance", "Eq 55 (A.3)", "Cov(phi, delta) ~ -gamma^2 ((n-1)/n) Var(phi)", tuple(parts))


def replica_counts(outer) -> list:
    """The N at which the N-dependence is shown: 2n, 4n, 32n, 512n and the setting's own."""
    n = outer.group_size
    return sorted({k * n for k in (2, 4, 32, 512)} | {outer.replicas})


def independence(outer, inner, curvature, moments, mc, by_N, why="") -> Statement:
    """A.2's independence assumption: the paper's recursion (Eqs 54-70) gives U* = R'' / (1 - d_V -
    E_V), with no N in it; exact: Var(phi_i) at this N and at several N (exact_moments). Readings:
    gamma^power in Eq 55 (2 printed, 1) and k (n-1)/n in Eq 56 (2 printed, 1). Measured: Monte Carlo
    of Var(phi_i) at this N."""
    B = float(P.inner_coefficient(inner.lr, curvature, inner.steps))
    R = float(P.inner_noise_term(inner.lr, curvature, inner.steps, inner.noise))
    counts = list(by_N)
    measured, se = stats.mean_se(mc["phi2"]) if mc else (None, None)
    parts = []
    for power, factor in ((2, 2), (2, 1), (1, 2), (1, 1)):
        d, E, Rpp = P.variance_recursion(outer.alpha, outer.beta, outer.gamma, outer.group_size, B, R, power, factor)
        U = float(P.recursion_stationary(d, E, Rpp))
        gaps = {N: relative_error(U, m.var_phi) if math.isfinite(U) and math.isfinite(m.var_phi) else None
                for N, m in by_N.items()}
        if math.isfinite(U):
            trend = [gaps[N] for N in counts if gaps[N] is not None]
            shrinks = len(trend) > 1 and trend[-1] < trend[0]
            note = "gap at N = " + ", ".join(f"{N}: {g:.0%}" for N, g in gaps.items() if g is not None) + \
                   f"; {'shrinks' if shrinks else 'does not shrink'} from the smallest to the largest N"
        else:
            radius = float(P.recursion_radius(d, E))
            note = f"the recursion diverges: a root of z^2 - d_V z - E_V is {radius:.4g} >= 1 " \
                   f"(d_V = {float(d):.4g}, inside the window, but E_V = {float(E):.4g})"
        printed = " (printed)" if (power, factor) == (2, 2) else ""
        parts.append(graded(f"U* with gamma^{power} in Eq 55, {factor} (n-1)/n in Eq 56{printed}", U,
                            moments.var_phi, measured=measured, se=se, note=f"{note}; {why}".rstrip("; "),
                            details={"d_V": float(d), "E_V": float(E), "R2": float(Rpp), "gap_by_N": gaps}))
    corr = {N: m.correlation for N, m in by_N.items()}
    finite = [corr[N] for N in counts if math.isfinite(corr[N])]
    decreasing = len(finite) > 1 and all(x >= y for x, y in zip(finite, finite[1:]))
    parts.append(Part("corr(phi_i, phi_j) falls as N grows", True, decreasing, None, None,
                      "holds" if decreasing else "fails",
                      ("" if len(finite) > 1 else "no stationary correlation here (unbounded); ") +
                      "exact correlation at N = " + ", ".join(f"{N}: {v:.3g}" for N, v in corr.items()),
                      details={"correlation_by_N": corr}))
    return Statement("independence", "A.2 independence assumption; Eqs 54-70",
                     "treating replicas as independent: an error that shrinks as N grows", tuple(parts))


#: the most inner steps the audit simulates per phase: 2000 phases of 20000 steps take about 4 s
AUDIT_MAX_STEPS = 20_000


def audit(outer: OuterConfig, inner: InnerConfig, curvature: float = 1.0, *, seed: int = 0,
          quick: bool = False) -> Audit:
    """Every statement of the paper's analysis at one setting and one eigen-direction of curvature
    ``curvature``; ``quick`` takes a smaller Monte Carlo. Refuses a noise of 0 (ConfigError), where every
    variance the statements are about is 0."""
    check_real("noise", inner.noise, "0 < noise < inf (the statements are about variances)", lambda v: v > 0)
    check_integer("inner_steps", inner.steps, f"an integer 1 <= inner_steps <= {AUDIT_MAX_STEPS} for the audit (Eq 22 is "
                  "measured on at least 2000 inner phases simulated step by step)", lambda v: 1 <= v <= AUDIT_MAX_STEPS)
    start = time.perf_counter()
    budget = 1.5e6 if quick else 4e6
    c, s2 = (float(x) for x in numeric.inner_sgd(inner.lr, curvature, inner.steps, inner.noise))
    if float(numeric.inner_sgd(inner.lr / 10, curvature, inner.steps, 0.0)[0]) == 0:  # Theorem 1 goes down to eta / 10
        raise ConfigError(f"inner_lr={inner.lr!r} at curvature {curvature:g}: an inner phase at eta / 10 does not move "
                          "the weights (c = 0: eta lambda underflows against 1), so the statements about eta -> 0 "
                          "have nothing to measure; raise --inner-lr or the curvature")
    if not math.isfinite(s2):
        raise ConfigError(f"noise={inner.noise!r}: the inner noise variance s2 overflows float64; scale the noise "
                          "or the curvature down")
    moments, mc, why = _moment_parts(outer, c, s2, budget, [seed, 1])
    by_N = {N: exact_moments(dataclasses.replace(outer, replicas=N), c, s2) for N in replica_counts(outer)}
    statements = (
        theorem_1(outer, inner, curvature, budget / 4, [seed, 2]),
        theorem_2(outer, inner, curvature),
        theorem_3(outer, inner, curvature),
        lemma_1(outer, c, s2, budget, [seed, 3]),
        conjecture_1(outer, moments, mc, by_N, why),
        eq_22(outer, inner, curvature, int(max(2000, min(8000 if quick else 20000, 4e7 // inner.steps))), [seed, 4]),
        eq_55(outer, moments, mc, by_N, why),
        independence(outer, inner, curvature, moments, mc, by_N, why),
    )
    setting = {"outer": dataclasses.asdict(outer), "inner": dataclasses.asdict(inner), "curvature": curvature,
               "c": c, "s2": s2, "kappa": outer.kappa}
    return Audit(setting, statements, seed, quick, time.perf_counter() - start)


# ------------------------------------------------------------------ text

def _value(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    return f"{x:.4g}"


def _verdict(p: Part) -> str:
    if p.verdict == "approximate" and p.relative_error is not None:
        return f"approximate ({p.relative_error:.0%})"
    return p.verdict


def format_audit(report: Audit) -> str:
    """The audit as a table: one row per part (the headline first, the others indented), its note below."""
    s = report.setting
    o, i = s["outer"], s["inner"]
    lines = [f"setting: N={o['replicas']} n={o['group_size']} alpha={o['alpha']:g} beta={o['beta']:g} "
             f"gamma={o['gamma']:g} {o['momentum']} | inner SGD eta={i['lr']:g} H={i['steps']} sigma={i['noise']:g} "
             f"| curvature {s['curvature']:g}: c = {s['c']:.4g}, s2 = {s['s2']:.4g} | seed {report.seed}"]
    rows = [("statement / part", "paper", "exact", "measured +- se (z)", "verdict")]
    notes = [None]
    for st in report.statements:
        for k, p in enumerate(st.parts):
            measured = "-" if p.measured is None else f"{_value(p.measured)} +- {_value(p.se)}" + (
                f" ({p.z:+.1f})" if p.z is not None and p.se else "")
            rows.append((st.id if k == 0 else f"  {p.label}", _value(p.paper), _value(p.exact), measured, _verdict(p)))
            notes.append(f"{p.label}: {p.note}" if k == 0 and p.note else p.note or None)
    widths = [max(len(r[j]) for r in rows) for j in range(5)]
    for row, note in zip(rows, notes):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if note:
            lines.append(f"      {note}")
    held = [st.parts[0].verdict for st in report.statements]
    lines.append(f"headlines: {held.count('holds')} hold, {held.count('approximate')} approximate, "
                 f"{held.count('fails')} fail (of {len(held)}); verdict rule: holds <= {HOLDS:.0%}, approximate "
                 f"<= {APPROXIMATE:.0%} relative error; Monte Carlo z against the exact value; {report.seconds:.1f} s")
    return "\n".join(lines)


# ------------------------------------------------------------------ stability maps (fig_paper_maps)

def _counterexample(mask, score, coords, pick) -> dict | None:
    """The grid point of ``mask`` with the extreme ``score`` (``pick`` = np.argmax or np.argmin)."""
    if not mask.any():
        return None
    index = np.unravel_index(pick(np.where(mask, score, np.nan)), mask.shape)
    return {name: float(np.broadcast_to(value, mask.shape)[index]) for name, value in coords.items()} | \
        {"spectral_radius": float(score[index])}


def compare_regions(paper, exact, score, coords) -> dict:
    """Share of the grid where the paper's region and the exact one agree, and the strongest
    counterexample each way: paper stable but exact unstable (largest spectral radius) and the reverse
    (smallest)."""
    paper, exact = np.asarray(paper, bool), np.asarray(exact, bool)
    score = np.broadcast_to(np.asarray(score, float), paper.shape)
    return {"agreement": float(np.mean(paper == exact)),
            "paper_stable_exact_unstable": _counterexample(paper & ~exact, score, coords, np.nanargmax),
            "paper_unstable_exact_stable": _counterexample(~paper & exact, score, coords, np.nanargmin)}


def window_map(c: float, replicas: int, group_size: int, alpha, gamma, beta: float,
               momentum: str = "heavy-ball") -> dict:
    """Theorem 3's window (both readings of Eq 55) against the exact spread stability on an (alpha, gamma) grid."""
    A, G = np.asarray(alpha, float)[:, None], np.asarray(gamma, float)[None, :]
    kappa = group_kappa(replicas, group_size)
    exact = numeric.spread_stable(A, beta, G, c, kappa, momentum)
    rho = numeric.variance_decay_factor(A, beta, G, c, kappa, momentum)
    out = {"exact": exact.astype(np.int8), "kappa": kappa}
    for power in (P.PRINTED_POWER, 1):
        paper = P.in_window(A, G, group_size, power)
        out[f"power{power}"] = {"paper": paper.astype(np.int8),
                                **compare_regions(paper, exact, rho, {"alpha": A, "gamma": G})}
    return out


def mean_map(c: float, alpha, beta, momentum: str = "heavy-ball") -> dict:
    """Theorem 2's sufficient condition beta > alpha and its test |D| < 1 against the exact mean
    stability on an (alpha, beta) grid (gamma cancels in the mean)."""
    A, B = np.asarray(alpha, float)[:, None], np.asarray(beta, float)[None, :]
    exact = numeric.mean_stable(A, B, 0.0, c, momentum)
    radius = numeric.mean_spectral_radius(A, B, 0.0, c, momentum)
    sufficient = P.mean_sufficient(A, B) & np.ones_like(exact)
    criterion = P.mean_criterion(1 + A - B * c)
    coords = {"alpha": A, "beta": B}
    return {"exact": exact.astype(np.int8), "criterion": criterion.astype(np.int8),
            "sufficient": compare_regions(sufficient, exact, radius, coords),
            "criterion_compare": compare_regions(criterion, exact, radius, coords)}


