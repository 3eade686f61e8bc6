"""``noloco tune``: recommend alpha, beta, gamma (optionally n and H) from the exact
quadratic theory, show the rate-vs-spread trade-off, and verify the recommendation with a
short simulation of real inner SGD steps (``quadratic.simulator``)."""

from __future__ import annotations

import dataclasses
import json
import math
import sys

import numpy as np

from noloco.options import add_hyper_arguments, hyper_from_args

SIM_BATCHES = 10   # independent seeds for the rate's jackknife standard error
RATE_START = 1e3   # initial distance to the optimum (per coordinate) of the rate runs
DEFAULT_FIGURE = "paper_figs/out/tune-recommendation.png"  # not tune.png: that is the gallery figure


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "tune", help="recommend alpha, beta, gamma (and n, H) under a spread budget",
        description="Minimise the replica mean's convergence rate (worst spectral radius of M over the "
                    "curvatures) subject to stability and a budget on the stationary replica spread; grid "
                    "warm start, then Nelder-Mead. Prints the best setting, the rate-vs-spread frontier and "
                    "the paper setting on the same problem, writes a figure, and verifies the recommendation "
                    "with a short simulation (predicted vs simulated, standard errors).")
    add_hyper_arguments(p)
    g = p.add_argument_group("tuning")
    g.add_argument("--spread-budget", type=float,
                   help="upper bound on the stationary replica variance (per coordinate, summed over "
                        "directions); default: the spread of the given setting")
    g.add_argument("--objective", choices=("rate", "steps", "inner-steps"), default="rate",
                   help="rate per outer step; outer steps (communication rounds) or inner steps (compute) "
                        "to shrink the mean's distance by --target (default rate)")
    g.add_argument("--target", type=float, default=1e-3, help="distance reduction for --objective steps (1e-3)")
    g.add_argument("--tune", default="", help="also tune 'n', 'H' or 'n,H' (default: only alpha, beta, gamma)")
    g.add_argument("--h-values", default="10,20,50,100,200", help="candidate H for --tune H (default 10,20,50,100,200)")
    g.add_argument("--grid", type=int, default=24, help="grid points per axis of the warm start (default 24)")
    g.add_argument("--trials", type=int, default=400, help="trials of the verifying simulation (default 400)")
    g.add_argument("--no-verify", action="store_true", help="skip the verifying simulation")
    g.add_argument("--seed", type=int, default=0, help="seed of the verifying simulation (default 0)")
    g.add_argument("--out", default=DEFAULT_FIGURE,
                   help=f"figure path; .png and .pdf are written (default {DEFAULT_FIGURE}); '' for none")
    g.add_argument("--json", action="store_true", help="print JSON (schema_version 1) instead of text")
    p.set_defaults(run=run)


def problem_from_args(args):
    from theory.config import ConfigError
    from theory.tune import TuneProblem

    outer, inner, spectrum = hyper_from_args(args)
    what = {w.strip() for w in args.tune.split(",") if w.strip()}
    if not what <= {"n", "H"}:
        raise ConfigError(f"tune={args.tune!r} is not allowed; allowed: '', 'n', 'H', 'n,H'")
    try:
        h_values = tuple(int(h) for h in args.h_values.split(",")) if "H" in what else ()
    except ValueError:
        raise ConfigError(f"h_values={args.h_values!r} is not understood; allowed: comma-separated integers") from None
    budget = args.spread_budget
    if budget is None:
        budget = float(evaluate_given(outer, inner, spectrum))
        if not (math.isfinite(budget) and budget > 0):
            raise ConfigError("the given setting has no finite positive stationary spread (unstable, or n = N); "
                              "pass --spread-budget")
    if not (isinstance(args.trials, int) and args.trials >= 20):
        raise ConfigError(f"trials={args.trials!r} is out of range; allowed: an integer >= 20")
    return TuneProblem(outer, inner, spectrum, budget, args.objective, args.target, "n" in what, h_values, args.grid)


def evaluate_given(outer, inner, spectrum) -> float:
    from theory.conditions import analyse

    return analyse(outer, inner, spectrum).stationary_variance


# ------------------------------------------------------------------ verification

def _fit(y) -> np.ndarray:
    """(a1, a0) of the order-2 linear recursion y_{t+2} = a1 y_{t+1} + a0 y_t, least squares: the
    expected mean obeys the characteristic polynomial of M exactly (Cayley-Hamilton), so
    a1 = trace M and a0 = -det M whichever roots it has."""
    X = np.column_stack([y[1:-1], y[:-2]])
    return np.linalg.lstsq(X, y[2:], rcond=None)[0]


