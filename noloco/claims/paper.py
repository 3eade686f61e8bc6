"""The NoLoCo paper's analysis (arXiv 2506.10911, Appendix A, Section 5.3) checked statement by statement.

For one setting, every statement gets what the paper's form says (:mod:`noloco.theory.paper`), what
the exact quadratic theory says (:mod:`noloco.theory.numeric`: the replica mean is DiLoCo's outer
step, the deviations follow the closed three-moment recursion), what Monte Carlo of the scalar model
or an independent computation measures (with its standard error), and a verdict on the paper's form
against the exact value:

* ``holds``: a relative error of at most :data:`HOLDS` (1 %), or a qualitative claim that is true;
* ``approximate``: a relative error of at most :data:`APPROXIMATE` (25 %), shown;
* ``fails``: anything else, with the reason;
* ``not applicable``: the statement has no object here (no stationary state to approximate, or a sufficient
  condition that is not met, so it claims nothing), counted apart from ``fails``.

Every statement is judged over every direction of the setting's quadratic (``--spectrum``; a large spectrum
by a representative set, its spectral radii scanned in full) and over the flat limit c -> 0, which a
positive-definite quadratic approaches; the worst direction is named in the row. Stability (stable,
marginal, unstable) is the one classification of :mod:`noloco.theory.stability`, with its tolerance.
Each headline judges what the paper states in its own reading; the toolkit's reinterpretations follow
as labelled sub-rows.

The Monte Carlo checks the exact theory, not the paper: its z-score against the exact value at the
point it measures is reported, and a miss beyond 4 standard errors is written into the note (a finding,
never a reason to change the verdict). A statement may have several parts (both readings of a garbled
equation, single directions, the toolkit's readings); the first part is the headline.

The exact stationary moments of one replica are :mod:`noloco.theory.moments`; the stability maps of
``paper_figs/fig_paper_maps.py`` are here, the simulations behind the paper's Fig 5 in
:mod:`noloco.claims.paper_comm`.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from noloco.claims.spread import stationary_spread_mc
from noloco.infra.checks import check_integer, check_real
from noloco.infra.errors import ConfigError
from noloco.theory import numeric, stats
from noloco.theory import paper as P
from noloco.theory.config import InnerConfig, OuterConfig
from noloco.theory.moments import Moments, exact_moments
from noloco.theory.spectrum import Spectrum
from noloco.theory.stability import (MARGINAL, STABLE, TOLERANCE as TOL, UNSTABLE, classify, format_radius)
from noloco.claims.paper_directions import (FLAT_LIMIT, Direction, audit_directions, direction, eig_radius,
                                            few_directions, mean_state, spread_state)
from noloco.claims.paper_mc import (burn_in_steps, inner_phase_mc, ratio_se, seed_stream, simulate_moments,
                                    trial_count)
from noloco.claims.paper_verdicts import (ASYMPTOTIC, HOLDS, NA, VERDICT_ORDER, Audit, AuditSetting, Part, Statement, agreement,
                                          graded, join_notes, pick_worst, relative_error, summarise, worst_part)

def _slope(values, lrs) -> float:
    """d log(value) / d log(eta) between two points; nan unless both values are positive and finite."""
    if not all(0 < v < math.inf for v in values):
        return math.nan
    return math.log(values[1] / values[0]) / math.log(lrs[1] / lrs[0])


def _no_variance(label: str, direction_name: str = "") -> Part:
    return Part(label, 2.0, None, None, None, "holds", "the variance is 0 at every eta (no noise reaches the "
                                                        "outer weights, e.g. beta = 0): proportional to anything",
                direction=direction_name)


def _spread_at(outer, inner, curvature, lr):
    c, s2 = numeric.inner_sgd(lr, curvature, inner.steps, inner.noise)
    return exact_moments(outer, float(c), float(s2)), (float(c), float(s2))


def _var_phi_slope(outer, inner, d: Direction) -> Part:
    """Theorem 1 as stated, in one direction: the log-log slope of Var(phi_i) about the optimum."""
    label = "Var(phi_i) about the optimum (the paper's Var(phi))"
    if d.flat:
        return Part(label, 2.0, None, None, None, NA, "flat direction: Var(phi_i) is unbounded at every eta (no "
                    "restoring force: the replica mean wanders like a random walk)", direction=d.name)
    tiny = [x / (d.curvature * inner.steps) for x in ASYMPTOTIC]
    values = [_spread_at(outer, inner, d.curvature, lr)[0].var_phi for lr in tiny]
    if values == [0.0, 0.0]:
        return _no_variance(label, d.name)
    about = _slope(values, tiny)
    here = exact_moments(outer, d.c, d.s2).var_phi
    note = f"limit: slope over eta lambda H = {ASYMPTOTIC[0]:g}..{ASYMPTOTIC[1]:g}"
    if abs(about - 1) < 0.01:
        note += "; Var(phi_i) is O(eta), as for DiLoCo and SGD: the replica mean's noise s2/N ~ eta^2 against a " \
                "restoring step beta c ~ eta"
    if not math.isfinite(here):
        return Part(label, 2.0, about, None, None, NA, f"no stationary state at this eta (Var(phi_i) unbounded: the "
                    f"mean or the spread diverges), so the theorem's variance does not exist here; {note}",
                    direction=d.name)
    return graded(label, 2.0, about, note=note, direction=d.name)


def theorem_1(outer, inner, dirs, flat, budget, seed) -> Statement:
    """Theorem 1 (and Theorem 3's conclusion): Var(phi) proportional to eta^2 as eta -> 0. The headline is the
    paper's quantity, Var(phi_i) about the optimum, judged in every direction (not applicable where the
    setting has no stationary state, and in the flat limit); exact: its log-log slope at eta lambda H in
    1e-6..1e-5 (the limit). The toolkit's reading, the replica spread E(phi_i - mean phi)^2 with gamma as
    given and at gamma = 0, follows in the headline's direction; measured: Monte Carlo of the stationary
    spread at eta / 10 and eta (``claims.spread.stationary_spread_mc``), its slope against the exact slope
    over that decade."""
    per = [_var_phi_slope(outer, inner, d) for d in dirs] + [_var_phi_slope(outer, inner, flat)]
    missing = [p for p in per[:-1] if p.verdict == NA]
    head = worst_part(per, "Var(phi_i) about the optimum (the paper's Var(phi))", "judged")
    if missing:  # no stationary state in a direction of the quadratic: the statement has no object
        head = dataclasses.replace(missing[0], note=join_notes(f"not applicable in {len(missing)} of {len(dirs)} "
                                                          f"direction(s)", missing[0].note))
    at = next(d for d in dirs if d.name == head.direction) if not head.direction.startswith("flat") else dirs[0]
    parts = [head]
    tiny = [x / (at.curvature * inner.steps) for x in ASYMPTOTIC]
    decade = [inner.lr / 10, inner.lr]
    for gamma in dict.fromkeys((outer.gamma, 0.0)):
        o = dataclasses.replace(outer, gamma=gamma)
        label = f"toolkit's reading: the spread E(phi_i - mean phi)^2, gamma = {gamma:g}"
        if o.group_size == o.replicas:
            parts.append(Part(label, 2.0, None, None, None, "holds", "n = N: the replicas stay identical "
                              "(spread 0 at every eta)", direction=at.name))
            continue
        spreads = [_spread_at(o, inner, at.curvature, lr)[0].spread for lr in tiny]
        if spreads == [0.0, 0.0]:
            parts.append(_no_variance(label, at.name))
            continue
        limit = _slope(spreads, tiny)
        runs = [_spread_at(o, inner, at.curvature, lr) for lr in decade]
        finite = all(math.isfinite(m.spread) for m, _ in runs)
        measured = se = ref = None
        note = f"limit: slope over eta lambda H = {ASYMPTOTIC[0]:g}..{ASYMPTOTIC[1]:g}"
        decays = [float(numeric.variance_decay_factor(o.alpha, o.beta, o.gamma, c, o.kappa, o.momentum))
                  for _, (c, _) in runs]
        if finite:
            ref = _slope([m.spread for m, _ in runs], decade)
            note += f"; over this setting's decade eta = {decade[0]:g}..{decade[1]:g} the exact slope is {ref:.3f}"
        else:
            note += f"; at eta = {decade[0]:g}..{decade[1]:g} the spread is unbounded (no Monte Carlo)"
        if finite and all(burn_in_steps(d) is not None for d in decays):
            window = 150
            trials = trial_count(o.replicas, 400 + window, budget)
            mc = [stationary_spread_mc(o, c, s2, trials=trials, window=window, seed=seed_stream(seed, k))[:2]
                  for k, (_, (c, s2)) in enumerate(runs)]
            measured = _slope([m for m, _ in mc], decade)
            se = math.hypot(*(s / m for m, s in mc)) / math.log(10)
        elif finite:
            note += f"; no Monte Carlo: the spread relaxes too slowly (decay factor {max(decays):.4g} per step)"
        if gamma == 0 and abs(limit - 1) < 0.01:
            note += "; without the pull the spread is O(eta) (nothing but c ~ eta damps it)"
        parts.append(graded(label, 2.0, limit, measured=measured, se=se, at=ref, note=note, direction=at.name))
    return Statement("theorem-1-variance-scaling", "Theorem 1; Theorem 3 (A.3)",
                     "Var(phi) is proportional to eta^2 as eta -> 0 (log-log slope 2)", tuple(parts))


def theorem_2(outer, inner, dirs, flat) -> Statement:
    """Theorem 2 (A.2): the mean's recursion (Eq 43) with D_i = 1 + alpha - beta c (Eq 53). The headline is
    the paper's statement in its own reading: for m large (c = 1 in every direction) and 0 < eta lambda <= 1
    in every direction, beta > alpha is sufficient for E phi -> 0 (not applicable where the condition is not
    met). Then the toolkit's reading at this H in every direction of the spectrum (the flat limit, where
    "m large" cannot hold, apart), the roots' ordering (after Eq 46) and the test |D_i| < 1 in every
    direction, flat included. Exact: the classification of M's closed-form spectral radius
    (noloco.theory.stability); measured: numpy's eigenvalues of M (independent of the closed form)."""
    a, b = outer.alpha, outer.beta
    high = max(d.curvature for d in dirs)
    premises = 0 < inner.lr * high <= 1
    sufficient = bool(P.mean_sufficient(a, b)) and premises
    premise_note = f"0 < eta lambda <= 1 in every direction (largest eta lambda = {inner.lr * high:g}): " \
                   f"{'yes' if premises else 'no'}"
    r1, state1 = mean_state(outer, dirs[0], 1.0)
    parts = [agreement("beta > alpha => E phi -> 0 (m large: c = 1 in every direction)", sufficient,
                       state1 == STABLE, sufficient=True, measured=eig_radius(outer, 1.0, 0),
                       note=join_notes(premise_note, f"exact at c = 1: radius {format_radius(r1)}, {state1} "
                                  "(heavy-ball: stable for 0 < beta < 2 (1 + alpha))"), direction="m large (c = 1)")]
    states = {d: mean_state(outer, d) for d in dirs}
    worst = max(dirs, key=lambda d: states[d][0])
    parts.append(agreement("toolkit's reading: beta > alpha => the mean converges at this H, every direction",
                           sufficient, all(s[1] == STABLE for s in states.values()), sufficient=True,
                           measured=eig_radius(outer, worst.c, 0),
                           note=f"worst: radius {format_radius(states[worst][0])}, {states[worst][1]}; measured: "
                                "numpy's spectral radius of M there", direction=worst.name))
    r0, state0 = mean_state(outer, flat)
    parts.append(Part("toolkit's reading: the flat limit at this H", sufficient, False, eig_radius(outer, 0.0, 0), 0.0,
                      NA, f"'m large' cannot hold as c -> 0 (c = 1 - (1 - eta lambda)^H): radius "
                          f"{format_radius(r0)}, {state0}: E phi stays where it starts, its variance grows with "
                          "the noise", direction=flat.name))
    every = dirs + [flat]
    D = {d: float(P.mean_eigenvalue(a, b, inner.lr, d.curvature, inner.steps)) for d in every}
    ordered = {d: bool(P.roots_ordered(D[d], a)) for d in every}
    bad = next((d for d in every if not ordered[d]), every[0])
    roots = P.mean_roots(D[bad], a)
    imag = max(float(np.max(np.abs(np.linalg.eigvals(numeric.transition(a, b, outer.gamma, d.c, outer.kappa,
                                                                          outer.momentum)[0]).imag))) for d in every)
    parts.append(agreement("roots real and 0 < r2 <= r1 <= D, every direction", True, all(ordered.values()),
                           measured=imag, direction=bad.name,
                           note=join_notes(f"D = {D[bad]:.4g}, roots {complex(roots[0]):.4g} and {complex(roots[1]):.4g}",
                                      "measured: largest |imaginary part| of M's eigenvalues over the directions",
                                      "complex roots of modulus sqrt(alpha): the mean still converges"
                                      if not ordered[bad] and abs(D[bad]) < 2 * math.sqrt(a) else "")))  # D^2 < 4a
    test = {d: bool(P.mean_criterion(D[d])) for d in every}
    off = next((d for d in every if not test[d]), worst)
    parts.append(agreement("|D_i| < 1 in every direction => the mean converges (Eq 53's test)", all(test.values()),
                           all(s[1] == STABLE for s in states.values()) and mean_state(outer, flat)[1] == STABLE,
                           sufficient=True, measured=eig_radius(outer, off.c, 0), direction=off.name,
                           note=f"D = {D[off]:.4g} there" + (" (1 + alpha as c -> 0)" if off.flat else "")))
    if outer.momentum != "heavy-ball":
        parts[0] = dataclasses.replace(parts[0], note=parts[0].note + "; the paper's outer step is heavy-ball (Eq 3)")
    return Statement("theorem-2-mean-condition", "Theorem 2; Eqs 43-53",
                     "E phi -> 0 when beta > alpha (m large, 0 < eta lambda <= 1); real ordered roots",
                     tuple(parts))


