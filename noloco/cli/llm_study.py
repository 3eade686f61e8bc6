"""``noloco llm study NAME``: the multi-run studies of noloco.studies and the gloo timings, one action each, listed
below: the advice's held-out and fresh-seed validations (advice, tune, families, forecasts, gap, gap-range,
held-out-axes, one-pilot, short-phase, transfers, transfer-groups, tune-fresh), a run's own luck, its groups' and the settings'
means over data orders (luck, groups-luck, setting-mean), what makes --as miss (as-misses), the paper's GPT study
(paper), routing, the early warnings' false alarms and planted faults (warnings) and gloo's timings on this machine
(comm). Studies that train reuse the finished runs in
their folder.

Each study is one row of :func:`noloco.cli.study_table.table` (its module, help and flags); this module
builds a parser per row and runs the chosen one."""

from __future__ import annotations


def add_parser(sub) -> None:
    from noloco.cli.study_table import table

    study = sub.add_parser("study", help="multi-run studies: the advice's validations, luck, the paper's GPT, routing, warnings; comm: gloo timings",
                           description=__doc__.split("\n\n")[0].replace("``", ""))
    actions = study.add_subparsers(dest="study", metavar="STUDY")
    actions.required = True
    for row in table():
        parser = actions.add_parser(row.name, help=row.help, description=row.description)
        for names, keywords in row.flags:
            parser.add_argument(*names, **keywords)
        parser.set_defaults(study_row=row)
    study.set_defaults(run=run)


def run(args) -> int:
    from importlib import import_module

    row = args.study_row
    if row.needs:
        from noloco.infra.errors import require_extra

        require_extra("transformers", "transformers", "hf", row.needs)
    return row.call(import_module(row.module), args)
