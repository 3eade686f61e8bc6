"""`noloco comm`: seconds per synchronisation (all-reduce vs NoLoCo group exchange)
and the idle fraction of a global barrier vs random groups (noloco.quadratic.comm_report)."""

from __future__ import annotations

import sys

HELP = "synchronisation time and idle fraction: all-reduce vs NoLoCo group exchange"
DESCRIPTION = """\
Latency-bandwidth (Hockney) model of one synchronisation: all-reduce over N replicas
(ring, recursive doubling, Rabenseifner, binary tree, double binary tree) against one
NoLoCo group exchange among n, and an event simulation of the time replicas sit idle
waiting for peers (global barrier vs random groups). Defaults are internet-like:
50 ms one-way latency per message, 1 Gbit/s per replica, a 1M-parameter model in
bf16 (2 MB, below the 6.25 MB bandwidth-delay product, so latency-bound), 256
replicas in pairs, 30 s of compute per outer step with lognormal jitter of cv 0.1.
Larger models turn the exchange bandwidth-bound and the speed-up shrinks; see
docs/comm.md. Model tables are instant at any N; the idle simulation takes 9 to 12 ns of
wall time per replica and step with numpy, 4 to 5 ns compiled (numba, the fast extra; by
default from 1e8 replica-steps, NOLOCO_JIT=1 always, NOLOCO_JIT=0 never: other random
numbers, the same law; gamma jitter adds about 3 ns), with two trials at a time on two
cores above 65536 replicas, and at
most 56 bytes per replica for each trial in flight. Exit 0, 2 on bad input, 3 when the
simulation does not fit the memory or time budget (--max-memory, --max-time)."""


def add_parser(subparsers):
    from noloco.cli.options import add_memory_argument, add_time_argument
    from noloco.theory.comm import ALLREDUCE, EXCHANGES
    from noloco.theory.jitter import JITTER_KINDS

    p = subparsers.add_parser("comm", help=HELP, description=DESCRIPTION)
    p.add_argument("--params", type=float, default=1e6, help="model parameters per replica (default 1e6)")
    p.add_argument("--bytes-per-value", type=float, default=2.0, help="bytes per parameter (default 2, bf16)")
    p.add_argument("--replicas", "-N", type=int, default=256, help="number of replicas N (default 256)")
    p.add_argument("--group-size", "-n", type=int, default=2, help="NoLoCo group size n, divides N (default 2)")
    p.add_argument("--latency", type=float, default=0.05,
                   help="one-way latency per message in seconds (default 0.05 = 50 ms, internet-like)")
    p.add_argument("--bandwidth", type=float, default=1e9,
                   help="bandwidth per replica in bits per second (default 1e9 = 1 Gbit/s)")
    p.add_argument("--reduce-cost", type=float, default=0.0,
                   help="seconds per byte to add a received buffer locally (default 0)")
    p.add_argument("--algorithm", choices=("best",) + tuple(ALLREDUCE), default="best",
                   help="all-reduce whose time the barrier pays in the idle simulation (default: the fastest)")
    p.add_argument("--exchange", choices=EXCHANGES, default="root",
                   help="NoLoCo exchange: 'root' (reference code: slow weights and progress via the group's "
                        "first rank) or 'direct' (pairwise swaps of one combined vector); default root")
    p.add_argument("--jitter", choices=JITTER_KINDS, default="lognormal",
                   help="distribution of the compute time per outer step, mean 1 (default lognormal)")
    p.add_argument("--jitter-cv", type=float, default=0.1, help="coefficient of variation of compute time (0.1)")
    p.add_argument("--hardware", default="1:1",
                   help="hardware classes as fraction:slowdown pairs, e.g. '0.75:1,0.25:1.5' (default 1:1)")
    p.add_argument("--compute-seconds", type=float, default=30.0,
                   help="mean compute seconds per outer step on slowdown-1 hardware (default 30)")
    p.add_argument("--steps", type=int, default=200, help="outer steps simulated (default 200)")
    p.add_argument("--trials", type=int,
                   help="independent simulated runs (default 8; fewer, at least 2, when replicas x steps exceeds "
                        "1e8: each run then averages over that many replicas)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    add_memory_argument(p)
    add_time_argument(p)
    p.add_argument("--json", action="store_true",
                   help="print strict JSON instead of a table (an unbounded value, such as the speed-up of "
                        "n = 1, is null with '<key>_nonfinite' beside it)")
    p.set_defaults(run=run)
    return p


def run(args) -> int:
    from noloco.infra.files import print_json
    from noloco.quadratic.comm_report import format_report, report

    r = report(params=args.params, bytes_per_value=args.bytes_per_value, replicas=args.replicas,
               group_size=args.group_size, latency=args.latency, bandwidth=args.bandwidth,
               reduce_seconds_per_byte=args.reduce_cost, algorithm=args.algorithm, exchange=args.exchange,
               jitter=args.jitter, jitter_cv=args.jitter_cv, hardware=args.hardware,
               compute_seconds=args.compute_seconds, steps=args.steps, trials=args.trials, seed=args.seed,
               progress=sys.stderr.isatty(), max_memory=args.max_memory, max_time=args.max_time)
    print_json(r.to_json()) if args.json else print(format_report(r))
    return 0
