"""``noloco check``: is a NoLoCo setting stable, how fast do the mean and the spread
converge, and where does the spread settle (exact on quadratics)."""

from __future__ import annotations

from noloco.options import add_hyper_arguments, hyper_from_args


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "check", help="check the convergence conditions of a NoLoCo setting",
        description="Evaluate the exact quadratic theory for a NoLoCo setting: stability, the "
                    "replica mean's rate, the spread's decay factor and its stationary value. "
                    "Exit 0 when stable, 1 when a condition fails, 2 on bad input.")
    add_hyper_arguments(parser)
    parser.add_argument("--json", action="store_true",
                        help="print strict JSON instead of a table (an unbounded value is null, with "
                             "'<key>_nonfinite' beside it)")
    parser.set_defaults(run=run)


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def run(args) -> int:
    from theory.conditions import analyse
    from theory.io import print_json

    method, outer, inner, spectrum = hyper_from_args(args)
    result = analyse(outer, inner, spectrum)
    if args.json:
        print_json({"method": method, **result.to_json()})
        return 0 if result.stable else 1
    o, i = outer, inner
    print(f"{method} setting: N={o.replicas} n={o.group_size} alpha={o.alpha:g} beta={o.beta:g} "
          f"gamma={o.gamma:g} momentum={o.momentum} | inner SGD eta={i.lr:g} H={i.steps} sigma={i.noise:g} "
          f"| {len(spectrum.curvatures)} direction(s), curvature {min(spectrum.curvatures):g}..{max(spectrum.curvatures):g}")
    width = max(len(c.name) for c in result.conditions)
    print(f"{'condition'.ljust(width)}  {'value':>12}  holds  requirement")
    for c in result.conditions:
        print(f"{c.name.ljust(width)}  {_fmt(c.value):>12}  {'yes' if c.holds else 'NO':>5}  {c.requirement}")
    print(f"kappa = (N - n)/(n (N - 1))       = {_fmt(o.kappa)}")
    print(f"variance decay factor per step   = {_fmt(result.variance_decay_factor)} (noise-free, slowest direction)")
    print(f"stationary replica variance      = {_fmt(result.stationary_variance)} per coordinate, summed over directions"
          f" (std {_fmt(result.stationary_std)})")
    print("verdict: STABLE" if result.stable else "verdict: UNSTABLE (a condition fails)")
    return 0 if result.stable else 1
