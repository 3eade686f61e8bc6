"""``noloco llm validate``: a sweep of short runs, the measured weight spread against the theory's
prediction (noloco.studies.validate)."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    val = sub.add_parser("validate", help="predicted vs measured weight-spread scaling (gamma, n, N, alpha, lr)",
                         description="Train a sweep of short runs, fit one noise constant on the reference run "
                                     "and predict the stationary weight spread of the others with the "
                                     "flat-direction theory (noloco.studies.validate); next to it the prediction "
                                     "with no fitted constant. Exit 0 when that prediction agrees on every setting "
                                     "(the reference included), 1 when it does not on one or a run diverged, 2 on bad "
                                     "input, 3 for an environment fault or work above --max-memory / --max-time.")
    sizes = ("cpu-tiny", "cpu-small", "gpu")
    val.add_argument("--size", choices=sizes, default=None,
                     help="the sweep's model and run length, as llm train's --size (default cpu-small)")
    val.add_argument("--preset", choices=sizes, default=None, help=argparse.SUPPRESS)  # the old form of --size
    val.add_argument("--device", default=None, help="cpu or cuda (default: the size's)")
    val.add_argument("--out", default="runs/llm-validate", help="run directory (default runs/llm-validate/SIZE)")
    val.add_argument("--overwrite", action="store_true",
                     help="replace the sweep's runs under OUT/SIZE (without it a folder holding them is refused)")
    val.add_argument("--reuse", action="store_true",
                     help="keep the finished runs of the same settings under OUT/SIZE and train only the others "
                          "(an interrupted sweep continues; the report is recomputed)")
    val.add_argument("--max-memory", default=None, metavar="SIZE",
                     help="memory budget of each run, e.g. 8G (default: half the memory available)")
    val.add_argument("--max-time", default=None, metavar="DURATION",
                     help="time budget of the sweep on a CPU, e.g. 30m, 2h or none (default 1h): a sweep estimated "
                          "above it is refused before the first run (exit 3)")
    val.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    val.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is fastest on a busy CPU)")
    val.set_defaults(run=run)


def run(args) -> int:
    from noloco.infra.entry import failed
    from noloco.infra.errors import ConfigError, warn
    from noloco.infra.files import output_dir, print_json
    from noloco.studies.validate import disagreements, format_table, run_sweep

    if args.preset is not None:
        if args.size is not None:
            raise ConfigError(f"--preset {args.preset} is the old form of --size and --size {args.size} is given; "
                              f"give --size only")
        warn(f"--preset {args.preset} is deprecated for the sweep's size; use --size {args.preset}")
    size = args.size or args.preset or "cpu-small"
    out = output_dir(args.out) / size
    report = run_sweep(size, out, device=args.device, threads=args.threads, overwrite=args.overwrite,
                       max_memory=args.max_memory, reuse=args.reuse, max_time=args.max_time)
    print_json(report.to_json()) if args.json else print(format_table(report))
    print(f"(runs and validate.json in {out})", file=sys.stderr)
    wrong = disagreements(report)
    reasons = ([f"a run diverged: {report.diverged}"] if report.diverged else []) + (
        [f"the zero-constant prediction disagrees on {len(wrong)} of {len(report.rows)} settings: "
         f"{'; '.join(wrong)}"] if wrong else [])  # a finding, like a claim that does not hold
    return failed("; ".join(reasons)) if reasons else 0
