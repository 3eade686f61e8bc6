"""``noloco llm predict``: a run's weight_std predicted from the inputs measured inside it, with no fitted
constant (noloco.llm_check.predict). Reads files only: no torch."""

from __future__ import annotations


def add_parser(sub) -> None:
    pred = sub.add_parser("predict", help="a run's weight_std predicted from the inputs measured in it (no fitted constant)",
                          description="Reads OUT/result.json, metrics.jsonl and inputs.jsonl (the per-step c, s2, rho "
                                      "and drift the trainer measures) and steps the theory's exact recursion "
                                      "(noloco.llm_check.predict). A run made before inputs.jsonl existed gets its measured "
                                      "growth and the decay factor at c = 0, not a predicted level.")
    pred.add_argument("out", metavar="OUT", help="a run folder written by `noloco llm train` (one method)")
    pred.add_argument("--noise-model", choices=("long-run", "lag1"), default="long-run",
                      help="how the measured residual becomes the theory's AR(1) noise: long-run (default): no "
                           "drift, rho matched to the variance of the residual's running sum; lag1: rho = lag-1 "
                           "correlation, plus the measured drift (both are in every row)")
    pred.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    pred.set_defaults(run=run)


def run(args) -> int:
    from noloco.infra.files import print_json
    from noloco.llm_check.predict import format_predict, predict

    report = predict(args.out, noise_model=args.noise_model)
    print_json(report) if args.json else print(format_predict(report))
    return 0
