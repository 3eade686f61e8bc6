"""Recommend alpha, beta, gamma (and optionally n, H) from the exact quadratic theory.

Problem: over the curvatures of the objective, minimise the replica mean's convergence
rate (the worst spectral radius of M over the directions), subject to

* the mean and the spread being stable (every direction), and
* the stationary replica spread (summed over directions) being at most ``budget``.

A grid over (alpha, beta, gamma) gives the warm starts; Nelder-Mead (scipy) then refines from the best feasible grid points. A
denser (alpha, beta) grid around the answer gives the landscape and the rate-vs-spread
frontier. The
search never leaves the feasible set: an infeasible point scores above every feasible
one, so the best simplex vertex stays feasible. Among settings of equal rate the smaller
spread wins (a small tie-break term), which keeps the answer off the budget boundary
where the rate is flat (complex roots of M: rate sqrt(alpha) whatever beta).

Objectives: ``rate`` (per outer step), ``steps`` (outer steps, i.e. communication rounds,
to shrink the mean's distance by ``target``), ``inner-steps`` (H times that: compute).
For fixed n and H the three give the same setting; they differ when H is tuned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from noloco.theory import numeric
from noloco.theory.stability import is_stable
from noloco.infra.errors import ConfigError
from noloco.infra.record import JsonRecord
from noloco.theory.config import InnerConfig, OuterConfig, group_kappa
from noloco.infra.checks import check_choice, check_integer, check_real
from noloco.theory.spectrum import Spectrum

OBJECTIVES = ("rate", "steps", "inner-steps")
TUNABLE = ("n", "H")  # besides alpha, beta, gamma
TIE_BREAK = 1e-3   # weight of spread / budget in the score: prefers the smaller spread at equal rate
ALPHA_MAX = 0.95   # beyond this the mean's rate sqrt(alpha) is poor and transients are long
MAX_DIRECTIONS = 100_000  # the search's memory is checked against the budget too (noloco.quadratic.tune_check)


@dataclass(frozen=True)
class TuneProblem:
    """What the user's problem fixes: the setting to start from (its N, n, H, momentum and
    inner SGD), the curvatures, the spread budget and what to tune."""

    outer: OuterConfig
    inner: InnerConfig
    spectrum: Spectrum
    budget: float
    objective: str = "rate"
    target: float = 1e-3
    tune_n: bool = False
    tune_h: tuple = ()          # candidate H values; empty: H fixed
    grid: int = 24

    def __post_init__(self):
        check_real("spread_budget", self.budget, "0 < spread_budget < inf", lambda v: 0 < v < math.inf)
        check_real("target", self.target, "0 < target < 1", lambda v: 0 < v < 1)
        check_choice("objective", self.objective, OBJECTIVES)
        check_integer("grid", self.grid, "an integer in 4..200", lambda v: 4 <= v <= 200)
        for h in self.tune_h:
            InnerConfig(lr=self.inner.lr, steps=h, noise=self.inner.noise)  # validates each H

    def candidates(self):
        """(group_size, H) pairs to search: n over the divisors of N with 2 <= n < N (n = N is
        DiLoCo's all-reduce, which NoLoCo avoids; n = 1 never communicates, so the averaged
        model it is scored on is never formed), H over ``tune_h``."""
        N = self.outer.replicas
        ns = [n for n in range(2, N) if N % n == 0] if self.tune_n else [self.outer.group_size]
        if not ns:
            raise ConfigError(f"replicas={N}: --tune n needs a divisor 2 <= n < N")
        hs = list(self.tune_h) or [self.inner.steps]
        return [(n, h) for n in ns for h in hs]


def given_spread(outer: OuterConfig, inner: InnerConfig, spectrum: Spectrum) -> float:
    """The stationary spread of the given setting: the default budget, so that the answer is
    compared with the given setting at equal spread."""
    from noloco.theory.conditions import analyse

    return analyse(outer, inner, spectrum).stationary_variance


def make_problem(method: str, outer: OuterConfig, inner: InnerConfig, spectrum: Spectrum, *,
                 budget: float | None = None, objective: str = "rate", target: float = 1e-3, tune=(),
                 h_values=(), grid: int = 24) -> TuneProblem:
    """The tuning problem of a resolved setting (see :func:`noloco.theory.methods.resolve`): ``tune``
    names what to search besides alpha, beta, gamma (a subset of :data:`TUNABLE`), ``h_values``
    the candidate H of ``tune`` H; ``budget`` defaults to :func:`given_spread`."""
    if method != "noloco":
        raise ConfigError(f"method={method!r} is not allowed; allowed: noloco (the tuner searches alpha, beta "
                          f"and gamma, which method={method!r} fixes)")
    if spectrum.count > MAX_DIRECTIONS:  # before given_spread sums them: the search holds each at every grid point
        raise ConfigError(f"spectrum of {spectrum.count} directions: the tuner evaluates every direction at every grid "
                          f"point; allowed: at most {MAX_DIRECTIONS} (a few hundred fit in memory at --grid 24)")
    unknown = [w for w in tune if w not in TUNABLE]
    if unknown:
        raise ConfigError(f"tune={','.join(tune)!r} is not allowed; allowed: any of {', '.join(TUNABLE)}")
    for h in (tuple(h_values) if "H" in tune else ()) or (inner.steps,):
        c = float(np.max(numeric.inner_sgd(inner.lr, spectrum.high, h, inner.noise)[0]))
        if c == 0:  # eta * lambda underflows against 1: the grid's beta axis (up to 2(1 + alpha) / c) has no end
            raise ConfigError(f"curvatures up to {spectrum.high:g} with inner_lr={inner.lr:g} and H={h}: an inner phase "
                              "does not move the weights (c = 0); the tuner needs c > 0 in the stiffest direction: "
                              "raise --inner-lr or the curvatures")
    if budget is None:
        budget = given_spread(outer, inner, spectrum)
        if not (math.isfinite(budget) and budget > 0):
            raise ConfigError(f"spread_budget is needed: the given setting has no finite positive stationary "
                              f"spread ({budget:.3g}: unstable, or n = N); give one")
    return TuneProblem(outer, inner, spectrum, budget, objective, target, "n" in tune,
                       tuple(h_values) if "H" in tune else (), grid)


@dataclass(frozen=True)
class Point(JsonRecord):
    """One setting and what the theory predicts for it (its JSON: ``to_json``)."""

    alpha: float
    beta: float
    gamma: float
    group_size: int
    inner_steps: int
    rate: float          # worst spectral radius of M over directions (per outer step)
    spread: float        # stationary replica variance, summed over directions
    decay: float         # worst spectral radius of T (spread's decay factor)
    outer_steps: float   # to shrink the mean's distance by the target
    score: float


@dataclass
class TuneResult:
    problem: TuneProblem
    best: Point
    start: Point                                  # the given setting
    paper: Point                                  # pairs, alpha 0.5, beta = gamma = 0.7 on the same problem
    frontier: list = field(default_factory=list)  # Points: best rate at each spread (Pareto), dense grid
    landscape: Landscape | None = None            # see :func:`landscape`, for figures
    evaluations: int = 0

    def recommended(self) -> tuple[OuterConfig, InnerConfig]:
        b = self.best
        outer = replace(self.problem.outer, alpha=b.alpha, beta=b.beta, gamma=b.gamma, group_size=b.group_size)
        return outer, replace(self.problem.inner, steps=b.inner_steps)


def _directions(problem: TuneProblem, steps: int):
    return numeric.inner_sgd(problem.inner.lr, problem.spectrum.array, steps, problem.inner.noise)


@dataclass(frozen=True)
class Evaluation:
    """:func:`evaluate`'s arrays: the mean's rate (inf where unstable), the stationary spread (inf where it
    does not settle) and the spread's decay factor."""

    rate: np.ndarray
    spread: np.ndarray
    decay: np.ndarray


