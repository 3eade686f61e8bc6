"""``python -m benchmarks NAME [options] [--json] [--out FILE]``: run one benchmark, print a table
(or the JSON result), and optionally store the JSON result atomically."""

from __future__ import annotations

import argparse
import importlib
import sys

PROG = "python -m benchmarks"
SUITES = {"theory-grid": "noloco.benchmarks.theory_grid", "simulator": "noloco.benchmarks.simulator",
          "comm": "noloco.benchmarks.comm", "check": "noloco.benchmarks.check", "scaling": "noloco.benchmarks.scaling",
          "llm-step": "noloco.benchmarks.llm_step", "all": "noloco.benchmarks.all"}


def build_parser() -> argparse.ArgumentParser:
    from noloco.benchmarks.timer import add_output_arguments
    from noloco.infra.entry import OneLineParser

    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="name", metavar="NAME", required=True)
    for name, module_name in SUITES.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.__doc__.splitlines()[0])
        module.add_arguments(p)
        add_output_arguments(p)
        p.set_defaults(module=module)
    return parser


def main(argv=None) -> int:
    """Exit codes as ``noloco``'s (:func:`noloco.infra.entry.report`): 0 done, 2 bad input (one line), 130 interrupted."""
    from noloco.benchmarks.timer import emit, run
    from noloco.infra.entry import report

    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help (0) or a usage error (2, printed on one line)
        return stop.code if isinstance(stop.code, int) else 0
    options = {k: v for k, v in vars(args).items() if k not in ("name", "module", "json", "out")}
    try:
        result = run(args.name, args.module.measure, **options)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - report re-raises what is not in the contract (a bug)
        return report(PROG, err)
    print(f"{args.name}: {result['machine']}, load {result['load_average_before'][0]:.2f}", file=sys.stderr)
    emit(result, args, args.module.format_result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
