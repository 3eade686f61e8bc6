"""``noloco llm``: train a small GPT with ddp / diloco / noloco / local on the Python
standard library's sources, compare the measured replica spread with the theory,
and benchmark batched replicas. Parses, calls one function of :mod:`llm_check`, prints."""

from __future__ import annotations

import sys
from pathlib import Path


def add_parser(subparsers) -> None:
    from benchmarks.llm_step import add_bench_arguments
    from llm_check.config import add_train_arguments

    parser = subparsers.add_parser(
        "llm", help="train a small GPT with NoLoCo / DiLoCo / DDP and check the theory",
        description="Real training runs on CPython's standard-library text. Under torchrun use "
                    "`torchrun --nproc-per-node N -m llm_check.train ...` (one replica per rank).")
    sub = parser.add_subparsers(dest="llm_command", metavar="ACTION")
    sub.required = True

    train = sub.add_parser("train", help="one run per method; metrics.jsonl, checkpoints, result.json under OUT",
                           description="Train; with several methods (--method ddp,diloco,noloco, the cpu-small "
                                       "default) each goes to OUT/METHOD and a comparison table is printed.")
    add_train_arguments(train, methods_list=True)
    train.set_defaults(run=run)

    val = sub.add_parser("validate", help="predicted vs measured weight-spread scaling (gamma, n, N, alpha, lr)",
                         description="Train a sweep of short runs, fit one noise constant on the reference run "
                                     "and predict the stationary weight spread of the others with the "
                                     "flat-direction theory (llm_check.validate).")
    val.add_argument("--preset", choices=("cpu-tiny", "cpu-small", "gpu"), default="cpu-small",
                     help="the sweep's model and run length (default cpu-small)")
    val.add_argument("--device", default=None, help="cpu or cuda (default: the preset's)")
    val.add_argument("--out", default="runs/llm-validate", help="run directory (default runs/llm-validate/PRESET)")
    val.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    val.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is fastest on a busy CPU)")
    val.set_defaults(run=run)

    bench = sub.add_parser("bench", help="tokens/s: batched replicas vs a per-replica loop vs one N-times-batch model",
                           description="The same benchmark as `python -m benchmarks llm-step`, with the same flags.")
    add_bench_arguments(bench)
    bench.set_defaults(run=run)


def run(args) -> int:
    from theory.io import print_json

    if args.llm_command == "train":
        from llm_check.config import configs_from_args
        from llm_check.train import format_results, train_methods

        results = train_methods(configs_from_args(args), args.out, resume=args.resume, stop_after=args.stop_after,
                                threads=args.threads)
        print(format_results(results))
        return 0
    if args.llm_command == "validate":
        from llm_check.validate import format_table, run_sweep

        out = Path(args.out) / args.preset
        report = run_sweep(args.preset, out, device=args.device, threads=args.threads)
        if args.json:
            print_json(report)
        else:
            print(format_table(report))
        print(f"(runs and validate.json in {out})", file=sys.stderr)
        return 0
    from benchmarks.llm_step import bench_from_args, format_result
    from benchmarks.timer import emit

    emit(bench_from_args(args), args, format_result)
    return 0
