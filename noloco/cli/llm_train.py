"""``noloco llm train``: one run per method (metrics.jsonl, checkpoints, result.json under OUT), with a
comparison table (noloco.llm_check.train.train_methods)."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    from noloco.llm_check.config import add_train_arguments

    train = sub.add_parser("train", help="one run per method; metrics.jsonl, checkpoints, result.json under OUT",
                           description="Train; with several methods (--method ddp,diloco,noloco, the cpu-small "
                                       "default) each goes to OUT/METHOD and a comparison table is printed.")
    add_train_arguments(train, methods_list=True)
    train.set_defaults(run=run)


def run(args) -> int:
    from noloco.llm_check.config import configs_from_args
    from noloco.llm_check.train import format_results, train_methods

    results = train_methods(configs_from_args(args), args.out, resume=args.resume, stop_after=args.stop_after,
                            threads=args.threads, overwrite=args.overwrite, max_memory=args.max_memory)
    print(format_results(results))
    diverged = {method: r["diverged"]["message"] for method, r in results.items() if r.get("diverged")}
    for method, message in diverged.items():  # the finding, on stderr too: exit 1
        print(f"noloco llm train: {method} {message}", file=sys.stderr)
    return 1 if diverged else 0
