"""``noloco llm tune PILOT ...``: which outer setting to run, ranked from measured pilot runs of the real model
for a goal (time to the reference's loss with the comm model's synchronisation cost, or loss at equal tokens)
under spread and stability constraints (noloco.advice.tune). Reads files only: no torch."""

from __future__ import annotations


def add_parser(sub) -> None:
    from noloco.theory.comm import INTERNET

    tune = sub.add_parser("tune", help="recommend (alpha, beta, gamma, n, H) from pilot runs of your model, for a goal "
                                       "(time to a loss with the network's cost, or loss at equal tokens)",
                          description="Ranks the settings that pilot runs measured (folders written by `noloco llm "
                                      "train`, any number of seeds each; runs of one setting are grouped) against a "
                                      "reference setting: by wall time to the reference's final validation loss, "
                                      "where every H inner steps cost one synchronisation from the comm model, or by "
                                      "the loss at equal tokens. Pilots that differ from the reference in anything "
                                      "but the outer setting and H are shown and excluded. Recommends only what was "
                                      "piloted (docs/advice.md, 'The tuner from pilot runs, held out', says how it held).")
    tune.add_argument("pilots", nargs="+", metavar="PILOT",
                      help="a run folder, or a folder holding run folders (up to three levels down)")
    tune.add_argument("--reference", metavar="SETTING",
                      help="the setting to beat: its name (the folder above sSEED) or one of its run folders "
                           "(default: the first pilot's)")
    tune.add_argument("--goal", choices=("time", "loss"), default="time",
                      help="time (default): wall time to the reference's final loss; loss: final loss at equal tokens")
    tune.add_argument("--target-loss", type=float, metavar="L",
                      help="the validation loss to reach (default: the reference's, mean of its last evaluations)")
    tune.add_argument("--latency", type=float, default=INTERNET.latency,
                      help="one-way latency per message in seconds (default 0.05, internet-like; as noloco comm)")
    tune.add_argument("--bandwidth", type=float, default=1e9, help="bits per second per replica (default 1e9)")
    tune.add_argument("--bytes-per-value", type=float, default=2.0,
                      help="bytes per parameter sent (default 2, bf16)")
    tune.add_argument("--compute-seconds", type=float, metavar="S",
                      help="seconds of compute per inner step on your hardware (default: the reference pilots' "
                           "measured wall time per inner step)")
    tune.add_argument("--max-spread", type=float, metavar="S",
                      help="largest weight_std (RMS over the second half) allowed (default: none)")
    tune.add_argument("--forks", action="store_true",
                      help="one pilot instead of many: PILOT is a folder of the pilot's forks (a few outer steps of "
                           "each candidate setting from the pilot's state, docs/advice.md 'One pilot'); ranks every "
                           "forked setting by its predicted final loss, with an interval, spread and wall time")
    tune.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    tune.set_defaults(run=run)


def run(args) -> int:
    from noloco.infra.entry import failed
    from noloco.infra.files import print_json
    from noloco.advice.tune import format_tune, format_tune_forks, tune, tune_forks

    if args.forks:
        from noloco.infra.errors import ConfigError

        if len(args.pilots) != 1 or args.reference or args.goal != "time" or args.target_loss is not None:
            raise ConfigError("--forks takes one folder (the pilot's forks) and ranks by final loss: drop --reference, "
                              "--goal and --target-loss")
        report = tune_forks(args.pilots[0], args.latency, args.bandwidth, args.compute_seconds, args.bytes_per_value,
                            args.max_spread)
        print_json(report.to_json()) if args.json else print(format_tune_forks(report))
        return 0 if report.recommendation is not None else 1
    report = tune(args.pilots, args.reference, args.goal, args.target_loss, args.latency, args.bandwidth,
                  args.compute_seconds, args.bytes_per_value, args.max_spread)
    print_json(report.to_json()) if args.json else print(format_tune(report))
    if report.recommendation is None:
        excluded = sorted({why for row in report.rows for why in row.excluded})
        return failed("no piloted setting meets the goal and the constraints"
                      + (f" (excluded: {'; '.join(excluded)})" if excluded else ""))
    return 0
