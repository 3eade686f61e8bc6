"""``noloco paper``: the NoLoCo paper's own analysis (arXiv 2506.10911, Appendix A), statement by
statement, against the exact quadratic theory and Monte Carlo (noloco.claims.paper)."""

from __future__ import annotations

from noloco.cli.options import add_hyper_arguments, add_memory_argument, add_time_argument, hyper_from_args

DESCRIPTION = """\
For one setting, each statement of the paper's analysis (Theorems 1-3, Lemma 1, Conjecture 1, Eqs 22
and 55, the independence assumption) is judged over every direction of the quadratic (--spectrum; the
default is curvature 1) and the flat limit c -> 0, the worst direction named: the paper's form, the
exact theory's value, a Monte Carlo or independent measurement of the exact quantity (+- its standard
error, z against the exact value) and a verdict: holds (within 1 %), approximate (within 25 %, the
relative error shown), fails (the reason below the row) or not applicable (no stationary state, or a
sufficient condition not met; counted apart). Stability is stable, marginal (spectral radius within
1e-9 of 1; bounded or growing like a power of t) or unstable. Garbled equations are tested in every
reading. Exit 0 when the audit ran, whatever the verdicts; 2 on bad input; 3 when the Monte Carlo
does not fit the memory budget or its estimated time the time budget (--max-time; with --quick 30 s
unless given)."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("paper", help="check the paper's own theorems and approximations",
                                   description=DESCRIPTION)
    add_hyper_arguments(parser)
    add_memory_argument(parser)
    add_time_argument(parser)
    parser.add_argument("--seed", type=int, default=0,
                        help="random seed of every Monte Carlo (default 0; the same seed gives the same numbers)")
    parser.add_argument("--quick", action="store_true", help="smaller Monte Carlo (larger standard errors)")
    parser.add_argument("--json", action="store_true",
                        help="print strict JSON (schema_version 2; a non-finite number is null with "
                             "'<key>_nonfinite' beside it) instead of a table")
    parser.set_defaults(run=run)


def run(args) -> int:
    from noloco.claims.paper import QUICK_MAX_SECONDS, audit, memory_estimate, time_estimate
    from noloco.claims.paper_text import format_audit
    from noloco.infra import budget
    from noloco.infra.checks import check_seed
    from noloco.infra.files import print_json

    _, outer, inner, spectrum = hyper_from_args(args)
    seed = check_seed("seed", args.seed)
    budget.require(memory_estimate(outer, args.quick), budget.resolve(args.max_memory),
                   f"paper audit at N = {outer.replicas}", "fewer --replicas")
    budget.require_time(time_estimate(outer, args.quick), args.max_time, f"paper audit at N = {outer.replicas}"
                        + (" (--quick)" if args.quick else ""), "fewer --replicas",
                        default=QUICK_MAX_SECONDS if args.quick else None)
    report = audit(outer, inner, spectrum, seed=seed, quick=args.quick)
    if args.json:
        print_json(report.to_json())
    else:
        print(format_audit(report))
    return 0
