"""The table of ``noloco llm study``'s studies: one row per study with its name, its module, its help and its
flags, and how the parsed flags call the module. :mod:`noloco.cli.llm_study` builds one parser per row and
runs the chosen row; a new study is one row here (and, when its call is not one of the shapes below, one small
function)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

_JSON = (("--json",), {"action": "store_true", "help": "print the JSON report"})
_NO_TRAIN = (("--no-train",), {"action": "store_true", "help": "evaluate only (every run must exist)"})
_NEEDS_HF = " Needs transformers."
_FRESH_SEED = (("--fresh-seed",), {"type": int, "metavar": "SEED", "help": "instead: judge the finished runs of this "
                                   "seed in the folder (trains nothing), under the module's second-round rule"})


@dataclass(frozen=True)
class Study:
    name: str
    module: str  #: the module that runs it: its ``run_study`` and ``format_report``
    help: str
    description: str
    flags: tuple  #: ``(names, argparse keywords)`` for each flag, in --help's order
    call: Callable  #: ``(module, args) -> exit status``
    needs: str = ""  #: what needs transformers, checked before the module is imported ("": nothing)


def show(args, report, format_report: Callable) -> int:
    """A study's report (a dict or a typed record): JSON with --json, else its table; exit status 0."""
    from noloco.infra.files import print_json

    print_json(report.to_json() if hasattr(report, "to_json") else report) if args.json else print(format_report(report))
    return 0


def _folder(flag: str, default: str, reuse: bool = True) -> tuple:
    """The flags of a study that trains its runs in a folder (``reuse``: only what is missing, or with
    --no-train none) and evaluates them."""
    folder = ((flag,), {"default": default, "help": f"folder of the runs (default {default})"})
    return (folder, _NO_TRAIN, _JSON) if reuse else (folder, _JSON)


def _seed_pair(text: str) -> tuple[int, int]:
    """``S1,S2`` (a tuner's ``PILOT,JUDGED``): two different non-negative seeds."""
    import argparse

    try:
        pilot, judged = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two seeds S1,S2, got {text!r}") from None
    if pilot < 0 or judged < 0 or pilot == judged:
        raise argparse.ArgumentTypeError(f"expected two different non-negative seeds, got {text!r}")
    return pilot, judged


def _seeds(default: tuple[int, int], metavar: str, what: str) -> tuple:
    """The --seeds flag of a study judged on two seeds (default ``default``)."""
    return (("--seeds",), {"type": _seed_pair, "default": default, "metavar": metavar,
                           "help": f"{what} (default {default[0]},{default[1]})"})


def _evaluate(m, a) -> int:
    """A folder study: trains what is missing (none with --no-train) and prints its report."""
    return show(a, m.run_study(a.out, train=not a.no_train), m.format_report)


def _evaluate_seeds(m, a) -> int:
    """:func:`_evaluate` for the seeds of --seeds."""
    return show(a, m.run_study(a.out, train=not a.no_train, seeds=a.seeds), m.format_report)


def _seeded(name: str, default_out: str) -> Study:
    """routing and paper: trained for several seeds, finished runs reused; help from the module's docstring."""
    from importlib import import_module

    module = import_module(f"noloco.studies.{name}")
    summary = module.__doc__.split("\n\n")[0].replace("``", "")
    n = len(module.SEEDS)
    flags = (
        (("--out",), {"default": default_out,
                      "help": f"run folder (default {default_out}); finished runs with the same settings are reused"}),
        (("--seeds",), {"type": int, "default": n, "help": f"number of seeds, at least 2 (default {n})"}),
        (("--quick",), {"action": "store_true", "help": "a tiny version of the study (a smoke test)"}),
        (("--threads",), {"type": int, "default": 1, "help": "torch CPU threads per run (default 1)"}),
        (("--json",), {"action": "store_true", "help": "print the JSON report instead of the tables"}),
    )
    return Study(name, module.__name__, summary, summary, flags, _run_seeded)


def _run_seeded(m, a) -> int:
    from noloco.infra.entry import interrupted
    from noloco.infra.errors import ConfigError
    from noloco.llm_check.config import check_threads

    if a.seeds < 2:
        raise ConfigError(f"--seeds {a.seeds}: at least 2 seeds are needed for a standard error")
    check_threads(a.threads)
    try:
        report = m.run_study(a.out, seeds=tuple(range(a.seeds)), quick=a.quick, threads=a.threads)
    except KeyboardInterrupt as err:
        raise interrupted(err, "finished runs are kept and reused by the same command") from None
    return show(a, report, m.format_report)


def _advice(m, a) -> int:
    if a.development:
        return show(a, m.run_development(a.development), m.format_development)
    return show(a, m.run_holdout(a.runs, train=not a.no_train), m.format_report)


