"""``noloco llm study NAME``: the multi-run studies of noloco.studies and the gloo timings, each an
action with its flags declared here: ``routing`` and ``paper`` (trained for several seeds, finished runs
reused), ``advice``, ``tune``, ``families`` and ``forecasts`` (the advice's held-out evaluations), ``warnings`` (the early warnings'
false alarms and planted faults) and ``comm`` (gloo's all-reduce and
point-to-point times on this machine)."""

from __future__ import annotations

import sys

STUDIES = ("routing", "paper", "advice", "tune", "families", "forecasts", "gap", "warnings", "one-pilot", "comm")


def add_parser(sub) -> None:
    study = sub.add_parser("study", help="multi-run studies: routing, paper, advice, tune; comm: gloo timings",
                           description=__doc__.split("\n\n")[0].replace("``", ""))
    actions = study.add_subparsers(dest="study", metavar="STUDY")
    actions.required = True
    from importlib import import_module

    for name in ("routing", "paper"):
        module = import_module(f"noloco.studies.{name}")
        summary = module.__doc__.split("\n\n")[0].replace("``", "")
        seeded = actions.add_parser(name, help=summary, description=summary)
        default_out = f"runs/{name}" if name == "routing" else "runs/paper-study"
        seeded.add_argument("--out", default=default_out,
                            help=f"run folder (default {default_out}); finished runs with the same settings are reused")
        seeded.add_argument("--seeds", type=int, default=len(module.SEEDS),
                            help=f"number of seeds, at least 2 (default {len(module.SEEDS)})")
        seeded.add_argument("--quick", action="store_true", help="a tiny version of the study (a smoke test)")
        seeded.add_argument("--threads", type=int, default=1, help="torch CPU threads per run (default 1)")
        seeded.add_argument("--json", action="store_true", help="print the JSON report instead of the tables")
        seeded.set_defaults(study_run=_seeded)

    advice = actions.add_parser("advice", help="the advice's held-out evaluation (docs/advice.md)",
                                description="Trains what is missing of the held-out runs, then evaluates the "
                                            "forecasts and transfers under the rule fixed before them.")
    advice.add_argument("--runs", default="runs/advice-holdout", help="folder of the runs (default runs/advice-holdout)")
    advice.add_argument("--no-train", action="store_true", help="evaluate only (every run must exist)")
    advice.add_argument("--development", metavar="DIR",
                        help="instead: the forecasts and transfers of the development sweep's runs DIR/SETTING/sSEED "
                             "(pilot DIR/const_h10), written to DIR/advice_development.json")
    advice.add_argument("--json", action="store_true", help="print the JSON report")
    advice.set_defaults(study_run=_advice)

    tune = actions.add_parser("tune", help="the tuner's held-out check (docs/advice.md, 'The tuner from pilot runs, held out')",
                              description="Tunes from the development sweep, trains the recommended and reference "
                                          "settings with new seeds and judges the three rules fixed before.")
    tune.add_argument("--pilots", required=True, help="the development sweep's runs (SETTING/sSEED folders)")
    tune.add_argument("--runs", required=True, help="where the held-out runs go (finished ones are reused)")
    tune.add_argument("--json", action="store_true", help="print the JSON report")
    tune.set_defaults(study_run=_tune)

    families = actions.add_parser("families", help="the advice on model families it was not fitted on (a Hugging "
                                                    "Face GPT-2 and a Llama-style config, cpu-tiny)",
                                  description="Trains each family's pilot and target runs through the public API "
                                              "(finished runs are reused) and judges the own-input prediction, the "
                                              "forecast, the transfer and the gap under the rules fixed in "
                                              "noloco/studies/families.py before the runs. Needs transformers.")
    families.add_argument("--out", default="runs/families", help="folder of the runs (default runs/families)")
    families.add_argument("--no-train", action="store_true", help="evaluate only (every run must exist)")
    families.add_argument("--json", action="store_true", help="print the JSON report")
    families.add_argument("--rank-run", metavar="FAMILY",
                          help="instead: be one rank of FAMILY's run under torchrun, written to --out (the study "
                               "starts `torchrun --nproc-per-node 4 -m noloco llm study families --rank-run gpt2 ...` "
                               "itself)")
    families.add_argument("--seed", type=int, default=0, help="with --rank-run: the run's seed (default 0)")
    families.set_defaults(study_run=_families)

    _runs_study(actions, "forecasts", "--runs", "runs/families", _forecasts,
                "the forecast's flags calibrated on the model families (docs/advice.md)",
                "Trains what is missing of the families' runs (the families study's layout, finished runs reused), "
                "forecasts each from outer steps 8 to 24, chooses the flags' limits on seed 0 and judges seed 1 with "
                "them. Needs transformers.")
    _runs_study(actions, "gap", "--out", "runs/gap-check", _gap,
                "--gap split by tensor on Llama and GPT-2 at N = 8 (docs/advice.md)",
                "Trains Llama and GPT-2 configs at N = 8 (about 4 minutes each here) and splits the predicted and the "
                "measured loss gap by tensor. Needs transformers.", reuse=False)
    _runs_study(actions, "warnings", "--out", "runs/warnings", _warnings,
                "the early warnings on clean runs of several model families and on planted faults (docs/own_run.md)",
                "Trains what is missing of the clean and faulty runs (Hugging Face GPT-2 and Llama configs, 12 outer "
                "steps each, finished runs reused) and counts the observer's false alarms and the faults it caught. "
                "Exit 1 on a false alarm or a fault not caught. Needs transformers.")
    _runs_study(actions, "one-pilot", "--out", "runs/one-pilot", _one_pilot,
                "advice from one pilot and its forks, checked by brute force (every outer axis both ways; the tuner "
                "on a grid of 29 settings)",
                "Trains each family's pilot with its forks and every setting whole (finished runs are reused) and "
                "judges the transfers and the tuner under the rules of docs/advice.md, 'One pilot'. Needs "
                "transformers.")

    from noloco.llm_check.comm_measure import DEFAULT_OUT, DEFAULT_SIZES

    comm = actions.add_parser("comm", help="gloo all-reduce and point-to-point times on this machine",
                              description="Times gloo's collectives and group exchanges between processes on this "
                                          "machine and fits the comm model's latency and bandwidth.")
    comm.add_argument("--out", default=DEFAULT_OUT, help=f"JSON output path (default {DEFAULT_OUT})")
    comm.add_argument("--ranks", default="2,3,4,5,6,7,8", help="comma-separated process counts >= 2 (include 2)")
    comm.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                      help="comma-separated payload sizes in bytes >= 4 (default 1 KiB .. 64 MiB, x4)")
    comm.add_argument("--repeats", type=int, default=20, help="repetitions at 1 KiB (>= 3); fewer at larger sizes")
    comm.add_argument("--json", action="store_true", help="print the JSON report (the file's content) instead of the table")
    comm.set_defaults(study_run=_comm)
    study.set_defaults(run=run)