def theorem_3(outer, dirs, flat) -> Statement:
    """Theorem 3's window (Eq 74, |d_V| < 1, with the stability tolerance: its endpoints are outside) against
    the exact spread in every direction of the quadratic, the flat limit c -> 0 included: bounded where T is
    stable, or marginal without growth (T depends on N through kappa). Both readings of Eq 55; the
    headline is the printed one, over every direction, the worst named. Measured: numpy's spectral
    radius of T in the worst direction (independent of the closed form)."""
    a, g, n = outer.alpha, outer.gamma, outer.group_size
    every = dirs + [flat]
    states = {d: spread_state(outer, d) for d in every}
    worst = max(every, key=lambda d: states[d][0])
    unbounded = [d for d in dirs if not states[d][2]]
    bounded = all(s[2] for s in states.values())
    spread_note = join_notes(f"worst: radius {format_radius(states[worst][0])}, {states[worst][1]}",
                        f"the spread is unbounded in {len(unbounded)} of {len(dirs)} direction(s) of the spectrum"
                        + (f" (curvature {', '.join(f'{d.curvature:.3g}' for d in unbounded[:4])}"
                           f"{', ...' if len(unbounded) > 4 else ''})" if unbounded else "")
                        + ("" if states[flat][2] else f" and in the flat limit ({states[flat][1]})"),
                        f"measured: numpy's spectral radius of T there (N = {outer.replicas})",
                        "n = N: no spread at all" if n == outer.replicas else "")
    parts = []
    for power in (P.PRINTED_POWER, 1):
        low, high = P.spread_window(a, n, power) if n > 1 else (math.inf, -math.inf)
        d_v = float(P.window_d(a, g, n, power))
        where = {STABLE: "inside the window", MARGINAL: "at the window's edge (|d_V| = 1 within "
                 f"{TOL:g}: the test says no)", UNSTABLE: "outside the window"}[classify(abs(d_v))]
        reading = "gamma^2 (printed)" if power == 2 else "gamma^1"
        parts.append(agreement(f"every direction, Eq 55 with {reading}", bool(P.in_window(a, g, n, power)), bounded,
                               measured=eig_radius(outer, worst.c, 1), direction=worst.name,
                               note=join_notes(f"window {low:.4g} < gamma < {high:.4g}: d_V = {d_v:.4g}, {where}",
                                          spread_note)))
    inside = bool(P.in_window(a, g, n, P.PRINTED_POWER))
    for d in few_directions(dirs, lambda d: states[d][0]) + [flat]:
        parts.append(agreement(f"{'flat limit' if d.flat else 'one direction'}, printed reading", inside, states[d][2],
                               measured=eig_radius(outer, d.c, 1), direction=d.name,
                               note=f"radius {format_radius(states[d][0])}, {states[d][1]}"))
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
    burn, window = burn_in_steps(slowest), 200
    if burn is None:
        return exact, None, f"no Monte Carlo: the moments relax too slowly (factor {slowest:.4g} per step)"
    mc = simulate_moments(outer, c, s2, steps=burn + window, trials=trial_count(outer.replicas, burn + window, budget),
                          seed=seed, record_from=burn)
    return exact, mc, ""


