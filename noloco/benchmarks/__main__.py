"""``python -m noloco.benchmarks NAME [options] [--json] [--out FILE]``: run one benchmark, print a table
(or the JSON result), and optionally store the JSON result atomically."""

from __future__ import annotations

import argparse
import importlib
import sys

PROG = "python -m noloco.benchmarks"
SUITES = {"theory-grid": "noloco.benchmarks.theory_grid", "simulator": "noloco.benchmarks.simulator",
          "comm": "noloco.benchmarks.comm", "check": "noloco.benchmarks.check", "scaling": "noloco.benchmarks.scaling",
          "llm-step": "noloco.benchmarks.llm_step", "observer": "noloco.benchmarks.observer",
          "outer": "noloco.benchmarks.outer",
          "all": "noloco.benchmarks.all"}


def build_parser() -> argparse.ArgumentParser:
    from noloco.benchmarks.timer import add_output_arguments
    from noloco.infra.entry import CommandParser, OneLineParser, mark_parsers

    parser = CommandParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="name", metavar="NAME", required=True, parser_class=OneLineParser)
    for name, module_name in SUITES.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.__doc__.splitlines()[0])
        module.add_arguments(p)
        add_output_arguments(p)
        p.set_defaults(module=module)
    mark_parsers(parser)
    return parser


def main(argv=None) -> int:
    """Under the toolkit's exit-code contract (:func:`noloco.infra.entry.run`)."""
    from noloco.infra.entry import run as run_entry

    return run_entry(PROG, build_parser(), _work, argv, name=lambda args: f"{PROG} {args.name}")


def _work(args) -> int:
    from noloco.benchmarks.timer import BenchResult, checked_out, emit, run

    checked_out(args)  # an empty or unwritable --out is refused before the work, not after it
    options = {k: v for k, v in vars(args).items() if k not in ("name", "module", "json", "out", "parser")}
    result = run(args.name, args.module.measure, **options)
    doc = BenchResult.from_json(result)
    print(f"{args.name}: {doc.machine.to_json()}, load {doc.load_average_before[0]:.2f}", file=sys.stderr)
    emit(result, args, args.module.format_result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
