"""``noloco tune``: recommend alpha, beta, gamma (optionally n and H) from the exact
quadratic theory, show the rate-vs-spread trade-off, and verify the recommendation with a
short simulation of the simulator's inner SGD phase (exact in distribution by default) (:mod:`noloco.quadratic.tune_check`)."""

from __future__ import annotations

import argparse
import sys

from noloco.cli.options import add_hyper_arguments, add_memory_argument, add_time_argument, hyper_from_args


def _names(text: str) -> tuple:
    return tuple(w.strip() for w in text.split(",") if w.strip())


def _tuned(text: str) -> tuple:
    names = _names(text)
    if not names:  # '' would silently mean "tune only alpha, beta, gamma"
        raise argparse.ArgumentTypeError(f"{text!r} names nothing to tune; give n, H or n,H (or drop --tune)")
    return names


def _integers(text: str) -> tuple:
    try:
        values = tuple(int(w) for w in _names(text))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers >= 1")
    return values


H_VALUES = (10, 20, 50, 100, 200)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "tune", help="recommend alpha, beta, gamma (and n, H) under a spread budget",
        description="Minimise the replica mean's convergence rate (worst spectral radius of M over the "
                    "curvatures) subject to stability and a budget on the stationary replica spread; grid "
                    "warm start, then Nelder-Mead. Prints the best setting, the rate-vs-spread frontier and "
                    "the paper setting on the same problem, and verifies the recommendation with a short "
                    "simulation (predicted vs simulated, standard errors). Writes a figure only with --out. "
                    "Exit 0, 2 on bad input, 3 when --out cannot be written or the search does not fit "
                    "--max-memory / --max-time.")
    add_hyper_arguments(p)
    g = p.add_argument_group("tuning")
    g.add_argument("--spread-budget", type=float,
                   help="upper bound on the stationary replica variance (per coordinate, summed over "
                        "directions); default: the spread of the given setting")
    g.add_argument("--objective", choices=("rate", "steps", "inner-steps"), default="rate",
                   help="rate per outer step; outer steps (communication rounds) or inner steps (compute) "
                        "to shrink the mean's distance by --target (default rate)")
    g.add_argument("--target", type=float, default=None,
                   help="distance reduction for --objective steps or inner-steps (default 1e-3)")
    g.add_argument("--tune", type=_tuned, default=(),
                   help="also tune 'n', 'H' or 'n,H' (default: only alpha, beta, gamma)")
    g.add_argument("--h-values", type=_integers, default=None,
                   help=f"candidate H for --tune H, comma-separated (default {','.join(map(str, H_VALUES))})")
    g.add_argument("--grid", type=int, default=24, help="grid points per axis of the warm start (default 24)")
    g.add_argument("--trials", type=int, default=400, help="trials of the verifying simulation (default 400, >= 20)")
    g.add_argument("--no-verify", action="store_true", help="skip the verifying simulation")
    g.add_argument("--seed", type=int, default=0, help="seed of the verifying simulation (default 0)")
    g.add_argument("--out", default=None, metavar="PATH",
                   help="write the figure to PATH, a .png, .pdf or .svg file (its suffix chooses the format; "
                        "nothing else is written); default: no figure. Checked before the search")
    add_memory_argument(g)
    add_time_argument(g)
    g.add_argument("--json", action="store_true",
                   help="print strict JSON instead of text (an unbounded value is null, with "
                        "'<key>_nonfinite' beside it)")
    p.set_defaults(run=run)


def _unused_flags(args) -> None:
    """Flags that would be silently ignored are refused (exit 2)."""
    from noloco.infra.errors import ConfigError

    if args.h_values is not None and "H" not in args.tune:
        raise ConfigError("--h-values lists candidate H for --tune H; add --tune H (or drop --h-values)")
    if args.target is not None and args.objective == "rate":
        raise ConfigError("--target is the distance reduction of --objective steps or inner-steps; "
                         "--objective rate does not use it")


def run(args) -> int:
    from noloco.infra.files import print_json
    from noloco.paper_figs.fig_tune import draw_result
    from noloco.paper_figs.style import figure_file
    from noloco.quadratic.tune_check import format_report, tune_and_verify
    from noloco.theory.tune import make_problem

    _unused_flags(args)
    method, outer, inner, spectrum = hyper_from_args(args)
    problem = make_problem(method, outer, inner, spectrum, budget=args.spread_budget, objective=args.objective,
                           target=1e-3 if args.target is None else args.target, tune=args.tune,
                           h_values=H_VALUES if args.h_values is None else args.h_values, grid=args.grid)
    out = None if args.out is None else figure_file(args.out)  # fail now, not after the search
    result, report = tune_and_verify(problem, verify=not args.no_verify, trials=args.trials, seed=args.seed,
                                     progress=sys.stderr.isatty(), max_memory=args.max_memory, max_time=args.max_time)
    figure = None if out is None else draw_result(result, out)  # the tuner's figure (paper_figs/fig_tune.py)
    print_json(report.to_json()) if args.json else print(format_report(report, figure))
    return 0