def lemma_1(outer, d: Direction, budget, seed) -> Statement:
    """Lemma 1: E(phi_i - mean_G phi) = 0. Exact: 0 in every direction (the replicas are exchangeable from an
    identical start). Measured: Monte Carlo from identical replicas at distance 1 from the optimum, replica
    0's phi_0 - mean_G(0) phi averaged over outer steps 1..20 (the mean moves, so the statement is not
    trivial), in the largest curvature's direction."""
    steps = 21
    mc = simulate_moments(outer, d.c, d.s2, steps=steps, trials=trial_count(outer.replicas, steps, budget), seed=seed,
                          start=1.0, record_from=1)
    measured, se = stats.mean_se(mc.lemma)
    part = graded("E(phi_0 - mean_G phi), steps 1..20 from phi = 1", 0.0, 0.0, measured=measured, se=se,
                  note="exact: 0 in every direction by exchangeability (identical start, uniform groups)",
                  direction=d.name)
    return Statement("lemma-1", "Lemma 1; Appendix B", "E(phi_i - mean_G phi) = 0", (part,))


def _ratio(numerator: float, m: Moments) -> float:
    return numerator / m.var_phi if math.isfinite(m.var_phi) and m.var_phi > 0 else math.inf


def _by_N(values: dict) -> str:
    return ", ".join(f"{N}: {v:.3g}" for N, v in values.items())


