"""`noloco tune` as a library: tune with :mod:`noloco.theory.tune`, then verify the recommendation
(and the paper setting on the same problem) with a short simulation of the simulator's inner SGD phase (exact in distribution by default)
(:mod:`noloco.quadratic.simulator`), and report predicted next to simulated with standard errors.

Verification, per setting:

* *spread*: a run from identical replicas, burnt in until the transient is 1e-3 of itself,
  then 200 outer steps averaged per trial; mean and standard error over the trials;
* *rate*: :data:`SIM_BATCHES` independent batches of trials started :data:`RATE_START`
  from the optimum (the expected mean is linear in the start, the noise is not). The
  expected mean of the slowest direction obeys M's characteristic polynomial exactly
  (Cayley-Hamilton), so a least-squares fit of ``y_{t+2} = a1 y_{t+1} + a0 y_t`` over the
  steps where it stands 20 standard errors above the noise gives ``(a1, a0) = (trace M,
  -det M)`` and the rate is the largest root; standard errors by jackknife over the batches.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from noloco.theory import numeric
from noloco.infra.checks import check_integer
from noloco.infra.files import SCHEMA_VERSION
from noloco.infra.record import JsonRecord
from noloco.theory.config import InnerConfig
from noloco.theory.stats import burn_in, jackknife, mean_se, z_score
from noloco.theory.tune import Point, TuneProblem, TuneResult, tune

SIM_BATCHES = 10   # independent seeds for the rate's jackknife standard error
RATE_START = 1e3   # initial distance to the optimum (per coordinate) of the rate runs
MIN_TRIALS = 20    # fewer leaves the spread's standard error meaningless


def _fit(y) -> np.ndarray:
    """(a1, a0) of the order-2 linear recursion y_{t+2} = a1 y_{t+1} + a0 y_t, least squares: the
    expected mean obeys the characteristic polynomial of M exactly (Cayley-Hamilton), so
    a1 = trace M and a0 = -det M whichever roots it has."""
    X = np.column_stack([y[1:-1], y[:-2]])
    return np.linalg.lstsq(X, y[2:], rcond=None)[0]


def _radius(coefficients) -> float:
    a1, a0 = coefficients
    return float(np.max(np.abs(np.roots([1.0, -a1, -a0]))))


def _directions(problem: TuneProblem, point):
    """Per direction: the contraction c of one inner phase and the mean's spectral radius."""
    c, _ = numeric.inner_sgd(problem.inner.lr, problem.spectrum.array, point.inner_steps, problem.inner.noise)
    return c, numeric.mean_spectral_radius(point.alpha, point.beta, point.gamma, c, problem.outer.momentum)


def _sorted_index(curvatures, i) -> int:
    """Index of direction i in the simulator's eigen-coordinates (ascending eigenvalues)."""
    return int(np.argsort(np.asarray(curvatures), kind="stable").tolist().index(i))


@dataclass(frozen=True)
class PointCheck(JsonRecord):
    """One setting's verifying simulation (:func:`simulate_point`) and, from :func:`verify_point`, its z-scores
    against the prediction. ``rate`` / ``charpoly`` are None when the slowest direction fell into its noise
    within 5 steps; ``spread`` None and ``diverged_at`` set when the spread run diverged."""

    OPTIONAL_KEYS = ("diverged_at",)

    rate: Optional[float]
    rate_se: Optional[float]
    rate_window: int
    charpoly: Optional[list]
    charpoly_se: Optional[list]
    spread: Optional[float] = None
    spread_se: Optional[float] = None
    diverged_at: Optional[int] = None
    rate_z: Optional[float] = None
    spread_z: Optional[float] = None
    charpoly_predicted: Optional[list] = None
    charpoly_z: Optional[list] = None


@dataclass(frozen=True)
class ProblemSummary(JsonRecord):
    """The tuning problem as the report states it (``inner``: the inner phase's lr, steps and noise)."""

    replicas: int
    group_size: int
    momentum: str
    inner: dict
    curvatures: list
    spread_budget: float
    objective: str
    target: float
    tune_n: bool
    tune_h: list

    def inner_config(self) -> InnerConfig:
        """The inner phase these fields were written from."""
        return InnerConfig(**self.inner)


