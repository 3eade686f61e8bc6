"""``noloco llm ensemble``: domain-expert ensembles trained with no communication (homogeneous and
heterogeneous, HDEE) next to ddp, diloco and noloco at the same FLOP budget, evaluated per domain
(noloco.llm_check.ensemble.run_study; docs/hdee.md)."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    from noloco.llm_check.ensemble import add_arguments

    ens = sub.add_parser("ensemble", help="domain-expert ensembles (no communication) vs ddp / diloco / noloco at "
                                          "equal FLOPs, per-domain perplexity",
                         description="One expert per training domain of the corpus, homogeneous or heterogeneous "
                                     "(size and steps by domain difficulty), and ddp, diloco and noloco on the mixture, "
                                     "all at one budget of training FLOPs; every domain's validation perplexity, the "
                                     "ensembles mixed by the domain posterior and uniformly; bytes communicated. "
                                     "Writes OUT/hdee.json (docs/hdee.md).")
    add_arguments(ens)
    ens.set_defaults(run=run)


def run(args) -> int:
    from noloco.infra.files import print_json
    from noloco.llm_check.ensemble import format_report, run_study, study_from_args

    report = run_study(study_from_args(args), args.out, resume=args.resume, overwrite=args.overwrite,
                       stop_after=args.stop_after, threads=args.threads)
    print_json(report) if args.json else print(format_report(report))
    for name, message in report.get("diverged", {}).items():  # the finding, on stderr too: exit 1
        print(f"noloco llm ensemble: {name} {message}", file=sys.stderr)
    return 1 if report.get("diverged") else 0
