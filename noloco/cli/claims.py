"""``noloco claims``: every claim the docs make, measured now and judged (noloco.claims)."""

from __future__ import annotations

import math

HELP = "measure every claim the docs make and say whether it holds"
DESCRIPTION = """\
Each claim of docs/theory.md and docs/comm.md (the mean follows DiLoCo, the closed
recursion equals the enumeration over all partitions, the stationary spread, the decay
factor, the spread's order in eta, pure pairing, the communication speed-up, idle time)
is predicted by the theory and measured independently (Monte Carlo, exact enumeration or
an independent computation). A Monte Carlo claim holds within 4 standard errors; the
formulas, assumptions and references are in docs/claims.md and claims/.
Exit 0 when every claim holds, 1 when one does not, 2 on bad input."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("claims", help=HELP, description=DESCRIPTION)
    parser.add_argument("--quick", action="store_true",
                        help="smaller Monte Carlo (a few seconds in all; the full run takes about 15 s)")
    parser.add_argument("--json", action="store_true",
                        help="print strict JSON (schema_version 2; non-finite numbers as null) instead of a table")
    parser.add_argument("--only", metavar="NAME[,NAME]",
                        help="run only these claims, comma-separated (default: all; names as in the table)")
    parser.add_argument("--seed", type=int, default=0,
                        help="random seed of every Monte Carlo (default 0; the same seed gives the same numbers)")
    parser.set_defaults(run=run)


def _fmt(value, digits: int = 6) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}g}"


def run(args) -> int:
    from noloco.claims import TOLERANCE, run_all
    from noloco.infra.entry import failed
    from noloco.infra.files import SCHEMA_VERSION, print_json

    only = None if args.only is None else [name.strip() for name in args.only.split(",") if name.strip()]
    if only == []:
        from noloco.infra.errors import ConfigError

        raise ConfigError(f"--only {args.only!r} names no claim; give claim names (see `noloco claims`) or drop --only")
    claims = run_all(quick=args.quick, seed=args.seed, only=only)
    every = all(c.holds for c in claims)
    if args.json:
        print_json({"schema_version": SCHEMA_VERSION, "quick": args.quick, "seed": args.seed,
                    "all_hold": every, "claims": claims})
        return 0 if every else failed(_failing(claims))
    rows = [(c.name, _fmt(c.predicted), f"{_fmt(c.measured)} +- {_fmt(c.se, 2)}",
             _fmt(c.z, 3) if c.unit == "se" else f"({c.unit} tol {c.tolerance:.2g})",
             "yes" if c.holds else "NO", f"{c.seconds:.2f}") for c in claims]
    header = ("claim", "predicted", "measured +- se", "z", "holds", "seconds")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    for row in [header] + rows:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    held = sum(c.holds for c in claims)
    print(f"{held} of {len(claims)} claims hold ({'quick' if args.quick else 'full'} run, seed {args.seed}, "
          f"|z| <= {TOLERANCE:g} unless a tolerance is stated); "
          f"{sum(c.seconds for c in claims):.1f} s")
    return 0 if every else failed(_failing(claims))


def _failing(claims) -> str:
    names = [c.name for c in claims if not c.holds]
    return f"{len(names)} of {len(claims)} claims do not hold: {', '.join(names)}"