@dataclass(frozen=True)
class Landscape:
    """:func:`landscape`'s trade-off at one (n, H): the (alpha, beta) grid, the mean's rate and the smallest
    spread over gamma on it, and the rate-vs-spread frontier as (alpha, beta, gamma) triples."""

    alpha: np.ndarray
    beta: np.ndarray
    rate: np.ndarray
    min_spread: np.ndarray
    group_size: int
    inner_steps: int
    frontier: list


def evaluate(problem: TuneProblem, alpha, beta, gamma, group_size: int, steps: int) -> Evaluation:
    """Rate, spread and decay on arrays of (alpha, beta, gamma) (broadcast), worst/summed
    over the directions (last axis)."""
    c, s2 = _directions(problem, steps)
    a, b, g = (np.asarray(x, dtype=float)[..., None] for x in (alpha, beta, gamma))
    m, N = problem.outer.momentum, problem.outer.replicas
    kappa = group_kappa(N, group_size)
    rate = numeric.mean_spectral_radius(a, b, g, c, m).max(-1)
    stable = numeric.mean_stable(a, b, g, c, m).all(-1)
    spread = numeric.stationary_variance(a, b, g, c, s2, N, group_size, m).sum(-1)
    decay = numeric.variance_decay_factor(a, b, g, c, kappa, m).max(-1)
    # the one classification (noloco.theory.stability): a marginal rate or spread is not a constraint met; on
    # a stability edge the closed form of the spread is 0/0 and round-off can make it any sign
    spread_ok = np.isfinite(spread) & (spread >= 0) & (is_stable(decay) | (group_size == N))
    rate = np.where(stable & is_stable(rate) & spread_ok, rate, np.inf)
    spread = np.where(spread_ok, spread, np.inf)
    return Evaluation(rate, spread, decay)


