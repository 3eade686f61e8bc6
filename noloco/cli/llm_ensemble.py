"""``noloco llm ensemble``: domain-expert ensembles trained with no communication (homogeneous and
heterogeneous, HDEE) next to ddp, diloco and noloco at the same FLOP budget, evaluated per domain
(noloco.studies.ensemble.run_study; docs/hdee.md)."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
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
    from noloco.studies.ensemble.report import format_report
    from noloco.studies.ensemble.study import run_study

    report = run_study(study_from_args(args), args.out, resume=args.resume, overwrite=args.overwrite,
                       stop_after=args.stop_after, threads=args.threads)
    print_json(report) if args.json else print(format_report(report))
    for name, message in report.get("diverged", {}).items():  # the finding, on stderr too: exit 1
        print(f"noloco llm ensemble: {name} {message}", file=sys.stderr)
    return 1 if report.get("diverged") else 0


def _flags() -> dict:
    from noloco.llm_check import domains
    from noloco.studies.ensemble.plan import CONFIGS, EXPERT_UNIT

    return {
        "configs": (str, "what to train, comma-separated: " + ", ".join(CONFIGS) + " (default all)"),
        "domains": (str, "training domains, one expert each (default every training domain: "
                         + ", ".join(domains.TRAINING) + ")"),
        "seeds": (str, "seeds, comma-separated (default 0,1,2)"),
        "expert_steps": (int, f"steps of a homogeneous expert, a multiple of {EXPERT_UNIT}; sets the FLOP budget of every "
                              "configuration (default 800)"),
        "width": (int, "width of the base model (homogeneous experts and the baselines; default 64)"),
        "layers": (int, "transformer blocks (default 2)"), "heads": (int, "attention heads (default 4)"),
        "ctx": (int, "context length in bytes (default 64)"), "batch": (int, "windows per replica per step (default 8)"),
        "lr": (float, "peak learning rate of every run (cosine, warm-up over a tenth of the steps; default 3e-3)"),
        "replicas": (int, "replicas N of ddp, diloco and noloco (even; default 4)"),
        "inner_steps": (int, "inner steps H of diloco and noloco (default 25)"),
        "eval_windows": (int, "validation windows per domain (default 128)"),
        "segment": (int, "windows per evaluation segment: the bytes the domain posterior sees (default 4)"),
    }


def add_arguments(parser) -> None:
    for name, (kind, text) in _flags().items():
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=None, help=text)
    parser.add_argument("--quick", action="store_true",
                        help="a tiny study (width 16, 10 expert steps, one seed): a smoke test; flags override it")
    parser.add_argument("--out", required=True, help="study folder: one run folder per run (seedS/CONFIG[/DOMAIN]), "
                                                     "study.json, hdee.json; one that holds a study needs --resume or "
                                                     "--overwrite")
    parser.add_argument("--resume", action="store_true", help="continue the study in OUT: finished runs are reused, "
                                                              "unfinished ones continue from their checkpoints; "
                                                              "--seeds may differ (seeds added or dropped)")
    parser.add_argument("--overwrite", action="store_true", help="replace the study in OUT")
    parser.add_argument("--stop-after", type=int, default=None,
                        help="stop every run after this many of its outer steps, with a checkpoint (then --resume)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 on a shared CPU)")
    parser.add_argument("--json", action="store_true", help="print the JSON report instead of the tables")


def study_from_args(args):
    """The validated :class:`noloco.studies.ensemble.plan.Study` of the flags (``--quick`` first, then every flag
    given)."""
    from noloco.studies.ensemble.plan import QUICK, Study

    values = {**(QUICK if args.quick else {}),
              **{k: getattr(args, k) for k in _flags() if getattr(args, k, None) is not None}}
    return Study(**values)
