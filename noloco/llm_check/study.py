"""The command line every multi-seed study shares (``python -m noloco.llm_check.routing_study``,
``python -m noloco.llm_check.paper_study``): the same flags, checks, interrupt message and output."""

from __future__ import annotations

from typing import Callable

from noloco.infra import entry
from noloco.infra.entry import OneLineParser, interrupted
from noloco.infra.errors import ConfigError
from noloco.infra.files import print_json


def study_main(prog: str, description: str, default_out: str, run_study: Callable, format_report: Callable,
               argv=None, seeds: int = 3) -> int:
    """Parse ``--out --seeds --quick --threads --json``, run ``run_study(out, seeds=(0, ..), quick, threads)``
    and print its report (``--json``: the JSON) through the entry contract."""
    parser = OneLineParser(prog=prog, description=description)
    parser.add_argument("--out", default=default_out,
                        help=f"run folder (default {default_out}); finished runs with the same settings are reused")
    parser.add_argument("--seeds", type=int, default=seeds, help=f"number of seeds, at least 2 (default {seeds})")
    parser.add_argument("--quick", action="store_true", help="a tiny version of the study (a smoke test)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per run (default 1)")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the tables")

    def work(args) -> int:
        from noloco.llm_check.config import check_threads

        if args.seeds < 2:
            raise ConfigError(f"--seeds {args.seeds}: at least 2 seeds are needed for a standard error")
        check_threads(args.threads)
        try:
            rep = run_study(args.out, seeds=tuple(range(args.seeds)), quick=args.quick, threads=args.threads)
        except KeyboardInterrupt as err:
            raise interrupted(err, "finished runs are kept and reused by the same command") from None
        print_json(rep) if args.json else print(format_report(rep))
        return 0

    return entry.run(prog, parser, work, argv)