def _tune(m, a) -> int:
    from pathlib import Path

    return show(a, m.run_study(Path(a.pilots), Path(a.runs)), m.format_report)


def _families(m, a) -> int:
    if a.rank_run is None:
        return _evaluate(m, a)
    from noloco.infra.checks import check_choice

    m.rank_run(check_choice("rank_run", a.rank_run, tuple(m.FAMILIES)), a.seed, a.out)
    return 0


def _warnings(m, a) -> int:
    if a.replay:
        from noloco.infra.files import input_dir

        return show(a, m.replay_study(input_dir(a.replay, "--replay")), m.format_replay)
    report = m.run_study(a.out, train_runs=not a.no_train)
    show(a, report, m.format_report)
    if not m.ok(report):  # why the exit status is 1, on stderr: --json's stdout stays pure JSON
        s = report.summary
        print(f"noloco llm study warnings: {s.false_alarms} false alarm(s) on {s.clean_runs} clean runs, "
              f"{s.faults - s.caught} of {s.faults} planted faults not caught", file=sys.stderr)
    return 0 if m.ok(report) else 1


def _comm(m, a) -> int:
    data, out = m.measure_to_file(a.out, a.ranks, a.sizes, a.repeats)
    show(a, data, m.format_table)
    print(f"wrote {out}", file=sys.stderr if a.json else sys.stdout)
    return 0


