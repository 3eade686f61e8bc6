"""``noloco simulate``: Monte Carlo of a NoLoCo setting with real inner steps, every
simulated quantity next to what the theory predicts, with standard errors."""

from __future__ import annotations

import sys

from noloco.options import add_hyper_arguments, hyper_from_args
from quadratic.names import OBJECTIVES, OPTIMIZERS, SCHEDULES, SPLITS


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate", help="simulate many replicas and compare with the theory",
        description="Run N replicas x TRIALS independent trials of the setting (same flags as "
                    "`noloco check`) with real inner steps on a quadratic (--curvature/--spectrum) or a "
                    "convex objective on a packaged data set, and print the simulated spread, mean and "
                    "loss next to the theory with standard errors. Results are cached under a hash of the "
                    "full configuration. Exit 0, 1 if the run diverged, 2 on bad input.")
    add_hyper_arguments(parser)
    g = parser.add_argument_group("simulation")
    g.add_argument("--objective", choices=OBJECTIVES, default="quadratic",
                   help="quadratic with --curvature/--spectrum (default), ridge regression on diabetes or "
                        "longley (ill-conditioned), L2 logistic regression on breast-cancer")
    g.add_argument("--trials", type=int, default=200, help="independent trials (default 200)")
    g.add_argument("--outer-steps", type=int, default=200, help="outer steps per trial (default 200)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--rotate", action="store_true", help="random rotation of the quadratic's eigenbasis")
    g.add_argument("--zeta", type=float, default=0.0, help="spread of the replicas' optima (quadratic heterogeneity)")
    g.add_argument("--split", choices=SPLITS, default="shared",
                   help="data across replicas: shared (all rows), iid shards, sorted by label, by k-means cluster")
    g.add_argument("--batch-size", type=int, default=0, help="minibatch rows per inner step (0: full gradient)")
    g.add_argument("--l2", type=float, default=1e-2, help="L2 regularisation of the data objectives (default 0.01)")
    g.add_argument("--inner-optimizer", choices=OPTIMIZERS, default="sgd",
                   help="sgd (the model of the theory), momentum (torch convention) or adam")
    g.add_argument("--inner-momentum", type=float, default=0.9, help="momentum of --inner-optimizer momentum")
    g.add_argument("--schedule", choices=SCHEDULES, default="constant",
                   help="inner learning rate: constant, cosine with --warmup, inverse: lr / (1 + k / --decay-time)")
    g.add_argument("--warmup", type=int, default=0, help="warm-up inner steps of the cosine schedule")
    g.add_argument("--decay-time", type=float, default=50.0, help="inner steps to halve the lr under 'inverse'")
    g.add_argument("--start", type=float, default=1.0, help="initial offset of every coordinate from the optimum")
    g.add_argument("--burn-in", type=int, help="outer steps before the stationary window (default half)")
    g.add_argument("--no-cache", action="store_true", help="recompute even if a cached result exists")
    g.add_argument("--json", action="store_true",
                   help="print the full result as strict JSON (an unbounded value is null, with "
                        "'<key>_nonfinite' beside it)")
    parser.set_defaults(run=run)


def _config(args):
    from quadratic.simulator import SimConfig

    method, outer, inner, spectrum = hyper_from_args(args, default_shape=False)
    # SimConfig refuses curvatures with a data objective, which takes its Hessian from the data
    return SimConfig(outer=outer, inner=inner, objective=args.objective,
                     curvatures=None if spectrum is None else spectrum.curvatures,
                     rotate=args.rotate, zeta=args.zeta, split=args.split, batch_size=args.batch_size,
                     l2=args.l2, optimizer=args.inner_optimizer, inner_momentum=args.inner_momentum,
                     schedule=args.schedule, warmup=args.warmup, decay_time=args.decay_time,
                     method=method, trials=args.trials, outer_steps=args.outer_steps,
                     burn_in=args.burn_in, start=args.start, seed=args.seed)


def _fmt(x):
    return "-" if x is None else f"{x:.6g}"


def run(args) -> int:
    from quadratic.compare import cached_compare
    from theory.io import print_json

    cfg = _config(args)
    result, hit = cached_compare(cfg, progress=sys.stderr.isatty(), use_cache=not args.no_cache)
    if args.json:
        print_json(result)
        return 1 if result["diverged"] else 0
    o, i = result["effective"]["outer"], result["effective"]["inner"]
    s = result["summary"]
    print(f"{cfg.method} on {cfg.objective}: N={o['replicas']} n={o['group_size']} alpha={o['alpha']:g} "
          f"beta={o['beta']:g} gamma={o['gamma']:g} {o['momentum']} | inner {cfg.optimizer} lr={i['lr']:g} "
          f"({cfg.schedule}) H={i['steps']} sigma={i['noise']:g} | {cfg.trials} trials x {cfg.outer_steps} "
          f"outer steps{' (cached)' if hit else ''}")
    for note in result["scope"]:
        print(f"note: {note}")
    if result["diverged"]:
        d = result["diverged"]
        print(f"DIVERGED at outer step {d['step']}: {d['reason']}")
        print("violated theory conditions: " + (", ".join(d["violated_conditions"]) or
                                                 "none (the theory predicted stability)"))
        return 1
    print(f"{'quantity':<42} {'simulated':>12} {'+- se':>10} {'theory':>12} {'z':>7}")
    print(f"{'stationary spread (sum over coordinates)':<42} {_fmt(s['stationary_variance_mc']):>12} "
          f"{_fmt(s['stationary_variance_se']):>10} {_fmt(s['stationary_variance_window_theory']):>12} "
          f"{_fmt(s['z_score']):>7}")
    print(f"{'  closed-form stationary value':<42} {'':>12} {'':>10} {_fmt(s['stationary_variance_theory']):>12}")
    d = result.get("decay")
    if d and "ratio_mc" in d:
        print(f"{'variance decay per outer step':<42} {_fmt(d['ratio_mc']):>12} {_fmt(d['ratio_se']):>10} "
              f"{_fmt(d.get('ratio_theory')):>12} {_fmt(d.get('z_score')):>7}")
        print(f"{'  asymptotic decay factor (theory)':<42} {'':>12} {'':>10} "
              f"{_fmt(s['variance_decay_factor_theory']):>12}")
    tr = result["trajectories"]
    for step in sorted({1, min(10, len(tr["step"]) - 1), len(tr["step"]) - 1}):
        mc, se, th = (tr["mean_distance"][k][step][0] for k in ("mc", "se", "theory"))
        print(f"{f'mean distance, flattest direction, step {step}':<42} {mc:>12.6g} {se:>10.3g} {th:>12.6g}")
    print(f"{'final loss at the average weights':<42} {s['final_loss_at_mean']:>12.6g} "
          f"{s['final_loss_at_mean_se']:>10.3g}")
    return 0