def outer_steps_to(rate, target):
    """Outer steps for the mean's distance to shrink by ``target`` at the asymptotic rate."""
    rate = np.asarray(rate, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(rate <= 0, 1.0, np.where(rate < 1, np.log(target) / np.log(np.maximum(rate, 1e-300)), np.inf))


def _score(problem: TuneProblem, rate, spread, steps: int):
    """Lower is better; infeasible (unstable or over budget) scores above every feasible point."""
    if problem.objective == "rate":
        primary = rate
    else:
        primary = outer_steps_to(rate, problem.target) * (steps if problem.objective == "inner-steps" else 1)
        primary = np.log(primary)  # comparable scale across H for the tie-break
    feasible = np.isfinite(primary) & (spread <= problem.budget * (1 + 1e-9))  # the given setting is feasible at its own spread
    with np.errstate(invalid="ignore", divide="ignore"):
        excess = np.log(np.where(np.isfinite(spread), spread, 1e300)) - np.log(problem.budget)
        return np.where(feasible, primary + TIE_BREAK * spread / problem.budget,
                        1e6 + np.clip(np.nan_to_num(excess, nan=1e3), 0, 1e3))


def _point(problem: TuneProblem, alpha, beta, gamma, n, h) -> Point:
    r = evaluate(problem, alpha, beta, gamma, n, h)
    rate, spread, decay = float(r.rate), float(r.spread), float(r.decay)
    return Point(float(alpha), float(beta), float(gamma), n, h, rate, spread, decay,
                 float(outer_steps_to(rate, problem.target)), float(_score(problem, rate, spread, h)))


def axes(problem: TuneProblem, steps: int):
    """Grid axes: alpha in [0, 0.95], beta up to where beta*c = 2(1 + alpha_max) in the stiffest
    direction (the mean's stability edge), gamma in [0, 4]."""
    c, _ = _directions(problem, steps)
    k = problem.grid
    beta_max = 2 * (1 + ALPHA_MAX) / float(np.max(c))
    return (np.linspace(0, ALPHA_MAX, k), np.linspace(beta_max / k, beta_max, k), np.linspace(0, 4, k))


def pareto(rates, spreads):
    """Indices of the (spread, rate) Pareto front, by increasing spread."""
    order = np.argsort(spreads, kind="stable")
    front, best = [], np.inf
    for i in order:
        if np.isfinite(spreads[i]) and rates[i] < best - 1e-12:
            front.append(i)
            best = rates[i]
    return front


def tune(problem: TuneProblem, *, starts: int = 3, progress: bool = False) -> TuneResult:
    """Search the setting (see the module docstring); ``progress``: a bar over the (n, H)
    candidates on stderr."""
    from scipy.optimize import minimize
    from tqdm import tqdm

    o = problem.outer
    start = _point(problem, o.alpha, o.beta, o.gamma, o.group_size, problem.inner.steps)
    paper_n = 2 if o.replicas % 2 == 0 else o.group_size
    paper = _point(problem, 0.5, 0.7, 0.7, paper_n, problem.inner.steps)
    best, evaluations = None, 0
    for n, h in tqdm(problem.candidates(), desc="tune", unit="(n,H)", disable=not progress, leave=False):
        A, B, G = axes(problem, h)
        grid = evaluate(problem, A[:, None, None], B[None, :, None], G[None, None, :], n, h)
        score = _score(problem, grid.rate, grid.spread, h)
        evaluations += score.size
        flat = np.argsort(score, axis=None)[:starts]
        lo = np.array([0.0, 0.0, 0.0])
        hi = np.array([ALPHA_MAX, B[-1], G[-1]])

        def f(x):
            x = np.clip(x, lo, hi)
            r = evaluate(problem, *x, n, h)
            return float(_score(problem, r.rate, r.spread, h))

        local = None
        for index in flat:
            i, j, k = np.unravel_index(index, score.shape)
            x0 = np.array([A[i], B[j], G[k]])
            # a simplex of one grid cell, pointing inwards at the upper bounds
            step = (hi - lo) / problem.grid * np.where(x0 + (hi - lo) / problem.grid > hi, -1, 1)
            simplex = np.vstack([x0, x0 + np.diag(step)])
            res = minimize(f, x0, method="Nelder-Mead", bounds=list(zip(lo, hi)),
                           options={"xatol": 1e-7, "fatol": 1e-10, "maxiter": 2000, "initial_simplex": simplex})
            evaluations += res.nfev
            x = np.clip(res.x, lo, hi) if res.fun <= score.flat[index] else x0
            p = _point(problem, x[0], x[1], x[2], n, h)
            if local is None or p.score < local.score:
                local = p
        assert local is not None  # flat holds at least one start
        if best is None or local.score < best.score:
            best = local
    assert best is not None  # at least one (n, H) is searched
    if best.score >= 1e6:
        raise ConfigError(f"spread_budget={problem.budget:g}: no stable setting in the search range meets it "
                          f"(the given setting's spread is {start.spread:.3g}); raise the budget")
    view = landscape(problem, best, paper)
    frontier = [_point(problem, a, b, g, best.group_size, best.inner_steps) for a, b, g in view.frontier]
    return TuneResult(problem, best, start, paper, frontier, view, evaluations)


def landscape(problem: TuneProblem, best: Point, paper: Point, resolution: int = 80) -> Landscape:
    """The trade-off at the best (n, H) on a dense (alpha, beta) grid around the answer and the
    paper setting: the mean's rate (M has no gamma in it), the smallest stationary spread
    over gamma, and the rate-vs-spread frontier as (alpha, beta, gamma) triples."""
    n, h = best.group_size, best.inner_steps
    A = np.linspace(0, ALPHA_MAX, resolution)
    B = np.linspace(0, 2.2 * max(best.beta, paper.beta), resolution + 1)[1:]
    G = np.linspace(0, max(4.0, 1.5 * best.gamma), 41)
    r = evaluate(problem, A[:, None, None], B[None, :, None], G[None, None, :], n, h)
    spread = np.where(np.isfinite(r.spread), r.spread, np.inf)
    k = spread.argmin(-1)
    min_spread = np.take_along_axis(spread, k[..., None], -1)[..., 0]
    c, _ = _directions(problem, h)
    rate = numeric.mean_spectral_radius(A[:, None, None], B[None, :, None], 0.0, c, problem.outer.momentum).max(-1)
    stable = np.isfinite(min_spread) & is_stable(rate)
    front = pareto(np.where(stable, rate, np.inf).ravel(), np.where(stable, min_spread, np.inf).ravel())
    i, j = np.unravel_index(front, rate.shape)
    return Landscape(A, B, rate, min_spread, n, h, list(zip(A[i], B[j], G[k[i, j]])))