@dataclass(frozen=True)
class Recommended(JsonRecord):
    alpha: float
    beta: float
    gamma: float
    group_size: int
    inner_steps: int


@dataclass(frozen=True)
class FrontierPoint(JsonRecord):
    """The fastest setting at one spread on the dense grid (the Pareto frontier)."""

    rate: float
    spread: float
    alpha: float
    beta: float
    gamma: float
    group_size: int
    inner_steps: int


@dataclass(frozen=True)
class TuneReport(JsonRecord):
    """Everything `noloco tune` prints (its JSON: ``to_json``; its text: :func:`format_report`). The
    ``simulated_*`` and ``*_z`` fields are the recommended setting's check, None without verification."""

    NESTED = {"problem": ProblemSummary, "recommended": Recommended, "given": Point, "paper": Point,
              "paper_simulated": PointCheck, "recommended_check": PointCheck, "frontier": (list, FrontierPoint)}

    schema_version: int
    problem: ProblemSummary
    recommended: Recommended
    predicted_rate: float
    predicted_spread: float
    predicted_decay: float
    predicted_outer_steps: float
    simulated_rate: Optional[float]
    simulated_rate_se: Optional[float]
    simulated_spread: Optional[float]
    simulated_spread_se: Optional[float]
    rate_z: Optional[float]
    spread_z: Optional[float]
    given: Point
    paper: Point
    paper_simulated: Optional[PointCheck]
    recommended_check: Optional[PointCheck]
    frontier: list
    evaluations: int


