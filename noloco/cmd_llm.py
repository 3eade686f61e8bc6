"""``noloco llm``: train a small GPT with ddp / diloco / noloco / local on the Python
standard library's sources, compare the measured replica spread with the theory,
and benchmark batched replicas."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from theory.config import ConfigError


def add_parser(subparsers) -> None:
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

    val = sub.add_parser("validate", help="predicted vs measured weight-spread scaling (gamma, n, N, alpha, lr)")
    val.add_argument("--preset", choices=("cpu-tiny", "cpu-small", "gpu"), default="cpu-small")
    val.add_argument("--device", default=None, help="cpu or cuda (default: the preset's)")
    val.add_argument("--out", default="runs/llm-validate", help="run directory (default runs/llm-validate/PRESET)")
    val.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    val.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is fastest on a busy CPU)")
    val.set_defaults(run=run)

    bench = sub.add_parser("bench", help="tokens/s: batched replicas vs a per-replica loop vs one N-times-batch model")
    bench.add_argument("--replicas", type=int, default=8)
    bench.add_argument("--device", default="cpu")
    bench.add_argument("--size", choices=("cpu-small", "gpu"), default="cpu-small")
    bench.add_argument("--steps", type=int, default=10)
    bench.add_argument("--json", action="store_true")
    bench.set_defaults(run=run)


def _train(args) -> int:
    from llm_check.config import config_from_args
    from llm_check.train import Trainer, set_threads

    set_threads(args.threads)
    methods = (args.method or ("ddp,diloco,noloco" if args.preset == "cpu-small" else "noloco")).split(",")
    configs = [config_from_args(args, m.strip()) for m in methods]  # validate all before running any
    if args.stop_after is not None and args.stop_after < 1:
        raise ConfigError(f"stop_after={args.stop_after} is out of range; allowed: an integer >= 1")
    results = {}
    for cfg in configs:
        out = Path(args.out) / cfg.method if len(configs) > 1 else Path(args.out)
        results[cfg.method] = Trainer(cfg, out).run(resume=args.resume, stop_after=args.stop_after)
    first = next(iter(results.values()))
    print(f"corpus sha256 {first['corpus_sha256'][:16]}, Python {first['python']}, {first['n_params']} parameters, "
          f"unigram entropy {first['unigram_entropy']:.3f} nats/byte")
    print(f"{'method':<8} {'steps':>6} {'train':>7} {'val(avg model)':>15} {'weight_std':>11} {'tok/s':>8} {'wall s':>7}")
    for method, r in results.items():
        f = r["final"] or {}
        print(f"{method:<8} {f.get('step', 0):>6} {f.get('train_loss', float('nan')):>7.3f} "
              f"{f.get('val_loss_avg_model', float('nan')):>15.3f} {f.get('weight_std', float('nan')):>11.3e} "
              f"{f.get('tokens_per_s', float('nan')):>8.0f} {r['wall_s']:>7.1f}")
    return 0


def run(args) -> int:
    if args.llm_command == "train":
        return _train(args)
    if args.llm_command == "validate":
        from llm_check.train import set_threads
        from llm_check.validate import format_table, run_sweep

        set_threads(args.threads)
        out = Path(args.out) / args.preset
        report = run_sweep(args.preset, out, device=args.device)
        print(json.dumps(report, indent=2) if args.json else format_table(report))
        print(f"(runs and validate.json in {out})", file=sys.stderr)
        return 0
    from llm_check.bench import bench, format_bench

    if args.replicas < 1 or args.steps < 1:
        raise ConfigError("replicas and steps must be >= 1")
    result = bench(args.replicas, args.size, args.device, args.steps)
    print(json.dumps(result, indent=2) if args.json else format_bench(result))
    return 0