def table() -> tuple[Study, ...]:
    """Every study, in --help's order (routing's and paper's help and comm's defaults are read from their
    modules, so building the table imports them)."""
    from noloco.llm_check.comm_measure import DEFAULT_OUT, DEFAULT_SIZES

    return (
        _seeded("routing", "runs/routing"),
        _seeded("paper", "runs/paper-study"),
        Study("advice", "noloco.studies.advice", "the advice's held-out evaluation (docs/advice.md)",
              "Trains what is missing of the held-out runs, then evaluates the forecasts and transfers under the "
              "rule fixed before them.",
              ((("--runs",), {"default": "runs/advice-holdout", "help": "folder of the runs (default runs/advice-holdout)"}),
               _NO_TRAIN,
               (("--development",), {"metavar": "DIR", "help": "instead: the forecasts and transfers of the development "
                                     "sweep's runs DIR/SETTING/sSEED (pilot DIR/const_h10), written to "
                                     "DIR/advice_development.json"}),
               _JSON), _advice),
        Study("tune", "noloco.studies.tune",
              "the tuner's held-out check (docs/advice.md, 'The tuner from pilot runs, held out')",
              "Tunes from the development sweep, trains the recommended and reference settings with new seeds and "
              "judges the three rules fixed before.",
              ((("--pilots",), {"required": True, "help": "the development sweep's runs (SETTING/sSEED folders)"}),
               (("--runs",), {"required": True, "help": "where the held-out runs go (finished ones are reused)"}),
               _JSON), _tune),
        Study("families", "noloco.studies.families",
              "the advice on model families it was not fitted on (a Hugging Face GPT-2 and a Llama-style config, "
              "cpu-tiny)",
              "Trains each family's pilot and target runs through the public API (finished runs are reused) and "
              "judges the own-input prediction, the forecast, the transfer and the gap under the rules fixed in "
              "noloco/studies/families.py before the runs." + _NEEDS_HF,
              _folder("--out", "runs/families") + (
                  (("--rank-run",), {"metavar": "FAMILY", "help": "instead: be one rank of FAMILY's run under "
                                     "torchrun, written to --out (the study starts `torchrun --nproc-per-node 4 -m "
                                     "noloco llm study families --rank-run gpt2 ...` itself)"}),
                  (("--seed",), {"type": int, "default": 0, "help": "with --rank-run: the run's seed (default 0)"})),
              _families),
        Study("forecasts", "noloco.studies.forecasts",
              "the forecast's flags calibrated on the model families (docs/advice.md)",
              "Trains what is missing of the families' runs (the families study's layout, finished runs reused), "
              "forecasts each from outer steps 8 to 24 and chooses the flags' limits; with --fresh-seed, judges a "
              "seed's finished runs under noloco/studies/forecasts.py's rule." + _NEEDS_HF,
              (*_folder("--runs", "runs/families"), _FRESH_SEED),
              lambda m, a: show(a, m.run_study(a.runs, train=not a.no_train, fresh_seed=a.fresh_seed),
                                m.format_report)),
        Study("gap", "noloco.studies.gap_check", "--gap split by tensor on Llama and GPT-2 at N = 8 (docs/advice.md)",
              "Trains Llama and GPT-2 configs at N = 8 (about 4 minutes each here) and splits the predicted and the "
              "measured loss gap by tensor." + _NEEDS_HF,
              (*_folder("--out", "runs/gap-check", reuse=False), _FRESH_SEED),
              lambda m, a: show(a, m.run_study(a.out, fresh_seed=a.fresh_seed), m.format_report),
              needs="the gap check's model families"),
        Study("gap-range", "noloco.studies.gap_range",
              "--gap's printed range on Observer run folders at N 4 and 8, judged on fresh runs (docs/advice.md)",
              "Trains cpu-tiny, the Llama-style, GPT-NeoX and GPT-2 configs at N 4 and 8, groups seeds 160 to 167 "
              "(finished runs reused: 128 runs), and judges --gap's printed range under the rule of "
              "noloco/studies/gap_range.py. --development DIR,... instead sets the range from every finished run "
              "under those folders (nothing trained; OUT/gap_range_dev.json); --replication the second rule, N 4 "
              "judged again (groups seeds 200 to 215, 128 runs; OUT/gap_range_n4.json)." + _NEEDS_HF,
              (*_folder("--out", "runs/gap-range"),
               (("--development",), {"metavar": "DIR,...", "type": lambda s: s.split(","),
                                     "help": "instead: the ranges of every finished run under these folders"}),
               (("--replication",), {"action": "store_true", "help": "instead: the second rule's N 4 runs"})),
              lambda m, a: show(a, m.run_study(a.out, train=not a.no_train, development_folders=a.development,
                                               replication=a.replication), m.format_report),
              needs="the gap range's model families"),
        Study("held-out-axes", "noloco.studies.held_out_axes",
              "--as along every axis, both directions, on GPT-NeoX and GPT-2 (held out; docs/advice.md)",
              "Trains the GPT-NeoX and GPT-2 configs at the one-pilot study's 11 settings, groups seeds 170 to 175 "
              "(finished runs reused: 132 runs), and judges --as's 144 one-axis transfers under the rule of "
              "noloco/studies/held_out_axes.py." + _NEEDS_HF,
              _folder("--out", "runs/held-out-axes"), _evaluate),
        Study("short-phase", "noloco.studies.short_phase",
              "--as from H 10 to a phase shorter than Adam's memory (H 5), claimed since this study (docs/advice.md)",
              "Trains the one-pilot study's pilot and its H 5 setting on cpu-tiny, the Llama-style, GPT-NeoX and "
              "GPT-2 configs, groups seeds 190 to 197 (finished runs reused: 64 runs), and judges --as's 32 "
              "transfers to H 5 under the rule of noloco/studies/short_phase.py." + _NEEDS_HF,
              _folder("--out", "runs/short-phase"), _evaluate),
        Study("warnings", "noloco.studies.warnings",
              "the early warnings on clean runs of several model families and on planted faults (docs/own_run.md)",
              "Trains what is missing of the clean and faulty runs (five model families, 12 outer steps each, 16 at "
              "H 5, and 40 whole runs; finished runs reused) and counts the observer's false alarms and the faults it caught. "
              "Exit 1 on a false alarm or a fault not caught. --replay DIR instead re-checks every finished run "
              "under DIR at today's unstable checks, from its inputs.jsonl (nothing trained; DIR/warnings_replayed.json)." + _NEEDS_HF,
              (*_folder("--out", "runs/warnings"),
               (("--replay",), {"metavar": "DIR", "help": "re-check the finished runs under DIR at today's checks"})),
              _warnings, needs="the warnings study's model families"),
        Study("one-pilot", "noloco.studies.one_pilot",
              "advice from one pilot and its forks, checked by brute force (every outer axis both ways; the tuner "
              "on a grid of 29 settings)",
              "Trains each family's pilot with its forks and every setting whole (finished runs are reused) and "
              "judges the transfers and the tuner under the rules of docs/advice.md, 'One pilot'." + _NEEDS_HF,
              _folder("--out", "runs/one-pilot"), _evaluate),
        Study("transfers", "noloco.studies.transfers",
              "--as along every outer axis on fresh seeds (docs/advice.md, 'One pilot')",
              "Trains the pilot and every axis target of the one-pilot study for seeds 3 and 4 of cpu-tiny and the "
              "Llama-style config (its layout, finished runs reused) and judges --as under the rules of "
              "noloco/studies/transfers.py (with --fresh-seed: a seed's grid, along alpha, beta, gamma and H)."
              + _NEEDS_HF,
              (*_folder("--out", "runs/one-pilot"), _FRESH_SEED),
              lambda m, a: show(a, m.run_study(a.out, train=not a.no_train, fresh_seed=a.fresh_seed),
                                m.format_report)),
        Study("transfer-groups", "noloco.studies.transfer_groups",
              "--as along N and n on fresh seeds, stepped along the runs' groups (docs/advice.md, 'One pilot')",
              "Trains the pilot, N 8 and N 8 with groups of 4 for seeds 7 and 8 of cpu-tiny and the Llama-style config "
              "(the one-pilot study's layout, finished runs reused) and judges --as along N and n under the rules of "
              "noloco/studies/transfer_groups.py." + _NEEDS_HF,
              (*_folder("--out", "runs/one-pilot"), _seeds((7, 8), "S1,S2", "the two seeds trained and judged")),
              _evaluate_seeds),
        Study("luck", "noloco.studies.luck",
              "a run's own luck: one setting over six data orders at one groups seed, the floor under --as "
              "(docs/advice.md, 'The floor')",
              "Trains the pilot and its H 20, H 5, alpha 0.7 and beta 0.9 targets of cpu-tiny and the Llama-style "
              "config with six data orders and one groups seed (finished runs reused) and judges --as against the "
              "runs' own spread under the rule of noloco/studies/luck.py." + _NEEDS_HF,
              _folder("--out", "runs/luck"), _evaluate),
        Study("setting-mean", "noloco.studies.setting_mean",
              "--as along every axis in both directions against the target setting's mean over six data orders, at "
              "fresh groups seeds 30 and 31 (docs/advice.md, 'Against the setting's mean')",
              "Trains the pilot and its twelve transfers' settings of cpu-tiny and the Llama-style config with six "
              "data orders at groups seeds 30 and 31 (finished runs reused) and judges --as against the target "
              "setting's mean under the rule of noloco/studies/setting_mean.py." + _NEEDS_HF,
              _folder("--out", "runs/setting-mean"), _evaluate),
        Study("groups-luck", "noloco.studies.groups_luck",
              "a run's groups luck: seven settings over eight groups seeds at one data order, measured and as the "
              "theory predicts it (docs/advice.md, 'The groups' luck')",
              "Trains seven settings of cpu-tiny and the Llama-style config at groups seeds 40 to 47, 100 to 107 and "
              "110 to 117, and the pilot with four targets at 50 to 57 and 90 to 97, and with GPT-NeoX and GPT-2 at "
              "180 to 187 (finished runs reused: 656 runs), and judges the theory's groups luck, --as --groups-luck's "
              "range and --as's interval under the rules of noloco/studies/groups_luck.py." + _NEEDS_HF,
              _folder("--out", "runs/groups-luck"), _evaluate),
        Study("as-misses", "noloco.studies.as_misses",
              "what makes --as miss along H up, and the mend on GPT-NeoX (docs/advice.md)",
              "Trains the pilot with other run lengths of cpu-tiny and the Llama-style config at groups seeds 120 to "
              "147, and GPT-NeoX at 150 to 157, in the groups-luck study's layout (finished runs reused: 280 runs), "
              "and judges the rules of noloco/studies/as_misses.py." + _NEEDS_HF,
              _folder("--out", "runs/groups-luck"), _evaluate),
        Study("tune-fresh", "noloco.studies.tune_fresh",
              "the tuner from one pilot on fresh seeds 5 and 6 (docs/advice.md, 'One pilot')",
              "Trains each family's seed-5 pilot with its forks and the 29 settings whole with seed 6 (the one-pilot "
              "study's layout, finished runs reused) and judges the tuner's pick under the rule of "
              "noloco/studies/tune_fresh.py." + _NEEDS_HF,
              (*_folder("--out", "runs/one-pilot"), _seeds((5, 6), "PILOT,JUDGED", "the pilot's seed and the grid's")),
              _evaluate_seeds),
        Study("comm", "noloco.llm_check.comm_measure", "gloo all-reduce and point-to-point times on this machine",
              "Times gloo's collectives and group exchanges between processes on this machine and fits the comm "
              "model's latency and bandwidth.",
              ((("--out",), {"default": DEFAULT_OUT, "help": f"JSON output path (default {DEFAULT_OUT})"}),
               (("--ranks",), {"default": "2,3,4,5,6,7,8", "help": "comma-separated process counts >= 2 (include 2)"}),
               (("--sizes",), {"default": ",".join(map(str, DEFAULT_SIZES)),
                               "help": "comma-separated payload sizes in bytes >= 4 (default 1 KiB .. 64 MiB, x4)"}),
               (("--repeats",), {"type": int, "default": 20,
                                 "help": "repetitions at 1 KiB (>= 3); fewer at larger sizes"}),
               (("--json",), {"action": "store_true",
                              "help": "print the JSON report (the file's content) instead of the table"})), _comm),
    )