def _runs_study(actions, name: str, folder_flag: str, default: str, handler, summary: str, description: str,
                reuse: bool = True) -> None:
    """A study that trains its runs in a folder (``reuse``: only what is missing, or with --no-train none) and
    evaluates them."""
    parser = actions.add_parser(name, help=summary, description=description)
    parser.add_argument(folder_flag, default=default, help=f"folder of the runs (default {default})")
    if reuse:
        parser.add_argument("--no-train", action="store_true", help="evaluate only (every run must exist)")
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.set_defaults(study_run=handler)


def run(args) -> int:
    return args.study_run(args)


def _print(args, module, report: dict) -> None:
    """A study's report: JSON with --json, else its table (the module's ``format_report``)."""
    from noloco.infra.files import print_json

    print_json(report) if args.json else print(module.format_report(report))


def _seeded(args) -> int:
    from importlib import import_module

    from noloco.infra.entry import interrupted
    from noloco.infra.errors import ConfigError
    from noloco.llm_check.config import check_threads

    if args.seeds < 2:
        raise ConfigError(f"--seeds {args.seeds}: at least 2 seeds are needed for a standard error")
    check_threads(args.threads)
    module = import_module(f"noloco.studies.{args.study}")
    try:
        report = module.run_study(args.out, seeds=tuple(range(args.seeds)), quick=args.quick, threads=args.threads)
    except KeyboardInterrupt as err:
        raise interrupted(err, "finished runs are kept and reused by the same command") from None
    _print(args, module, report)
    return 0


def _advice(args) -> int:
    from noloco.infra.files import print_json
    from noloco.studies import advice

    if args.development:
        report = advice.run_development(args.development)
        print_json(report) if args.json else print(advice.format_development(report))
        return 0
    report = advice.run_holdout(args.runs, train=not args.no_train)
    _print(args, advice, report)
    return 0


def _tune(args) -> int:
    from pathlib import Path

    from noloco.studies import tune

    report = tune.run_study(Path(args.pilots), Path(args.runs))
    _print(args, tune, report)
    return 0


def _families(args) -> int:
    from noloco.studies import families

    if args.rank_run is not None:
        from noloco.infra.checks import check_choice

        families.rank_run(check_choice("rank_run", args.rank_run, tuple(families.FAMILIES)), args.seed, args.out)
        return 0
    report = families.run_study(args.out, train=not args.no_train)
    _print(args, families, report)
    return 0


def _forecasts(args) -> int:
    from noloco.studies import forecasts

    report = forecasts.run_study(args.runs, train=not args.no_train)
    _print(args, forecasts, report)
    return 0


def _gap(args) -> int:
    from noloco.infra.errors import require_extra
    from noloco.studies import gap_check

    require_extra("transformers", "transformers", "hf", "the gap check's model families")
    report = gap_check.run_study(args.out)
    _print(args, gap_check, report)
    return 0


def _warnings(args) -> int:
    from noloco.infra.errors import require_extra
    from noloco.studies import warnings

    require_extra("transformers", "transformers", "hf", "the warnings study's model families")
    report = warnings.run_study(args.out, train_runs=not args.no_train)
    _print(args, warnings, report)
    if not warnings.ok(report):  # why the exit status is 1, on stderr: --json's stdout stays pure JSON
        s = report["summary"]
        print(f"noloco llm study warnings: {s['false_alarms']} false alarm(s) on {s['clean_runs']} clean runs, "
              f"{s['faults'] - s['caught']} of {s['faults']} planted faults not caught", file=sys.stderr)
    return 0 if warnings.ok(report) else 1


def _one_pilot(args) -> int:
    from noloco.studies import one_pilot

    report = one_pilot.run_study(args.out, train=not args.no_train)
    _print(args, one_pilot, report)
    return 0


def _comm(args) -> int:
    from noloco.llm_check import comm_measure

    data, out = comm_measure.measure_to_file(args.out, args.ranks, args.sizes, args.repeats)
    if args.json:
        from noloco.infra.files import print_json

        print_json(data)
    else:
        print(comm_measure.format_table(data))
    print(f"wrote {out}", file=sys.stderr if args.json else sys.stdout)
    return 0
