"""``noloco check``: is a NoLoCo setting stable, how fast do the mean and the spread
converge, and where does the spread settle (exact on quadratics)."""

from __future__ import annotations

from noloco.cli.options import add_hyper_arguments, add_inner_model_arguments, add_memory_argument, hyper_from_args


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "check", help="check the convergence conditions of a NoLoCo setting",
        description="Evaluate the exact quadratic theory for a NoLoCo setting: stability, the "
                    "replica mean's rate, the spread's decay factor and its stationary value. "
                    "Any spectrum size in bounded memory (summed chunk by chunk; per-direction rows only up to "
                    "1e5 directions). Stability is one classification: a spectral radius below 1 - 1e-9 is "
                    "stable, within 1e-9 of 1 marginal (bounded or growing like a power of t), above "
                    "unstable. Exit 0 when stable, 1 when a condition fails or is marginal, 2 on bad input, 3 "
                    "when the work does not fit the memory budget.")
    add_hyper_arguments(parser)
    add_inner_model_arguments(parser.add_argument_group(
        "inner phase beyond i.i.d. SGD noise (noloco.theory.exchangeable; evaluated per direction)"), correlation=True)
    add_memory_argument(parser)
    parser.add_argument("--json", action="store_true",
                        help="print strict JSON instead of a table (an unbounded value is null, with "
                             "'<key>_nonfinite' beside it)")
    parser.set_defaults(run=run)


def run(args) -> int:
    from noloco.infra.entry import failed
    from noloco.infra.files import print_json
    from noloco.cli.options import inner_model_from_args
    from noloco.theory.conditions import check, format_analysis

    method, outer, inner, spectrum = hyper_from_args(args)
    result = check(outer, inner, spectrum, inner_model_from_args(args), args.max_memory)
    print_json({"method": method, **result.to_json()}) if args.json else print(format_analysis(result, method, spectrum))
    if not result.stable:  # why the exit status is 1, on stderr: --json's stdout stays pure JSON
        failing = "; ".join(f"{c.name} = {c.shown}, needs {c.requirement}" for c in result.conditions if not c.holds)
        return failed(f"the setting is {result.verdict}: {failing}")
    return 0