class _Moments:
    """The exact moments in each direction (at this N and at :func:`replica_counts`), and Monte Carlo of
    the moments in a direction, run once per direction asked for."""

    def __init__(self, outer, dirs, budget, seed):
        self.outer, self.dirs, self.budget, self.seed = outer, dirs, budget, seed
        self.exact = {d: exact_moments(outer, d.c, d.s2) for d in dirs}
        self.by_N = {d: {N: exact_moments(dataclasses.replace(outer, replicas=N), d.c, d.s2)
                         for N in replica_counts(outer)} for d in dirs}
        self._mc = {}

    def mc(self, d: Direction):
        if d not in self._mc:
            _, mc, why = _moment_parts(self.outer, d.c, d.s2, self.budget, self.seed)
            self._mc[d] = (mc, why)
        return self._mc[d]


def _flat_na(label: str, flat: Direction) -> Part:
    return Part(label, None, None, None, None, NA, "flat direction: Var(phi_i) is unbounded (no restoring "
                "force), so there is no stationary state to approximate", direction=flat.name)


def _per_direction(build, moments: _Moments, flat: Direction, label: str, what: str = "judged") -> Part:
    """``build(d, mc, why)`` in every direction without Monte Carlo, the worst chosen, then rebuilt there with
    its Monte Carlo; the flat limit counted as not applicable."""
    parts = [build(d, None, "") for d in moments.dirs] + [_flat_na(label, flat)]
    worst = pick_worst(parts)
    summary = summarise(parts, worst, what)
    if worst.direction.startswith("flat") or worst.verdict == NA:
        return dataclasses.replace(worst, label=label, note=join_notes(summary, worst.note))
    d = next(d for d in moments.dirs if d.name == worst.direction)
    mc, why = moments.mc(d)
    again = build(d, mc, why)
    return dataclasses.replace(again, label=label, note=join_notes(summary, again.note))


