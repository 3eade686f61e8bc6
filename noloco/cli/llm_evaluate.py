"""``noloco llm evaluate``: the validation loss of a trained run, optionally with middle stages removed
(noloco.llm_check.evaluation.evaluate_run)."""

from __future__ import annotations


def add_parser(sub) -> None:
    ev = sub.add_parser("evaluate", help="validation loss of a trained run, optionally with middle stages removed",
                        description="Loads OUT's checkpoint (a one-process run) and evaluates the replica-mean "
                                    "model and every replica's fixed path, leaving out the middle stages --remove "
                                    "(noloco.llm_check.evaluation.evaluate_run).")
    ev.add_argument("out", metavar="OUT", help="a run folder written by `noloco llm train` (one method)")
    ev.add_argument("--remove", default="", metavar="S,S,...",
                    help="middle stages to leave out (1 .. stages - 2), comma-separated (default: none)")
    ev.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    ev.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ev.set_defaults(run=run)


def run(args) -> int:
    from noloco.infra.files import input_dir, print_json
    from noloco.llm_check.evaluation import evaluate_run, format_evaluation

    out = input_dir(args.out, "OUT")  # '' is bad input (exit 2), never the current folder
    report = evaluate_run(out, args.remove, args.threads)
    print_json(report.to_json()) if args.json else print(format_evaluation(report))
    return 0