def simulate_point(problem: TuneProblem, point, *, trials: int, seed: int, progress: bool = False) -> PointCheck:
    """Simulated rate (jackknife SE over independent seeds) and stationary spread (SE over
    trials) of one setting, with the simulator's inner SGD phase (exact in distribution by default) on the quadratic."""
    from noloco.quadratic.sim_config import SimConfig
    from noloco.quadratic.simulator import simulate

    outer = dataclasses.replace(problem.outer, alpha=point.alpha, beta=point.beta, gamma=point.gamma,
                                group_size=point.group_size)
    inner = dataclasses.replace(problem.inner, steps=point.inner_steps)
    curv = problem.spectrum.curvatures
    # rate: the slowest direction's expected mean, while it stands well above its noise
    rate_steps = burn_in(point.rate, tolerance=1e-4, minimum=6, cap=60)
    worst = _sorted_index(curv, int(np.argmax(_directions(problem, point)[1])))
    batches = []
    for b in range(SIM_BATCHES):
        # the expected mean is linear in the start and the noise is not: a far start keeps the
        # signal above the noise for more steps
        cfg = SimConfig(outer=outer, inner=inner, curvatures=curv, trials=max(trials // SIM_BATCHES, 2),
                        outer_steps=rate_steps, seed=seed * 1000 + b, start=RATE_START)
        batches.append(np.array(simulate(cfg).mean_distance.mean)[:, worst])
    batches = np.array(batches)                                      # (batches, steps + 1)
    pooled, se_t = mean_se(batches)
    strong = np.abs(pooled) > 20 * se_t
    usable = int(np.argmin(strong)) if not strong.all() else len(pooled)
    out = PointCheck(rate=None, rate_se=None, rate_window=usable, charpoly=None, charpoly_se=None)
    if usable >= 5:
        fit = lambda b: _fit(b.mean(0)[:usable])
        rate, rate_se = jackknife(lambda b: _radius(fit(b)), batches)
        (a1, a1_se), (a0, a0_se) = (jackknife(lambda b, k=k: fit(b)[k], batches) for k in (0, 1))
        out = dataclasses.replace(out, rate=rate, rate_se=rate_se, charpoly=[a1, a0], charpoly_se=[a1_se, a0_se])
    # spread: burn in until the transient is 1e-3 of itself, then average a window per trial
    burn = burn_in(point.decay, tolerance=1e-3, minimum=20, cap=400)
    cfg = SimConfig(outer=outer, inner=inner, curvatures=curv, trials=trials, outer_steps=burn + 200,
                    burn_in=burn, seed=seed * 1000 + SIM_BATCHES, start=0.0)
    run = simulate(cfg, progress=progress)
    if run.window_spread is None:
        return dataclasses.replace(out, diverged_at=run.diverged_at)
    spread, spread_se = mean_se(run.window_spread)
    return dataclasses.replace(out, spread=spread, spread_se=spread_se)


def predicted_charpoly(problem: TuneProblem, point) -> list:
    """(trace M, -det M) of the slowest direction: the coefficients the simulation fits."""
    c, rates = _directions(problem, point)
    M, _, _ = numeric.transition(point.alpha, point.beta, point.gamma, c[int(np.argmax(rates))], 0.0,
                                 problem.outer.momentum)
    return [float(np.trace(M)), float(-np.linalg.det(M))]


def verify_point(problem: TuneProblem, point, **kw) -> PointCheck:
    """Simulated next to predicted, with z-scores. The rate is a root of a fitted polynomial:
    at critical damping (a double root, where the tuner tends to land) a root moves like the
    square root of the noise in the coefficients, so its z-score leans positive; the
    coefficients themselves are linear estimates and get their own z-scores."""
    sim = simulate_point(problem, point, **kw)
    predicted = predicted_charpoly(problem, point)
    z_coefficients = None
    if sim.charpoly is not None:
        z_coefficients = [z_score(x, se, p) for x, se, p in zip(sim.charpoly, sim.charpoly_se, predicted)]
    return dataclasses.replace(sim, rate_z=z_score(sim.rate, sim.rate_se, point.rate),
                               spread_z=z_score(sim.spread, sim.spread_se, point.spread),
                               charpoly_predicted=predicted, charpoly_z=z_coefficients)


def check_trials(trials) -> int:
    return check_integer("trials", trials, f"an integer >= {MIN_TRIALS}", lambda v: v >= MIN_TRIALS)


#: the search's costs on the project's 2-core machine (issue 22: ``tune`` and ``landscape`` of
#: :mod:`noloco.theory.tune` timed at 1 to 100 directions and grids of 24 to 100 at load 5, divided by 3 for an
#: idle machine; peak resident memory of the same runs): seconds per grid point and direction of the warm
#: start and of the landscape, seconds of the Nelder-Mead polish per (n, H) candidate, and bytes per grid point
#: and direction that the broadcast arrays of one evaluation hold (3.4 GiB at 80 x 80 x 41 points x 100).
SECONDS_PER_POINT, POLISH_SECONDS, BYTES_PER_POINT = 0.6e-6, 3.0, 130
LANDSCAPE_POINTS = 80 * 80 * 41
#: outer steps of one verification at most: rate runs (at most 60) and the spread run (burn-in at most 400, 200)
VERIFY_STEPS = 60 + 600


def estimate(problem: TuneProblem, verify: bool, trials: int) -> tuple[float, int]:
    """``(seconds, bytes)`` of :func:`tune_and_verify` on the project's machine when idle: the warm-start grid
    and the polish per candidate, the landscape, and the two verifying simulations
    (:func:`noloco.quadratic.sim_costs.time_estimate`)."""
    from noloco.quadratic.sim_costs import time_estimate

    D = problem.spectrum.count
    grid = float(problem.grid) ** 3
    candidates = len(problem.candidates())
    seconds = candidates * (grid * D * SECONDS_PER_POINT + POLISH_SECONDS) + LANDSCAPE_POINTS * D * SECONDS_PER_POINT
    if verify:
        steps = max(problem.tune_h or (problem.inner.steps,))
        seconds += 2 * time_estimate(D, trials, problem.outer.replicas, VERIFY_STEPS, inner_steps=steps, decay=False)
    return seconds, int(BYTES_PER_POINT * max(grid, LANDSCAPE_POINTS) * D + (64 << 20))


def tune_and_verify(problem: TuneProblem, *, verify: bool = True, trials: int = 400, seed: int = 0,
                    progress: bool = False, max_memory=None, max_time=None) -> tuple[TuneResult, TuneReport]:
    """Tune, then (``verify``) check the recommendation and the paper setting with ``trials``
    trials each. Returns the result (for figures) and the report (:func:`report`). The search's memory and
    time are estimated first (:func:`estimate`) and refused above ``max_memory`` / ``max_time``
    (:mod:`noloco.infra.budget`, exit 3), before any work."""
    from noloco.infra import budget

    check_trials(trials)  # bad input is refused before the search, not after it
    seconds, size = estimate(problem, verify, trials)
    what = (f"tune over {problem.spectrum.count} direction(s), a {problem.grid}^3 grid and "
            f"{len(problem.candidates())} (n, H) candidate(s)")
    budget.require(size, budget.resolve(max_memory), what, "fewer directions or a smaller --grid")
    budget.require_time(seconds, max_time, what, "fewer directions, a smaller --grid or --no-verify",
                        "at the search's measured costs, idle machine")
    result = tune(problem, progress=progress)
    recommended = paper = None
    if verify:
        kw = dict(trials=trials, seed=seed, progress=progress)
        recommended = verify_point(problem, result.best, **kw)
        if math.isfinite(result.paper.spread):
            paper = verify_point(problem, result.paper, **kw)
    return result, report(result, recommended, paper)


def report(result: TuneResult, rec: PointCheck | None = None, paper: PointCheck | None = None) -> TuneReport:
    """Everything `noloco tune` prints, as a record (strict JSON through ``to_json`` and
    :func:`noloco.infra.files.print_json`); ``rec`` and ``paper``: :func:`verify_point` of the recommended and
    the paper setting (None: not verified)."""
    b, pr = result.best, result.problem
    return TuneReport(
        schema_version=SCHEMA_VERSION,
        problem=ProblemSummary(replicas=pr.outer.replicas, group_size=pr.outer.group_size,
                               momentum=pr.outer.momentum, inner=dataclasses.asdict(pr.inner),
                               curvatures=list(pr.spectrum.curvatures), spread_budget=pr.budget,
                               objective=pr.objective, target=pr.target, tune_n=pr.tune_n, tune_h=list(pr.tune_h)),
        recommended=Recommended(alpha=b.alpha, beta=b.beta, gamma=b.gamma, group_size=b.group_size,
                                inner_steps=b.inner_steps),
        predicted_rate=b.rate, predicted_spread=b.spread, predicted_decay=b.decay, predicted_outer_steps=b.outer_steps,
        simulated_rate=rec and rec.rate, simulated_rate_se=rec and rec.rate_se, simulated_spread=rec and rec.spread,
        simulated_spread_se=rec and rec.spread_se, rate_z=rec and rec.rate_z, spread_z=rec and rec.spread_z,
        given=result.start, paper=result.paper, paper_simulated=paper, recommended_check=rec,
        frontier=[FrontierPoint(rate=p.rate, spread=p.spread, alpha=p.alpha, beta=p.beta, gamma=p.gamma,
                                group_size=p.group_size, inner_steps=p.inner_steps) for p in result.frontier],
        evaluations=result.evaluations)


def frontier_rows(front: list, budget: float, rows: int = 10) -> list:
    """The frontier at budgets log-spaced from budget/100 to its widest spread: at each, the
    fastest setting within that budget."""
    spreads = np.array([q.spread for q in front])
    picked = []
    for target in np.geomspace(budget / 100, max(spreads.max(), budget), rows):
        within = np.flatnonzero(spreads <= target)
        if within.size and (not picked or picked[-1] is not front[within[-1]]):
            picked.append(front[within[-1]])
    return picked


# ------------------------------------------------------------------ the text report

def _sim(value, se, z) -> str:
    if value is None:
        return "n/a"
    return f"{value:.4g} +- {se:.2g} (z = {z:+.2f})" if se is not None and z is not None else f"{value:.4g}"


def _charpoly(name: str, check: PointCheck | None) -> list[str]:
    if check is None or check.charpoly is None:
        return []
    (t, d), (t_se, d_se), (pt, pd), (zt, zd) = (check.charpoly, check.charpoly_se, check.charpoly_predicted,
                                                check.charpoly_z)
    return [f"  {name:<12} trace M predicted {pt:.4f} simulated {t:.4f} +- {t_se:.2g} (z = {zt:+.2f}); "
            f"-det M predicted {pd:.4f} simulated {d:.4f} +- {d_se:.2g} (z = {zd:+.2f})"]


def format_report(r: TuneReport, figure: str | None = None) -> str:
    """The report of :func:`report` as the text `noloco tune` prints."""
    p, rec = r.problem, r.recommended
    i = p.inner_config()
    lines = [
        f"problem: N={p.replicas} {p.momentum}, inner SGD eta={i.lr:g} H={i.steps} "
        f"sigma={i.noise:g}, {len(p.curvatures)} direction(s) {min(p.curvatures):g}.."
        f"{max(p.curvatures):g}; spread budget {p.spread_budget:.4g}; objective {p.objective}",
        f"recommended: n={rec.group_size} H={rec.inner_steps} alpha={rec.alpha:.4f} "
        f"beta={rec.beta:.4f} gamma={rec.gamma:.4f}",
        f"{'':<14}{'rate/outer step':>16}{'spread':>12}{'decay':>8}"
        f"{'outer steps':>13}{'inner steps':>13}  to shrink the mean's distance by {p.target:g}",
    ]
    for name, (rate, spread, decay, outer_steps, inner_steps) in (
            ("recommended", (r.predicted_rate, r.predicted_spread, r.predicted_decay, r.predicted_outer_steps,
                             rec.inner_steps)),
            ("given", (r.given.rate, r.given.spread, r.given.decay, r.given.outer_steps, r.given.inner_steps)),
            ("paper", (r.paper.rate, r.paper.spread, r.paper.decay, r.paper.outer_steps, r.paper.inner_steps))):
        lines.append(f"{name:<14}{rate:>16.4f}{spread:>12.4g}{decay:>8.4f}"
                     f"{outer_steps:>13.1f}{outer_steps * inner_steps:>13.0f}")
    if r.simulated_spread is not None or r.simulated_rate is not None:
        lines += ["verifying simulation (the simulator's inner SGD phase (exact in distribution by default); simulated +- standard error, z vs predicted):",
                  f"  recommended  rate   predicted {r.predicted_rate:.4f}  simulated "
                  f"{_sim(r.simulated_rate, r.simulated_rate_se, r.rate_z)}",
                  f"  recommended  spread predicted {r.predicted_spread:.4g}  simulated "
                  f"{_sim(r.simulated_spread, r.simulated_spread_se, r.spread_z)}",
                  *_charpoly("recommended", r.recommended_check)]
        ps = r.paper_simulated
        if ps:
            lines += [f"  paper        rate   predicted {r.paper.rate:.4f}  simulated "
                      f"{_sim(ps.rate, ps.rate_se, ps.rate_z)}",
                      f"  paper        spread predicted {r.paper.spread:.4g}  simulated "
                      f"{_sim(ps.spread, ps.spread_se, ps.spread_z)}",
                      *_charpoly("paper", ps)]
    paper_rate, best_rate = r.paper.rate, r.predicted_rate
    if 0 < paper_rate < 1 and 0 < best_rate < 1:
        lines.append(f"vs paper setting: {math.log(best_rate) / math.log(paper_rate):.2f}x fewer outer steps to a "
                     f"target at spread {r.predicted_spread:.3g} (paper: {r.paper.spread:.3g})")
    lines += ["frontier: best rate within each spread budget (dense alpha-beta grid, gamma minimising the spread):",
              f"  {'spread':>11} {'rate':>8} {'n':>3} {'H':>5} {'alpha':>7} {'beta':>7} {'gamma':>7}"]
    for q in frontier_rows(r.frontier, p.spread_budget):
        lines.append(f"  {q.spread:>11.4g} {q.rate:>8.4f} {q.group_size:>3} {q.inner_steps:>5} "
                     f"{q.alpha:>7.3f} {q.beta:>7.3f} {q.gamma:>7.3f}")
    if figure:
        lines.append(f"figure: {figure} (and .pdf)")
    return "\n".join(lines)
