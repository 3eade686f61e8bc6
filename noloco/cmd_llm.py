"""``noloco llm``: train a small GPT with ddp / diloco / noloco / local on the Python
standard library's sources, compare the measured replica spread with the theory,
and benchmark batched replicas. Parses, calls one function of :mod:`llm_check`, prints."""

from __future__ import annotations

import sys


def add_parser(subparsers) -> None:
    from noloco.benchmarks.llm_step import add_bench_arguments
    from noloco.llm_check.config import add_train_arguments

    parser = subparsers.add_parser(
        "llm", help="train a small GPT with NoLoCo / DiLoCo / DDP and check the theory",
        description="Real training runs on CPython's standard-library text. Under torchrun use "
                    "`torchrun --nproc-per-node N -m noloco.llm_check.train ...` (one replica per rank).")
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
                                     "flat-direction theory (noloco.llm_check.validate).")
    val.add_argument("--preset", choices=("cpu-tiny", "cpu-small", "gpu"), default="cpu-small",
                     help="the sweep's model and run length (default cpu-small)")
    val.add_argument("--device", default=None, help="cpu or cuda (default: the preset's)")
    val.add_argument("--out", default="runs/llm-validate", help="run directory (default runs/llm-validate/PRESET)")
    val.add_argument("--overwrite", action="store_true",
                     help="replace the sweep's runs under OUT/PRESET (without it a folder holding them is refused)")
    val.add_argument("--reuse", action="store_true",
                     help="keep the finished runs of the same settings under OUT/PRESET and train only the others "
                          "(an interrupted sweep continues; the report is recomputed)")
    val.add_argument("--max-memory", default=None, metavar="SIZE",
                     help="memory budget of each run, e.g. 8G (default: half the memory available)")
    val.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    val.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is fastest on a busy CPU)")
    val.set_defaults(run=run)

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

    ev = sub.add_parser("evaluate", help="validation loss of a trained run, optionally with middle stages removed",
                        description="Loads OUT's checkpoint (a one-process run) and evaluates the replica-mean "
                                    "model and every replica's fixed path, leaving out the middle stages --remove "
                                    "(noloco.llm_check.train.evaluate_run).")
    ev.add_argument("out", metavar="OUT", help="a run folder written by `noloco llm train` (one method)")
    ev.add_argument("--remove", default="", metavar="S,S,...",
                    help="middle stages to leave out (1 .. stages - 2), comma-separated (default: none)")
    ev.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    ev.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ev.set_defaults(run=run)

    bench = sub.add_parser("bench", help="tokens/s: batched replicas vs a per-replica loop vs one N-times-batch model",
                           description="The same benchmark as `python -m benchmarks llm-step`, with the same flags.")
    add_bench_arguments(bench)
    bench.set_defaults(run=run)


def _torch() -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        from noloco.infra.errors import DataError

        raise DataError("torch is not installed; install the llm extra: pip install -e '.[llm]'")


def run(args) -> int:
    from noloco.infra.files import output_dir, output_file, print_json

    if args.llm_command == "predict":  # reads files only: no torch
        from noloco.llm_check.predict import format_predict, predict

        report = predict(args.out, noise_model=args.noise_model)
        if args.json:
            print_json(report)
        else:
            print(format_predict(report))
        return 0
    _torch()
    if args.llm_command == "train":
        from noloco.llm_check.config import configs_from_args
        from noloco.llm_check.train import format_results, train_methods

        configs = configs_from_args(args)
        output_dir(args.out)  # before any run: not '', not a file, writable
        results = train_methods(configs, args.out, resume=args.resume, stop_after=args.stop_after,
                                threads=args.threads, overwrite=args.overwrite, max_memory=args.max_memory)
        print(format_results(results))
        diverged = [m for m, r in results.items() if r.get("diverged")]
        for method in diverged:
            print(f"noloco llm train: {method} {results[method]['diverged']['message']}", file=sys.stderr)
        return 1 if diverged else 0
    if args.llm_command == "evaluate":
        from noloco.llm_check.train import evaluate_run
        from noloco.infra.errors import ConfigError

        try:
            removed = [int(v) for v in args.remove.split(",") if v.strip()]
        except ValueError:
            raise ConfigError(f"--remove {args.remove!r}: give stage numbers, e.g. 1,2") from None
        report = evaluate_run(args.out, removed, args.threads)
        if args.json:
            print_json(report)
        else:
            print(f"stages {report['stages']}, removed {report['removed'] or 'none'}, outer step {report['outer_step']}: "
                  f"val loss (replica-mean model) {report['val_loss_avg_model']:.4f}, per replica "
                  + " ".join(f"{v:.4f}" for v in report["val_loss_per_replica"]))
        return 0
    if args.llm_command == "validate":
        from noloco.llm_check.validate import format_table, run_sweep

        out = output_dir(args.out) / args.preset
        report = run_sweep(args.preset, out, device=args.device, threads=args.threads, overwrite=args.overwrite,
                           max_memory=args.max_memory, reuse=args.reuse)
        if args.json:
            print_json(report)
        else:
            print(format_table(report))
        print(f"(runs and validate.json in {out})", file=sys.stderr)
        return 1 if report.get("diverged") else 0
    import warnings

    from noloco.benchmarks.llm_step import bench_from_args, format_result
    from noloco.benchmarks.timer import emit

    if args.out is not None:
        output_file(args.out)  # before the benchmark, not after it
    with warnings.catch_warnings():  # torch.func's note that vmap falls back to a loop for attention
        warnings.filterwarnings("ignore", message=r"There is a performance drop because we have not yet implemented")
        emit(bench_from_args(args), args, format_result)
    return 0
