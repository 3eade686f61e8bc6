"""``noloco llm bench``: tokens/s of batched replicas against a loop and one N-times-batch model, the
same benchmark as ``python -m noloco.benchmarks llm-step`` (noloco.benchmarks.llm_step)."""

from __future__ import annotations


def add_parser(sub) -> None:
    from noloco.benchmarks.llm_step import add_bench_arguments

    bench = sub.add_parser("bench", help="tokens/s: batched replicas vs a per-replica loop vs one N-times-batch model",
                           description="The same benchmark as `python -m benchmarks llm-step`, with the same flags.")
    add_bench_arguments(bench)
    bench.set_defaults(run=run)


def run(args) -> int:
    from noloco.benchmarks.llm_step import bench_command

    bench_command(args)
    return 0