def conjecture_1(outer, moments: _Moments, flat) -> Statement:
    """Conjecture 1: Var(phi_i - mean_G phi) ~ k (n - 1)/n Var(phi_i), k = 1 (as stated) and 2 (as Eq 56 uses),
    in every direction. Exact: Var(phi_i - mean_G phi) = E z^2 N (n - 1) / ((N - 1) n) over Var(phi_i)
    (exact_moments); measured: Monte Carlo in the worst direction."""
    def build(k):
        def part(d, mc, why):
            m = moments.exact[d]
            measured, se = ratio_se(mc.group2, mc.phi2) if mc else (None, None)
            shared = f"the replicas are correlated (corr {m.correlation:.3g}): they share the mean" \
                if math.isfinite(m.correlation) else ""
            note = join_notes(shared, "exact ratio at N = "
                         + _by_N({N: _ratio(x.var_phi_group, x) for N, x in moments.by_N[d].items()}), why)
            return graded("", float(P.conjecture_factor(outer.group_size, k)), _ratio(m.var_phi_group, m),
                          measured=measured, se=se, note=note, direction=d.name)
        return part
    parts = [_per_direction(build(k), moments, flat,
                            f"factor {k} (n-1)/n" + (" (as stated: independent replicas)" if k == 1 else
                                                     " (as Eq 56 uses)")) for k in (1, 2)]
    return Statement("conjecture-1", "Conjecture 1 (A.2)", "Var(phi_i - mean_G phi) ~ (n-1)/n Var(phi_i)",
                     tuple(parts))


