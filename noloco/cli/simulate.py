"""``noloco simulate``: Monte Carlo of a NoLoCo setting with real inner steps, every
simulated quantity next to what the theory predicts, with standard errors."""

from __future__ import annotations

from noloco.cli.options import (add_hyper_arguments, add_inner_model_arguments, add_memory_argument, add_time_argument,
                            hyper_from_args, inner_momentum_from_args)
from noloco.quadratic.names import DTYPES, INNER_MODES, OBJECTIVES, SCHEDULES, SPLITS


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate", help="simulate many replicas and compare with the theory",
        description="Run N replicas x TRIALS independent trials of the setting (same flags as "
                    "`noloco check`) with real inner steps on a quadratic (--curvature/--spectrum) or a "
                    "convex objective on a packaged data set, and print the simulated spread, mean and "
                    "loss next to the theory with standard errors. Results are cached under a hash of the "
                    "full configuration. Memory is estimated before any work. With numba installed (the [fast] "
                    "extra) large exact runs compile their outer step: same results, about 1.8x faster; "
                    "NOLOCO_JIT=1 always, NOLOCO_JIT=0 never. Exit 0, 1 if the run diverged, 2 on "
                    "bad input, 3 when the run does not fit the memory or time budget (--max-memory, --max-time).")
    add_hyper_arguments(parser)
    g = parser.add_argument_group("simulation")
    g.add_argument("--objective", choices=OBJECTIVES, default="quadratic",
                   help="quadratic with --curvature/--spectrum (default), ridge regression on diabetes or "
                        "longley (ill-conditioned), L2 logistic regression on breast-cancer")
    g.add_argument("--trials", type=int, default=200, help="independent trials (default 200)")
    g.add_argument("--outer-steps", type=int, default=200, help="outer steps per trial (default 200)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--rotate", action="store_true", help="random rotation of the quadratic's eigenbasis")
    g.add_argument("--split", choices=SPLITS, default="shared",
                   help="data across replicas: shared (all rows), iid shards, sorted by label, by k-means cluster")
    g.add_argument("--batch-size", type=int, default=0, help="minibatch rows per inner step (0: full gradient)")
    g.add_argument("--l2", type=float, help="L2 regularisation of the data objectives (default 0.01)")
    add_inner_model_arguments(g)
    g.add_argument("--inner", choices=INNER_MODES, default="auto", dest="inner_mode",
                   help="exact: the inner phase drawn from its exact law (inner SGD on the quadratic: 0.4 H "
                        "times faster at 1000 directions); explicit: every inner step simulated; auto (default): "
                        "exact where it is exact, else explicit")
    g.add_argument("--dtype", choices=DTYPES, default="float64",
                   help="precision of the simulated weights (float32: the quadratic without rotation, or "
                        "--inner exact; see docs/performance.md for when it is accurate enough)")
    g.add_argument("--schedule", choices=SCHEDULES, default="constant",
                   help="inner learning rate after --warmup: constant, cosine, inverse: lr / (1 + k / --decay-time)")
    g.add_argument("--warmup", type=int, default=0, help="linear warm-up inner steps, before any --schedule")
    g.add_argument("--decay-time", type=float, help="inner steps to halve the lr under 'inverse' (default 50)")
    g.add_argument("--start", type=float, default=1.0, help="initial offset of every coordinate from the optimum")
    g.add_argument("--burn-in", type=int, help="outer steps before the stationary window (default half)")
    g.add_argument("--no-cache", action="store_true", help="recompute even if a cached result exists")
    add_memory_argument(g)
    add_time_argument(g)
    g.add_argument("--json", action="store_true",
                   help="print the full result as strict JSON (an unbounded value is null, with "
                        "'<key>_nonfinite' beside it)")
    parser.set_defaults(run=run)


def run(args) -> int:
    from noloco.infra.entry import failed
    from noloco.infra.errors import ConfigError
    from noloco.infra.files import print_json
    from noloco.quadratic.compare import simulate

    method, outer, inner, spectrum = hyper_from_args(args, default_shape=False)
    # each changes nothing elsewhere: refused there, as --inner-momentum is, instead of ignored
    if args.l2 is not None and args.objective == "quadratic":
        raise ConfigError(f"--l2 {args.l2:g} applies to the data objectives only (here quadratic); drop it or add "
                          "--objective diabetes, longley or breast-cancer")
    if args.decay_time is not None and args.schedule != "inverse":
        raise ConfigError(f"--decay-time {args.decay_time:g} applies to --schedule inverse only (here "
                          f"{args.schedule}); drop it or add --schedule inverse")
    given = {"l2": args.l2, "decay_time": args.decay_time}  # else SimConfig's defaults
    # curvatures with a data objective (which takes its Hessian from the data) are refused by SimConfig
    sim = simulate(
        method, outer, inner, spectrum, objective=args.objective, rotate=args.rotate, trials=args.trials,
        outer_steps=args.outer_steps, inner_mode=args.inner_mode, max_memory=args.max_memory, max_time=args.max_time,
        use_cache=not args.no_cache, zeta=args.zeta, split=args.split, batch_size=args.batch_size,
        optimizer=args.inner_optimizer, inner_momentum=inner_momentum_from_args(args), schedule=args.schedule,
        warmup=args.warmup, burn_in=args.burn_in, start=args.start, seed=args.seed, dtype=args.dtype,
        **{k: v for k, v in given.items() if v is not None})
    print_json(sim.result) if args.json else print(sim.text)
    return failed(f"the simulation diverged ({sim.diverged})") if sim.diverged else 0
