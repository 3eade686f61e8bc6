"""``noloco llm predict``: a run's weight_std predicted from the inputs measured in it, with no fitted constant
(noloco.advice.predict); with ``--forecast``, to the end of its schedule from its first outer steps, and with
``--as``, for another setting (noloco.advice.forecast). Reads files only: no torch."""

from __future__ import annotations


def add_parser(sub) -> None:
    pred = sub.add_parser("predict", help="a run's weight_std predicted from the inputs measured in it (no fitted "
                                          "constant); --forecast to the end of the run, --as for another setting",
                          description="Reads OUT/result.json, metrics.jsonl and inputs.jsonl (the per-step c, s2, rho "
                                      "and drift the trainer measures) and steps the theory's exact recursion "
                                      "(noloco.advice.predict). A run made before inputs.jsonl existed gets its measured "
                                      "growth and the decay factor at c = 0, not a predicted level. --forecast and "
                                      "--as give advice: their recipes and where they hold are in docs/advice.md.")
    pred.add_argument("out", metavar="OUT", help="a run folder written by `noloco llm train` (one method)")
    pred.add_argument("--noise-model", choices=("long-run", "lag1"), default="long-run",
                      help="how the measured residual becomes the theory's AR(1) noise: long-run (default): no "
                           "drift, rho matched to the variance of the residual's running sum; lag1: rho = lag-1 "
                           "correlation, plus the measured drift (both are in every row)")
    advice = pred.add_mutually_exclusive_group()
    advice.add_argument("--forecast", action="store_true",
                        help="forecast the spread to the run's last outer step from the steps measured so far (a run "
                             "that is still going works), with an 80 %% interval and flags where it is not sure")
    advice.add_argument("--as", dest="changes", metavar="CHANGES",
                        help="predict the spread of this run's setting with CHANGES (e.g. alpha=0.3,gamma=0.5 or "
                             "lr=2e-3,inner-steps=25,outer-steps=32; fields alpha beta gamma group-size replicas "
                             "momentum lr inner-steps outer-steps) from its measured inputs")
    advice.add_argument("--gap", action="store_true",
                        help="the loss the spread costs (replicas' mean loss minus the averaged model's) at the run's "
                             "checkpoint, predicted from Adam's second moment with nothing fitted, next to the "
                             "measured one (from the run's checkpoint, which needs torch, or from what "
                             "noloco.Observer wrote)")
    advice.add_argument("--fork", action="store_true",
                        help="OUT is a fork of a pilot (a few outer steps of another setting from the pilot's state): "
                             "predict that setting's spread over a whole run from the pilot and the fork "
                             "(docs/advice.md, 'One pilot')")
    pred.add_argument("--groups-luck", action="store_true",
                      help="how far the spread moves with the groups another seed draws: alone, this finished run's "
                           "measured inputs replayed along 32 other group sequences against its own; with --as, the "
                           "target's 80 %% range over them (docs/advice.md, 'The groups' luck'); N <= 16")
    pred.add_argument("--from-step", type=int, metavar="K",
                      help="with --forecast: use the first K measured outer steps only (default: every step measured "
                           "so far in a run still going; the first quarter of a finished run)")
    pred.add_argument("--groups-seed", type=int, metavar="S",
                      help="with --as: the seed the run's groups were drawn from, where its folder records none (the "
                           "pilot and the target are then stepped along their groups)")
    pred.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    pred.set_defaults(run=run)


def run(args) -> int:
    from noloco.infra.errors import ConfigError
    from noloco.infra.files import print_json

    if args.from_step is not None and not args.forecast:
        raise ConfigError("--from-step applies to --forecast only; add --forecast")
    if args.groups_luck and (args.gap or args.forecast or args.fork):
        raise ConfigError("--groups-luck goes alone or with --as; drop --forecast, --gap or --fork")
    if args.groups_seed is not None and args.changes is None:
        raise ConfigError("--groups-seed applies to --as only; add --as CHANGES")
    if args.groups_seed is not None and args.groups_seed < 0:
        raise ConfigError(f"--groups-seed {args.groups_seed}: a seed is an integer >= 0")
    if (args.gap or args.forecast or args.fork or args.groups_luck or args.changes is not None) and \
            args.noise_model != "long-run":
        raise ConfigError("--noise-model applies to the prediction of a run from its own inputs; drop it with "
                          "--forecast, --as, --gap or --groups-luck")
    if args.gap:
        import importlib.util

        from noloco.advice.gap import equipartition_gap, format_gap

        reader = None  # an observer's folder carries the second moment; a harness run's is in its checkpoint (torch)
        if importlib.util.find_spec("torch") is not None:
            from noloco.llm_check.adam_state import second_moment_root as reader
        report, text = equipartition_gap(args.out, reader), format_gap
    elif args.forecast:
        from noloco.advice.forecast import forecast, format_forecast

        report, text = forecast(args.out, from_step=args.from_step), format_forecast
    elif args.fork:
        from noloco.advice.fork import fork_spread, format_fork_spread

        report, text = fork_spread(args.out), format_fork_spread
    elif args.changes is not None:
        from noloco.advice.forecast import GROUPS_DRAWS, format_transfer, parse_changes, transfer
        from noloco.advice.predict import groups_seed
        from noloco.advice.record import read_run

        changes = parse_changes(args.changes)
        run = read_run(args.out)
        # the folder's own seed wins over --groups-seed: one that differs would be ignored, so it is refused
        recorded = groups_seed(run.setting)
        if None not in (args.groups_seed, recorded) and args.groups_seed != recorded:
            raise ConfigError(f"--groups-seed {args.groups_seed}: {run.folder} records its groups seed, "
                              f"{recorded}, which --as steps along; drop --groups-seed")
        report, text = transfer(run, seed=args.groups_seed, groups_draws=GROUPS_DRAWS if args.groups_luck else 0,
                                **changes), format_transfer
    elif args.groups_luck:
        from noloco.advice.forecast import format_groups_luck, groups_luck

        report, text = groups_luck(args.out), format_groups_luck
    else:
        from noloco.advice.predict import format_predict, predict

        report, text = predict(args.out, noise_model=args.noise_model), format_predict
    print_json(report.to_json() if hasattr(report, "to_json") else report) if args.json else print(text(report))
    return 0