def eq_22(outer, inner, dirs, samples, seed) -> Statement:
    """Eq 22/30: Var(Delta) ~ B_V Var(phi) + R' (covariance between inner steps dropped) against the
    exact Var(Delta) = c^2 Var(phi) + s2, in every direction and in the flat limit (eta lambda H =
    :data:`FLAT_LIMIT`, where B_V / c^2 -> 1/H). Measured: real inner SGD steps (``inner_phase_mc``) in the
    worst direction."""
    flat = direction(inner, FLAT_LIMIT / (inner.lr * inner.steps))
    every = dirs + [flat]

    def coefficient(d, mc):
        return graded("", float(P.inner_coefficient(inner.lr, d.curvature, inner.steps)), d.c * d.c,
                      measured=mc.coefficient[0] if mc else None, se=mc.coefficient[1] if mc else None,
                      note="the paper sums squares, eta^2 lambda^2 sum_k b^2k; the exact coefficient is the square "
                           "of the sum, (1 - b^H)^2 (equal only at H = 1; B_V / c^2 -> 1/H as lambda -> 0)",
                      direction=_flat_name(d, flat))

    def noise(d, mc):
        return graded("", float(P.inner_noise_term(inner.lr, d.curvature, inner.steps, inner.noise)), d.s2,
                      measured=mc.noise[0] if mc else None, se=mc.noise[1] if mc else None,
                      note="R' grows like H eta^2 sigma^2; the exact s2 saturates at eta sigma^2 / (lambda (2 - eta "
                           "lambda)) (SGD's steps are anticorrelated)", direction=_flat_name(d, flat))

    parts = []
    for k, (build, label) in enumerate(((coefficient, "coefficient of Var(phi): B_V (Eq 30) vs c^2"),
                                        (noise, "noise: R' (Eqs 23-25) vs s2"))):
        each = [build(d, None) for d in every]
        worst = pick_worst(each[:-1])
        # the flat limit is named only where it is worse by more than HOLDS: its values (c^2 ~ 1e-18) are
        # beyond any Monte Carlo, a spectrum direction's are not
        if VERDICT_ORDER[each[-1].verdict] < VERDICT_ORDER[worst.verdict] or (each[-1].verdict == worst.verdict and (
                each[-1].relative_error or 0) > (worst.relative_error or 0) + HOLDS):
            worst = each[-1]
        d = every[each.index(worst)]
        mc = None if d is flat else inner_phase_mc(inner.lr, d.curvature, inner.steps, inner.noise, samples=samples,
                                                   seed=seed_stream(seed, k))
        again = build(d, mc)
        parts.append(dataclasses.replace(again, label=label, note=join_notes(summarise(each, worst, "judged"), again.note,
                                                                         "flat limit: relative error "
                                                                         f"{each[-1].relative_error:.1%}")))
    return Statement("eq22-inner-variance", "Eqs 22-30 (A.1)",
                     "Var(Delta) ~ B_V Var(phi) + R', neglecting covariances between inner steps", tuple(parts))


def _flat_name(d: Direction, flat: Direction) -> str:
    return f"flat (eta lambda H = {FLAT_LIMIT:g})" if d is flat else d.name


def eq_55(outer, moments: _Moments, flat) -> Statement:
    """Eq 55: Cov(phi, delta) ~ -gamma^2 (n-1)/n Var(phi) (and the first-power reading), in every direction.
    Exact: Cov(phi_t, phi_t+1 - phi_t) / Var(phi_t) at stationarity (exact_moments)."""
    def build(power):
        def part(d, mc, why):
            m = moments.exact[d]
            measured, se = ratio_se(mc.phi_step, mc.phi2) if mc else (None, None)
            note = join_notes("exact: the momentum and the progress terms correlate with phi too (Eq 55 omits them); "
                         "exact at N = " + _by_N({N: _ratio(x.cov_phi_step, x) for N, x in moments.by_N[d].items()}),
                         why)
            return graded("", float(P.covariance_factor(outer.gamma, outer.group_size, power)),
                          _ratio(m.cov_phi_step, m), measured=measured, se=se, note=note, direction=d.name)
        return part
    parts = [_per_direction(build(power), moments, flat, f"-gamma^{power} (n-1)/n" + (" (printed)" if power == 2
                                                                                       else ""))
             for power in (P.PRINTED_POWER, 1)]
    return Statement("eq55-covariance", "Eq 55 (A.3)", "Cov(phi, delta) ~ -gamma^2 ((n-1)/n) Var(phi)", tuple(parts))


def replica_counts(outer) -> list:
    """The N at which the N-dependence is shown: 2n, 4n, 32n, 512n and the setting's own."""
    n = outer.group_size
    return sorted({k * n for k in (2, 4, 32, 512)} | {outer.replicas})