def _radius(coefficients) -> float:
    a1, a0 = coefficients
    return float(np.max(np.abs(np.roots([1.0, -a1, -a0]))))


def simulate_point(problem, point, *, trials: int, seed: int, progress: bool = False) -> dict:
    """Simulated rate (jackknife SE over independent seeds) and stationary spread (SE over
    trials) of one setting, with real inner SGD steps on the quadratic."""
    from quadratic.simulator import SimConfig, simulate

    outer = dataclasses.replace(problem.outer, alpha=point.alpha, beta=point.beta, gamma=point.gamma,
                                group_size=point.group_size)
    inner = dataclasses.replace(problem.inner, steps=point.inner_steps)
    curv = problem.spectrum.curvatures
    # rate: the slowest direction's expected mean, while it stands well above its noise
    rate_steps = int(np.clip(math.ceil(math.log(1e-4) / math.log(max(point.rate, 0.05))), 6, 60))
    worst = int(np.argmax(_per_direction_rate(problem, point)))
    batches = []
    for b in range(SIM_BATCHES):
        # the expected mean is linear in the start and the noise is not: a far start keeps the
        # signal above the noise for more steps
        cfg = SimConfig(outer=outer, inner=inner, curvatures=curv, trials=max(trials // SIM_BATCHES, 2),
                        outer_steps=rate_steps, seed=seed * 1000 + b, start=RATE_START)
        run = simulate(cfg)
        batches.append(np.array(run.mean_distance.mean)[:, _sorted_index(curv, worst)])
    batches = np.array(batches)                                      # (batches, steps + 1)
    pooled, se_t = batches.mean(0), batches.std(0, ddof=1) / math.sqrt(SIM_BATCHES)
    strong = np.abs(pooled) > 20 * se_t
    usable = int(np.argmin(strong)) if not strong.all() else len(pooled)
    rate = rate_se = coefficients = coefficients_se = None
    if usable >= 5:
        coefficients = _fit(pooled[:usable])
        # jackknife over the independent batches
        leave_out = np.array([_fit((pooled * SIM_BATCHES - batches[k])[:usable] / (SIM_BATCHES - 1))
                              for k in range(SIM_BATCHES)])
        jack = lambda values: float(math.sqrt((SIM_BATCHES - 1) * np.var(values)))
        rate = _radius(coefficients)
        rate_se = jack([_radius(x) for x in leave_out])
        coefficients_se = [jack(leave_out[:, 0]), jack(leave_out[:, 1])]
        coefficients = coefficients.tolist()
    # spread: burn in until the transient is 1e-3 of itself, then average a window per trial
    burn = int(np.clip(math.ceil(math.log(1e-3) / math.log(max(point.decay, 1e-3))), 20, 400))
    cfg = SimConfig(outer=outer, inner=inner, curvatures=curv, trials=trials, outer_steps=burn + 200,
                    burn_in=burn, seed=seed * 1000 + SIM_BATCHES, start=0.0)
    run = simulate(cfg, progress=progress)
    if run.window_spread is None:
        return {"rate": rate, "rate_se": rate_se, "spread": None, "spread_se": None,
                "diverged_at": run.diverged_at}
    w = run.window_spread
    return {"rate": rate, "rate_se": rate_se, "rate_window": usable,
            "charpoly": coefficients, "charpoly_se": coefficients_se,
            "spread": float(w.mean()), "spread_se": float(w.std(ddof=1) / math.sqrt(len(w)))}


def _per_direction_rate(problem, point):
    from theory import numeric

    c, _ = numeric.inner_sgd(problem.inner.lr, problem.spectrum.array, point.inner_steps, problem.inner.noise)
    return numeric.mean_spectral_radius(point.alpha, point.beta, point.gamma, c, problem.outer.momentum)


def _sorted_index(curvatures, i) -> int:
    """Index of direction i in the simulator's eigen-coordinates (ascending eigenvalues)."""
    return int(np.argsort(np.asarray(curvatures), kind="stable").tolist().index(i))


def _z(sim, se, predicted):
    if sim is None or se is None or predicted is None:
        return None
    return (sim - predicted) / se if se > 0 else (0.0 if math.isclose(sim, predicted) else math.inf)


def predicted_charpoly(problem, point) -> list:
    """(trace M, -det M) of the slowest direction: the coefficients the simulation fits."""
    from theory import numeric

    c, _ = numeric.inner_sgd(problem.inner.lr, problem.spectrum.array, point.inner_steps, problem.inner.noise)
    worst = int(np.argmax(_per_direction_rate(problem, point)))
    M, _, _ = numeric.transition(point.alpha, point.beta, point.gamma, c[worst], 0.0, problem.outer.momentum)
    return [float(np.trace(M)), float(-np.linalg.det(M))]


def verify(problem, point, **kw) -> dict:
    """Simulated next to predicted, with z-scores. The rate is a root of a fitted polynomial:
    at critical damping (a double root, where the tuner tends to land) a root moves like the
    square root of the noise in the coefficients, so its z-score leans positive; the
    coefficients themselves are linear estimates and get their own z-scores."""
    sim = simulate_point(problem, point, **kw)
    predicted = predicted_charpoly(problem, point)
    z_coefficients = None
    if sim.get("charpoly") is not None:
        z_coefficients = [_z(x, se, p) for x, se, p in zip(sim["charpoly"], sim["charpoly_se"], predicted)]
    return {**sim, "rate_z": _z(sim["rate"], sim["rate_se"], point.rate),
            "spread_z": _z(sim["spread"], sim["spread_se"], point.spread),
            "charpoly_predicted": predicted, "charpoly_z": z_coefficients}


# ------------------------------------------------------------------ output

def report(result, checks: dict) -> dict:
    from theory.tune import SCHEMA_VERSION

    b, pr = result.best, result.problem
    rec = checks.get("recommended", {})
    out = {
        "schema_version": SCHEMA_VERSION,
        "problem": {"replicas": pr.outer.replicas, "group_size": pr.outer.group_size,
                    "momentum": pr.outer.momentum, "inner": dataclasses.asdict(pr.inner),
                    "curvatures": list(pr.spectrum.curvatures), "spread_budget": pr.budget,
                    "objective": pr.objective, "target": pr.target, "tune_n": pr.tune_n,
                    "tune_h": list(pr.tune_h)},
        "recommended": {"alpha": b.alpha, "beta": b.beta, "gamma": b.gamma, "group_size": b.group_size,
                        "inner_steps": b.inner_steps},
        "predicted_rate": b.rate, "predicted_spread": b.spread, "predicted_decay": b.decay,
        "predicted_outer_steps": b.outer_steps,
        "simulated_rate": rec.get("rate"), "simulated_rate_se": rec.get("rate_se"),
        "simulated_spread": rec.get("spread"), "simulated_spread_se": rec.get("spread_se"),
        "rate_z": rec.get("rate_z"), "spread_z": rec.get("spread_z"),
        "given": result.start.as_dict(), "paper": result.paper.as_dict(),
        "paper_simulated": checks.get("paper"), "recommended_check": checks.get("recommended"),
        "frontier": [{"rate": p.rate, "spread": p.spread, "alpha": p.alpha, "beta": p.beta, "gamma": p.gamma,
                      "group_size": p.group_size, "inner_steps": p.inner_steps} for p in result.frontier],
        "evaluations": result.evaluations,
    }
    return _json_safe(out)


def _json_safe(x):
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


def _fmt_sim(value, se, z):
    if value is None:
        return "n/a"
    return f"{value:.4g} +- {se:.2g} (z = {z:+.2f})" if se is not None and z is not None else f"{value:.4g}"


def _print_charpoly(name: str, check: dict) -> None:
    if check.get("charpoly") is None:
        return
    (t, d), (t_se, d_se), (pt, pd), (zt, zd) = (check["charpoly"], check["charpoly_se"],
                                                check["charpoly_predicted"], check["charpoly_z"])
    print(f"  {name:<12} trace M predicted {pt:.4f} simulated {t:.4f} +- {t_se:.2g} (z = {zt:+.2f}); "
          f"-det M predicted {pd:.4f} simulated {d:.4f} +- {d_se:.2g} (z = {zd:+.2f})")


def frontier_rows(front: list, budget: float, rows: int = 10) -> list:
    """The frontier at budgets log-spaced from budget/100 to its widest spread: at each, the
    fastest setting within that budget."""
    spreads = np.array([q["spread"] for q in front])
    picked = []
    for target in np.geomspace(budget / 100, max(spreads.max(), budget), rows):
        within = np.flatnonzero(spreads <= target)
        if within.size and (not picked or picked[-1] is not front[within[-1]]):
            picked.append(front[within[-1]])
    return picked


def print_text(r: dict, figure: str | None) -> None:
    p, rec = r["problem"], r["recommended"]
    print(f"problem: N={p['replicas']} {p['momentum']}, inner SGD eta={p['inner']['lr']:g} H={p['inner']['steps']} "
          f"sigma={p['inner']['noise']:g}, {len(p['curvatures'])} direction(s) {min(p['curvatures']):g}.."
          f"{max(p['curvatures']):g}; spread budget {p['spread_budget']:.4g}; objective {p['objective']}")
    print(f"recommended: n={rec['group_size']} H={rec['inner_steps']} alpha={rec['alpha']:.4f} "
          f"beta={rec['beta']:.4f} gamma={rec['gamma']:.4f}")
    print(f"{'':<14}{'rate/outer step':>16}{'spread':>12}{'decay':>8}"
          f"{'outer steps':>13}{'inner steps':>13}  to shrink the mean's distance by {p['target']:g}")
    for name, q in (("recommended", {"rate": r["predicted_rate"], "spread": r["predicted_spread"],
                                     "decay": r["predicted_decay"], "outer_steps": r["predicted_outer_steps"],
                                     "inner_steps": rec["inner_steps"]}),
                    ("given", r["given"]), ("paper", r["paper"])):
        fmt = lambda v, f: "inf" if v is None else format(v, f)
        inner = None if q["outer_steps"] is None else q["outer_steps"] * q["inner_steps"]
        print(f"{name:<14}{fmt(q['rate'], '>16.4f')}{fmt(q['spread'], '>12.4g')}{fmt(q['decay'], '>8.4f')}"
              f"{fmt(q['outer_steps'], '>13.1f')}{fmt(inner, '>13.0f')}")
    if r["simulated_spread"] is not None or r["simulated_rate"] is not None:
        print("verifying simulation (real inner SGD steps; simulated +- standard error, z vs predicted):")
        print(f"  recommended  rate   predicted {r['predicted_rate']:.4f}  simulated "
              f"{_fmt_sim(r['simulated_rate'], r['simulated_rate_se'], r['rate_z'])}")
        print(f"  recommended  spread predicted {r['predicted_spread']:.4g}  simulated "
              f"{_fmt_sim(r['simulated_spread'], r['simulated_spread_se'], r['spread_z'])}")
        _print_charpoly("recommended", r.get("recommended_check") or {})
        ps = r.get("paper_simulated")
        if ps:
            print(f"  paper        rate   predicted {r['paper']['rate']:.4f}  simulated "
                  f"{_fmt_sim(ps['rate'], ps['rate_se'], ps['rate_z'])}")
            print(f"  paper        spread predicted {r['paper']['spread']:.4g}  simulated "
                  f"{_fmt_sim(ps['spread'], ps['spread_se'], ps['spread_z'])}")
            _print_charpoly("paper", ps)
    paper_rate, best_rate = r["paper"]["rate"], r["predicted_rate"]
    if paper_rate and best_rate is not None and paper_rate < 1 and 0 < best_rate < 1:
        print(f"vs paper setting: {math.log(best_rate) / math.log(paper_rate):.2f}x fewer outer steps to a "
              f"target at spread {r['predicted_spread']:.3g} (paper: {r['paper']['spread']:.3g})")
    print("frontier: best rate within each spread budget (dense alpha-beta grid, gamma minimising the spread):")
    print(f"  {'spread':>11} {'rate':>8} {'n':>3} {'H':>5} {'alpha':>7} {'beta':>7} {'gamma':>7}")
    for q in frontier_rows(r["frontier"], p["spread_budget"]):
        print(f"  {q['spread']:>11.4g} {q['rate']:>8.4f} {q['group_size']:>3} {q['inner_steps']:>5} "
              f"{q['alpha']:>7.3f} {q['beta']:>7.3f} {q['gamma']:>7.3f}")
    if figure:
        print(f"figure: {figure} (and .pdf)")


def run(args) -> int:
    from theory.tune import tune

    problem = problem_from_args(args)
    result = tune(problem, progress=not args.json)
    checks = {}
    if not args.no_verify:
        kw = dict(trials=args.trials, seed=args.seed)
        checks["recommended"] = verify(problem, result.best, **kw)
        if math.isfinite(result.paper.spread):
            checks["paper"] = verify(problem, result.paper, **kw)
    r = report(result, checks)
    figure = None
    if args.out:
        from paper_figs.fig_tune import draw_result

        figure = draw_result(result, args.out)
    if args.json:
        json.dump(r, sys.stdout, indent=2, allow_nan=False)
        print()
    else:
        print_text(r, figure)
    return 0
