"""``noloco check``: is a NoLoCo setting stable, how fast do the mean and the spread
converge, and where does the spread settle (exact on quadratics)."""

from __future__ import annotations

from noloco.options import add_hyper_arguments, add_inner_model_arguments, add_memory_argument, hyper_from_args


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "check", help="check the convergence conditions of a NoLoCo setting",
        description="Evaluate the exact quadratic theory for a NoLoCo setting: stability, the "
                    "replica mean's rate, the spread's decay factor and its stationary value. "
                    "Any spectrum size in bounded memory (summed chunk by chunk; per-direction rows only up to "
                    "1e5 directions). Exit 0 when stable, 1 when a condition fails, 2 on bad input, 3 when "
                    "the work does not fit the memory budget.")
    add_hyper_arguments(parser)
    add_inner_model_arguments(parser.add_argument_group(
        "inner phase beyond i.i.d. SGD noise (noloco.theory.exchangeable; evaluated per direction)"), correlation=True)
    add_memory_argument(parser)
    parser.add_argument("--json", action="store_true",
                        help="print strict JSON instead of a table (an unbounded value is null, with "
                             "'<key>_nonfinite' beside it)")
    parser.set_defaults(run=run)


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _extras(args) -> str:
    extras = [(args.inner_momentum, "mu"), (args.noise_correlation or None, "rho"), (args.zeta or None, "zeta")]
    return "".join(f" {name}={value:g}" for value, name in extras if value is not None)


def memory_estimate(directions: int) -> int:
    """Bytes ``check`` allocates: the chunks (constant) and, up to LISTED directions, the
    per-direction rows (Python floats in six lists and their JSON text)."""
    from noloco.theory.conditions import LISTED
    from noloco.theory.spectrum import CHUNK

    return 60 * 8 * CHUNK + (400 * directions if directions <= LISTED else 0)


def run(args) -> int:
    from noloco.infra import budget
    from noloco.options import inner_model_from_args
    from noloco.theory.conditions import analyse
    from noloco.infra.files import print_json

    method, outer, inner, spectrum = hyper_from_args(args)
    budget.require(memory_estimate(spectrum.count), budget.resolve(args.max_memory),
                   f"check over {spectrum.count} directions")
    budget.retain_freed_memory()  # chunk temporaries of 512 KiB: reuse, do not page-fault them in
    result = analyse(outer, inner, spectrum, inner_model_from_args(args))
    if args.json:
        print_json({"method": method, **result.to_json()})
        return 0 if result.stable else 1
    o, i = outer, inner
    print(f"{method} setting: N={o.replicas} n={o.group_size} alpha={o.alpha:g} beta={o.beta:g} "
          f"gamma={o.gamma:g} momentum={o.momentum} | inner {args.inner_optimizer} eta={i.lr:g} H={i.steps} "
          f"sigma={i.noise:g}{_extras(args)} "
          f"| {spectrum.count} direction(s), curvature {spectrum.low:g}..{spectrum.high:g}")
    width = max(len(c.name) for c in result.conditions)
    print(f"{'condition'.ljust(width)}  {'value':>12}  holds  requirement")
    for c in result.conditions:
        print(f"{c.name.ljust(width)}  {_fmt(c.value):>12}  {'yes' if c.holds else 'NO':>5}  {c.requirement}")
    print(f"kappa = (N - n)/(n (N - 1))       = {_fmt(o.kappa)}")
    print(f"variance decay factor per step   = {_fmt(result.variance_decay_factor)} (noise-free, slowest direction)")
    print(f"stationary replica variance      = {_fmt(result.stationary_variance)} per coordinate, summed over directions"
          f" (std {_fmt(result.stationary_std)})")
    failing = [c.name for c in result.conditions if not c.holds]
    if not failing:
        print("verdict: STABLE")
    elif failing == [result.conditions[-1].name] and failing[0].startswith("finite"):
        print("verdict: NOT FINITE (a value overflows float64: no verdict on stability)")
    else:
        print("verdict: UNSTABLE (a condition fails)")
    return 0 if result.stable else 1