def independence(outer, inner, moments: _Moments, flat) -> Statement:
    """A.2's independence assumption. The headline is the assumption itself: the replicas' correlation
    corr(phi_i, phi_j) shrinks in size as N grows (exact, at :func:`replica_counts`), in every direction.
    Then the recursion the paper builds on it (Eqs 54-70), U* = R'' / (1 - d_V - E_V) with no N in it,
    against the exact Var(phi_i), in four readings: gamma^power in Eq 55 (2 printed, 1) and k (n-1)/n in
    Eq 56 (2 printed, 1). Measured: Monte Carlo of Var(phi_i) at this N in the worst direction."""
    counts = replica_counts(outer)

    def assumption(d, mc, why):
        corr = {N: m.correlation for N, m in moments.by_N[d].items()}
        size = [abs(corr[N]) for N in counts]
        values = "exact correlation at N = " + ", ".join(f"{N}: {v:.3g}" for N, v in corr.items())
        if not all(map(math.isfinite, size)):
            return Part("", True, None, None, None, NA, join_notes("no stationary correlation here (unbounded)", values),
                        direction=d.name)
        # sizes, not signed values: the claim is that the correlation becomes small (it may change sign on
        # the way); a trend from the smallest N to the largest, where it must be the smallest of all
        falls = size[-1] < size[0] and size[-1] <= min(size)
        monotone = all(x >= y for x, y in zip(size, size[1:]))
        return agreement("", True, falls, direction=d.name,
                         note=join_notes(values, (f"|corr| falls from {size[0]:.3g} to {size[-1]:.3g}"
                                             + ("" if monotone else " (not monotonically)")) if falls else
                                    f"|corr| at the largest N ({size[-1]:.3g}) is not the smallest"))

    head = worst_part([assumption(d, None, "") for d in moments.dirs] +
                       [_flat_na("the assumption", flat)], "the assumption: |corr(phi_i, phi_j)| falls as N grows",
                       "judged")
    parts = [head]
    for power, factor in ((2, 2), (2, 1), (1, 2), (1, 1)):
        def recursion(d, mc, why, power=power, factor=factor):
            B = float(P.inner_coefficient(inner.lr, d.curvature, inner.steps))
            R = float(P.inner_noise_term(inner.lr, d.curvature, inner.steps, inner.noise))
            m = moments.exact[d]
            measured, se = stats.mean_se(mc.phi2) if mc else (None, None)
            d_v, E, Rpp = P.variance_recursion(outer.alpha, outer.beta, outer.gamma, outer.group_size, B, R, power,
                                               factor)
            U = float(P.recursion_stationary(d_v, E, Rpp))
            gaps = {N: relative_error(U, x.var_phi) if math.isfinite(U) and math.isfinite(x.var_phi) else None
                    for N, x in moments.by_N[d].items()}
            if math.isfinite(U):
                trend = [gaps[N] for N in counts if gaps[N] is not None]
                shrinks = len(trend) > 1 and trend[-1] < trend[0]
                note = "gap at N = " + ", ".join(f"{N}: {g:.0%}" for N, g in gaps.items() if g is not None) + \
                       f"; {'shrinks' if shrinks else 'does not shrink'} from the smallest to the largest N"
            else:
                where = {STABLE: "inside the window", MARGINAL: "at the window's edge",
                         UNSTABLE: "outside the window"}[classify(abs(float(d_v)))]
                note = f"the recursion diverges: a root of z^2 - d_V z - E_V is " \
                       f"{format_radius(float(P.recursion_radius(d_v, E)))}, not below 1 (d_V = {float(d_v):.4g}, " \
                       f"{where}; E_V = {float(E):.4g})"
            return graded("", U, m.var_phi, measured=measured, se=se, note=join_notes(note, why), direction=d.name,
                          details={"d_V": float(d_v), "E_V": float(E), "R2": float(Rpp), "gap_by_N": gaps})
        printed = " (printed)" if (power, factor) == (2, 2) else ""
        parts.append(_per_direction(recursion, moments, flat, f"the paper's recursion: U* with gamma^{power} in Eq 55, "
                                                              f"{factor} (n-1)/n in Eq 56{printed}"))
    return Statement("independence", "A.2 independence assumption; Eqs 54-70",
                     "treating replicas as independent: an error that shrinks as N grows", tuple(parts))


#: the most inner steps the audit simulates per phase: 2000 phases of 20000 steps take about 4 s
AUDIT_MAX_STEPS = 20_000


