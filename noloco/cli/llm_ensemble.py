"""``noloco llm ensemble``: domain-expert ensembles trained with no communication (HDEE: homogeneous,
size-heterogeneous, step-heterogeneous; seed models and branch-train-merge rounds) next to ddp, diloco and noloco
at the same FLOP budget, evaluated per domain (noloco.studies.ensemble.run_study; docs/hdee.md)."""

from __future__ import annotations


def add_parser(sub) -> None:
    ens = sub.add_parser("ensemble", help="domain-expert ensembles (no communication) vs ddp / diloco / noloco at "
                                          "equal FLOPs, per-domain perplexity",
                         description="HDEE's ensembles as published: seed models on the training "
                                     "mixture, then chains of experts, one per difficulty tier, each continued on a "
                                     "new domain per round; homogeneous, heterogeneous in size (MLP width) and "
                                     "heterogeneous in steps, and ddp, diloco and noloco on the mixture, all at one "
                                     "budget of training FLOPs; every domain's validation perplexity, the ensembles "
                                     "mixed by the domain posterior (cached or fixed prior) and uniformly. "
                                     "Writes OUT/hdee.json (docs/hdee.md).")
    add_arguments(ens)
    ens.set_defaults(run=run)


def run(args) -> int:
    from noloco.infra.entry import failed
    from noloco.infra.files import print_json
    from noloco.studies.ensemble.report import format_report
    from noloco.studies.ensemble.study import run_study

    threads = 1 if args.quick and args.threads is None else args.threads  # a tiny model: more threads only spin
    report = run_study(study_from_args(args), args.out, resume=args.resume, overwrite=args.overwrite,
                       stop_after=args.stop_after, threads=threads)
    print_json(report) if args.json else print(format_report(report))
    diverged = report.diverged  # the finding, on stderr too: exit 1
    return failed("; ".join(f"{name} {message}" for name, message in diverged.items())) if diverged else 0


def _flags() -> dict:
    from noloco.llm_check import domains
    from noloco.studies.ensemble.plan import CONFIGS, EXPERT_UNIT, Study

    d = Study()
    return {
        "configs": (str, "what to train, comma-separated: " + ", ".join(CONFIGS) + " (default all; combined is the "
                         "project's extension, not one of HDEE's forms)"),
        "domains": (str, "training domains: the seed models' and the baselines' mixture, from which the rounds "
                         "take their domains by difficulty tier (default every training domain: "
                         + ", ".join(domains.TRAINING) + ")"),
        "seeds": (str, f"seeds, comma-separated (default {','.join(map(str, d.seeds))})"),
        "rounds": (int, f"branch-train-merge rounds: each chain continues on a new domain (default {d.rounds})"),
        "experts": (int, f"chains, one per difficulty tier: the final ensemble's experts (default {d.experts})"),
        "seed_steps": (int, f"steps of each seed model on the mixture, a multiple of {EXPERT_UNIT} "
                            f"(default {d.seed_steps})"),
        "expert_steps": (int, f"steps of a medium expert per round, a multiple of {EXPERT_UNIT} (default "
                              f"{d.expert_steps}); with --seed-steps it sets the FLOP budget of every configuration"),
        "width": (int, f"width of every model (default {d.width})"),
        "layers": (int, f"transformer blocks (default {d.layers})"), "heads": (int, f"attention heads (default {d.heads})"),
        "ctx": (int, f"context length in bytes (default {d.ctx})"),
        "batch": (int, f"windows per replica per step (default {d.batch})"),
        "lr": (float, f"peak learning rate of the seed models and the baselines (cosine to a tenth, warm-up over a "
                      f"tenth of the steps; default {d.lr:g})"),
        "expert_lr": (float, f"peak learning rate of the experts (cosine to half; default {d.expert_lr:g})"),
        "replicas": (int, f"replicas N of ddp, diloco and noloco (even; default {d.replicas})"),
        "inner_steps": (int, f"inner steps H of diloco and noloco (default {d.inner_steps})"),
        "eval_windows": (int, f"validation windows per domain (default {d.eval_windows})"),
        "segment": (int, f"windows per evaluation segment: the bytes the domain posterior sees (default {d.segment})"),
        "prior_segments": (int, f"first segments of each evaluated domain the cached prior is taken from (default "
                                f"{d.prior_segments})"),
        "prior_decay": (float, f"the cached prior's decay (default {d.prior_decay:g})"),
    }


def add_arguments(parser) -> None:
    for name, (kind, text) in _flags().items():
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=None, help=text)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: three training domains, one round, width 16, one seed, one torch thread "
                             "unless --threads (about 6 s of CPU time on the project's 2-core machine); flags override it")
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