def memory_estimate(outer: OuterConfig, quick: bool = False) -> int:
    """Bytes the audit allocates at most: its Monte Carlo keeps about 24 arrays of trials x N floats (state,
    momentum, partitions, group means, noise and their temporaries) with at least 8 trials (:func:`trial_count`),
    besides a fixed 64 MiB (inner-phase samples, the interpreter's arrays)."""
    trials = trial_count(outer.replicas, 21, 1.5e6 if quick else 4e6)  # Lemma 1: 21 steps, the most trials
    return 24 * 8 * trials * outer.replicas + (64 << 20)


#: seconds of CPU per trial and replica of the audit's Monte Carlo at its longest run (Theorem 1: 550 steps), and
#: the rest: measured with ``noloco paper -N N --quick`` at N = 8, 3,000 and 30,000 on the 2-core machine (CPU
#: time 1.35 s, 3.8 s and 37 s, load 5.5; the Monte Carlo's floor of 8 trials of N replicas dominates at large N)
SECONDS_PER_TRIAL_REPLICA, SETUP_SECONDS = 1.5e-4, 1.5
#: the time budget of ``--quick`` when ``--max-time`` is not given: a quick run finishes in seconds or is refused
QUICK_MAX_SECONDS = 30.0


def time_estimate(outer: OuterConfig, quick: bool = False) -> float:
    """Seconds the audit takes, about (:data:`SECONDS_PER_TRIAL_REPLICA`): it grows with N once the Monte Carlo's
    trials reach their floor."""
    trials = trial_count(outer.replicas, 550, 1.5e6 if quick else 4e6)
    return SETUP_SECONDS + SECONDS_PER_TRIAL_REPLICA * trials * outer.replicas * (1 if quick else 1.5)


def audit(outer: OuterConfig, inner: InnerConfig, spectrum=1.0, *, seed: int = 0, quick: bool = False) -> Audit:
    """Every statement of the paper's analysis at one setting, judged over every direction of the quadratic
    ``spectrum`` (a :class:`Spectrum` or one curvature) and the flat limit c -> 0; ``quick`` takes a smaller
    Monte Carlo. Refuses a noise of 0 (ConfigError), where every variance the statements are about is 0."""
    check_real("noise", inner.noise, "0 < noise < inf (the statements are about variances)", lambda v: v > 0)
    check_integer("inner_steps", inner.steps, f"an integer 1 <= inner_steps <= {AUDIT_MAX_STEPS} for the audit (Eq 22 is "
                  "measured on at least 2000 inner phases simulated step by step)", lambda v: 1 <= v <= AUDIT_MAX_STEPS)
    start = time.perf_counter()
    if not isinstance(spectrum, Spectrum):
        spectrum = Spectrum(tuple(np.atleast_1d(np.asarray(spectrum, dtype=float)).tolist()))
    budget = 1.5e6 if quick else 4e6
    dirs = [direction(inner, lam) for lam in audit_directions(outer, inner, spectrum)]
    top = dirs[0]
    if float(numeric.inner_sgd(inner.lr / 10, top.curvature, inner.steps, 0.0)[0]) == 0:  # Theorem 1 goes to eta / 10
        raise ConfigError(f"inner_lr={inner.lr!r} at curvature {top.curvature:g}: an inner phase at eta / 10 does not "
                          "move the weights (c = 0: eta lambda underflows against 1), so the statements about eta -> 0 "
                          "have nothing to measure; raise --inner-lr or the curvature")
    if not all(math.isfinite(d.s2) for d in dirs):
        raise ConfigError(f"noise={inner.noise!r}: the inner noise variance s2 overflows float64; scale the noise "
                          "or the curvature down")
    # directions whose inner phase does not move the weights at all (c = 0 in float64) are the flat limit itself
    dirs = [d for d in dirs if d.c > 0] or dirs[:1]
    flat = direction(inner, 0.0)
    moments = _Moments(outer, dirs, budget, [seed, 1])
    samples = int(max(2000, min(8000 if quick else 20000, 4e7 // inner.steps)))
    statements = (
        theorem_1(outer, inner, dirs, flat, budget / 4, [seed, 2]),
        theorem_2(outer, inner, dirs, flat),
        theorem_3(outer, dirs, flat),
        lemma_1(outer, top, budget, [seed, 3]),
        conjecture_1(outer, moments, flat),
        eq_22(outer, inner, dirs, samples, [seed, 4]),
        eq_55(outer, moments, flat),
        independence(outer, inner, moments, flat),
    )
    setting = AuditSetting(outer, inner, top.curvature, top.c, top.s2, outer.kappa, spectrum.count,
                           [d.curvature for d in dirs])
    return Audit(setting, statements, seed, quick, time.perf_counter() - start)
