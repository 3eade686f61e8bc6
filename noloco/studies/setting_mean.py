"""``--as`` judged against what it can know: the target setting's mean over data orders, along every axis in both
directions, at fresh groups seeds (``noloco llm study setting-mean``).

The luck study (:mod:`noloco.studies.luck`) showed that along H a single target run moves with its data order by
about as much as ``--as`` errs (0.041 to 0.069 in log), and that the pilot's luck does not carry over along H: a
prediction from one run of another cannot hold 15 % on every single run there. What a prediction can know is the
setting's spread, the mean over the data orders a user might draw. The rule, written and committed before any of
these runs was trained:

* the runs: cpu-tiny and the Llama-style config (the one-pilot study's models and schedule); every setting of
  :data:`noloco.studies.one_pilot.TRANSFERS` (the pilot N 4, pairs, alpha 0.5, beta 0.7, gamma 0.7, H 10; alpha
  0.3 and 0.7, beta 0.5 and 0.9, gamma 0.35 and 1, H 5 and 20 at equal tokens, N 8 with pairs, N 8 with groups of
  4), each trained whole with the six data orders of :data:`noloco.studies.luck.DATA_SEEDS` at each of the groups
  seeds :data:`GROUPS_SEEDS` (never trained before this rule: fresh), ``DIR/gG/FAMILY/SETTING/sD``;
* a run's measure: its RMS weight_std over the second half, as every transfer is judged; a setting's mean: the
  geometric mean of its six data orders' measures (one family, one groups seed);
* the predictions: ``--as`` from the pilot of each data order to the target setting, for the twelve transfers of
  TRANSFERS (both directions of alpha, beta, gamma, H, N and n), along the recorded groups, as a user runs it:
  24 per transfer (2 families x 2 groups seeds x 6 data orders), 288 in all;
* **the setting-mean rule**: a claimed prediction (no flag) holds when it is within 15 % of the target setting's
  mean. The goal, per transfer: none of the claimed outside, most claimed;
* reported beside, unchanged: the single-run rule (within 15 % of the target of the same data order), the share of
  the target's own runs outside 15 % of the mean of its other five (the luck), and how many single targets lie
  inside the 80 % interval ``--as`` prints (:func:`noloco.advice.forecast.transfer_interval`).

Expected: along H the single-run rule misses about as often as the luck alone does, the setting-mean rule none.

The tuner against the settings' means (a second rule, written and committed before any run of the grid was trained
and before any run's loss above was read). The tuner's one miss in 14 (cpu-tiny, pilot seed 18, judged on seed 26:
0.0821 nats above the grid's best against a half-width of 0.0819) was judged against single runs, whose final loss
moves 0.035 to 0.047 nats with the data order, and the best of 29 single runs is the luckiest of them. The runs: for
cpu-tiny and the Llama-style config, the 29 settings of :data:`noloco.studies.one_pilot.JUDGED` trained whole with
the six data orders at groups seed :data:`TUNER_GROUPS_SEED` (the settings above reused), and the pilot of seed
:data:`TUNER_PILOT_SEED` with its forks (``DIR/pilot``, the one-pilot study's layout). A setting's loss: the mean
over its six data orders of the final validation loss. The pick (``noloco llm tune FORKS --forks``) **holds** when its
setting's loss is below the median of the 29 settings' and within its stated interval's upper half-width of the
best of them (:func:`noloco.studies.one_pilot.judge_pick` on the means). Reported beside: the same judgement against
each data order's 29 single runs (six per family).

Judged (docs/data/setting_mean.json): against the setting's mean 13 of 216 claimed predictions outside 15 %, against
the same data order's run 8 (all cpu-tiny): a prediction carries its pilot's luck, which the same data order's target
mostly shares, so the mean is no easier a target; the expectation above is refuted. The tuner held against the
means on both families, and on 11 of 12 single data orders.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from noloco.infra.errors import DataError
from noloco.infra.record import JsonRecord
from noloco.studies import families as F
from noloco.studies import luck, one_pilot
from noloco.studies.luck import folder_study, groups_folder
from noloco.studies.forecasts import _rms
from noloco.studies.one_pilot_rows import PickJudgement
from noloco.studies.transfers import as_row

FAMILIES = one_pilot.FAMILIES
TRANSFERS = one_pilot.TRANSFERS
NAMES = tuple(dict.fromkeys(name for pilot, target, _ in TRANSFERS for name in (pilot, target)))
DATA_SEEDS = luck.DATA_SEEDS
GROUPS_SEEDS = (30, 31)
TUNER_GROUPS_SEED, TUNER_PILOT_SEED = 30, 18
SPREAD_RULE = one_pilot.SPREAD_RULE


def train_missing(out, families=FAMILIES, groups_seeds=GROUPS_SEEDS, tuner: bool = True,
                  progress: bool | None = None) -> None:
    """Train every run of the study not finished in ``out`` (``tuner``: the tuner's grid and pilot too)."""
    for groups_seed in groups_seeds:
        luck.train_data_orders(groups_folder(out, groups_seed), families, NAMES, DATA_SEEDS, groups_seed,
                               progress=progress)
    if tuner:
        luck.train_data_orders(groups_folder(out, TUNER_GROUPS_SEED), families, one_pilot.JUDGED, DATA_SEEDS,
                               TUNER_GROUPS_SEED, progress=progress)
        for family in families:
            one_pilot.train_pilot(pilot_folder(out), family, TUNER_PILOT_SEED)


def pilot_folder(out) -> Path:
    """Where the tuner's pilot and its forks live (the one-pilot study's layout below it)."""
    return Path(out) / "pilot"


@dataclass(frozen=True)
class MeanRun(JsonRecord):
    """One run's measure: its second-half RMS weight_std."""

    family: str
    groups_seed: int
    setting: str
    data_seed: int
    measured: float


@dataclass(frozen=True)
class MeanPrediction(JsonRecord):
    """One ``--as`` prediction from the pilot of ``data_seed``: against the target of the same data order
    (``single_ratio``) and against the target setting's mean over its data orders (``mean_ratio``); whether the
    single target lies inside the printed 80 % interval."""

    family: str
    groups_seed: int
    data_seed: int
    axis: str
    pilot: str
    target: str
    predicted: float
    setting_mean: float
    single_ratio: float
    mean_ratio: float
    flags: list
    inside: bool


@dataclass(frozen=True)
class AxisJudgement(JsonRecord):
    """One transfer's counts: predictions, claimed, claimed within 15 % of the setting's mean and outside it (the
    rule), the same under the single-run rule, the target runs outside 15 % of their other data orders' mean (the
    luck), single targets inside the 80 % interval, and the RMS log error against the mean and the single run."""

    axis: str
    pilot: str
    target: str
    predictions: int
    claimed: int
    mean_within: int
    mean_missed: int
    single_within: int
    single_missed: int
    luck_outside: int
    inside: int
    mean_rms: float
    single_rms: float


@dataclass(frozen=True)
class GridLoss(JsonRecord):
    """One run of the tuner's grid: its averaged model's final validation loss."""

    family: str
    setting: str
    data_seed: int
    loss: float


@dataclass(frozen=True)
class TunerAgainst(JsonRecord):
    """The tuner's pick for one family judged against the 29 settings' mean losses (``against`` "mean") or one data
    order's single runs (``against`` the data seed)."""

    NESTED = {"judgement": PickJudgement}

    family: str
    against: str
    judgement: PickJudgement


@dataclass(frozen=True)
class SettingMeanReport(JsonRecord):
    """``setting_mean.json``: every run's measure, every prediction and each transfer's judgement; the tuner's pick
    against the settings' means and against each data order."""

    NESTED = {"runs": (list, MeanRun), "predictions": (list, MeanPrediction), "axes": (list, AxisJudgement),
              "grid": (list, GridLoss), "tuner": (list, TunerAgainst)}
    OPTIONAL_KEYS = ("grid", "tuner")

    schema: str
    groups_seeds: list
    data_seeds: list
    rule: str
    runs: list
    predictions: list
    axes: list
    grid: Optional[list] = None
    tuner: Optional[list] = None


RULE = (f"a claimed --as prediction holds when within {SPREAD_RULE:.0%} of the target setting's mean (the geometric "
        "mean over its six data orders of the second-half RMS weight_std); a flagged one is not claimed")


def _within(ratio: float) -> bool:
    return bool(F.within(ratio, SPREAD_RULE, relative=True))


def setting_measures(out, family: str, name: str) -> dict[int, float]:
    """``{data seed: second-half RMS weight_std}`` of one setting (every run finished)."""
    found = {}
    for d in DATA_SEEDS:
        path = one_pilot.folder(out, family, name, d)
        if not one_pilot.finished(path):
            raise DataError(f"{path}: not a finished run (train it: noloco llm study setting-mean --out "
                            f"{Path(out).parent})")
        found[d] = one_pilot._measured(path)[1]
    return found


def setting_means(runs: list[MeanRun]) -> dict:
    """``{(family, groups seed, setting): the geometric mean of its data orders' measures}``."""
    logs: dict = {}
    for r in runs:
        logs.setdefault((r.family, r.groups_seed, r.setting), []).append(math.log(r.measured))
    return {key: math.exp(float(np.mean(v))) for key, v in logs.items()}


def luck_outside(runs: list[MeanRun]) -> dict:
    """Per setting, its runs outside 15 % of the mean of their other data orders (one family and groups seed)."""
    by: dict = {}
    for r in runs:
        by.setdefault((r.family, r.groups_seed, r.setting), {})[r.data_seed] = math.log(r.measured)
    out = dict.fromkeys(NAMES, 0)
    for (_, _, name), logs in by.items():
        out[name] += sum(not _within(math.exp(e)) for e in luck._leave_one_out(logs).values())
    return out


def predictions(out, groups_seed: int, means: dict, families=FAMILIES) -> list[MeanPrediction]:
    """Every prediction of one groups seed's folder ``out`` (its runs all finished), against ``means``
    (:func:`setting_means`)."""
    rows = []
    for family in families:
        for pilot, target, axis in TRANSFERS:
            mean = means[family, groups_seed, target]
            for d in DATA_SEEDS:
                row = as_row(out, family, d, pilot, target, axis)
                if row is None:
                    raise DataError(f"{out}: {family} {pilot} or {target} of data order {d} is not finished")
                predicted = row.as_ratio * row.measured
                lo, hi = _interval(out, family, pilot, target, d, bool(row.as_flags))
                rows.append(MeanPrediction(family=family, groups_seed=groups_seed, data_seed=d, axis=axis,
                                           pilot=pilot, target=target, predicted=predicted, setting_mean=mean,
                                           single_ratio=row.as_ratio, mean_ratio=predicted / mean, flags=row.as_flags,
                                           inside=lo <= row.as_ratio <= hi))
    return rows


def _interval(out, family: str, pilot: str, target: str, d: int, flagged: bool) -> tuple[float, float]:
    """The 80 % interval ``--as`` printed for this transfer (the target's setting derived as ``transfer`` does)."""
    from noloco.advice.forecast import transfer_interval
    from noloco.advice.record import read_run

    setting = read_run(one_pilot.folder(out, family, pilot, d)).setting
    return transfer_interval(setting, setting.changed(**one_pilot._changes(pilot, target)), flagged)[0]


def judge(rows: list[MeanPrediction], luck_outside: dict) -> list[AxisJudgement]:
    """Per transfer of :data:`TRANSFERS` with predictions: the counts of :class:`AxisJudgement` (``luck_outside``:
    target setting -> its runs outside 15 % of their other data orders' mean)."""
    out = []
    for pilot, target, axis in TRANSFERS:
        sel = [r for r in rows if (r.pilot, r.target) == (pilot, target)]
        if not sel:
            continue
        claimed = [r for r in sel if not r.flags]
        out.append(AxisJudgement(
            axis=axis, pilot=pilot, target=target, predictions=len(sel), claimed=len(claimed),
            mean_within=sum(_within(r.mean_ratio) for r in claimed),
            mean_missed=sum(not _within(r.mean_ratio) for r in claimed),
            single_within=sum(_within(r.single_ratio) for r in claimed),
            single_missed=sum(not _within(r.single_ratio) for r in claimed),
            luck_outside=luck_outside[target], inside=sum(r.inside for r in sel),
            mean_rms=_rms([math.log(r.mean_ratio) for r in sel]),
            single_rms=_rms([math.log(r.single_ratio) for r in sel])))
    return out


def evaluate(out, families=FAMILIES, groups_seeds=GROUPS_SEEDS, tuner: bool = True) -> SettingMeanReport:
    """The report of the finished runs in ``out`` (every one must exist: :func:`train_missing`; ``tuner``: the
    tuner's judgements too)."""
    runs = [MeanRun(family=family, groups_seed=g, setting=name, data_seed=d, measured=v)
            for g in groups_seeds for family in families for name in NAMES
            for d, v in setting_measures(groups_folder(out, g), family, name).items()]
    means = setting_means(runs)
    rows = [p for g in groups_seeds for p in predictions(groups_folder(out, g), g, means, families)]
    grid = grid_losses(out, families) if tuner else None
    return SettingMeanReport(schema="noloco.setting_mean/1", groups_seeds=list(groups_seeds),
                             data_seeds=list(DATA_SEEDS), rule=RULE, runs=runs, predictions=rows,
                             axes=judge(rows, luck_outside(runs)),
                             grid=grid, tuner=tuner_judgements(out, grid, families) if grid else None)


def grid_losses(out, families=FAMILIES) -> list[GridLoss]:
    """Every run of the tuner's grid (all finished) with its final validation loss."""
    rows = []
    for family in families:
        for name in one_pilot.JUDGED:
            for d in DATA_SEEDS:
                path = one_pilot.folder(groups_folder(out, TUNER_GROUPS_SEED), family, name, d)
                if not one_pilot.finished(path):
                    raise DataError(f"{path}: not a finished run (train it: noloco llm study setting-mean --out {out})")
                rows.append(GridLoss(family=family, setting=name, data_seed=d, loss=one_pilot._measured(path)[0]))
    return rows


def mean_losses(grid: list[GridLoss], family: str) -> dict[str, float]:
    """``{setting: its mean final loss over the data orders}`` of one family's grid."""
    by: dict = {}
    for r in grid:
        if r.family == family:
            by.setdefault(r.setting, []).append(r.loss)
    return {name: float(np.mean(v)) for name, v in by.items()}


def tuner_judgements(out, grid: list[GridLoss], families=FAMILIES) -> list[TunerAgainst]:
    """Per family, the tuner's pick from the pilot's forks against the settings' mean final losses and against each
    data order's (the second rule in the module docstring; every fork finished)."""
    from noloco.advice.tune import tune_forks

    rows = []
    for family in families:
        forks = pilot_folder(out) / family / f"forks-s{TUNER_PILOT_SEED}"
        if not all(one_pilot.fork_done(one_pilot.fork_folder(pilot_folder(out), family, n, TUNER_PILOT_SEED), n)
                   for n in one_pilot.FORKED):
            raise DataError(f"{forks}: the pilot's forks are not all finished (train them: noloco llm study "
                            f"setting-mean --out {out})")
        report = tune_forks(forks)
        rows.append(TunerAgainst(family=family, against="mean",
                                 judgement=one_pilot.judge_pick(report, mean_losses(grid, family))))
        rows += [TunerAgainst(family=family, against=str(d), judgement=one_pilot.judge_pick(
                     report, {r.setting: r.loss for r in grid if (r.family, r.data_seed) == (family, d)}))
                 for d in DATA_SEEDS]
    return rows


def run_study(out, train: bool = True) -> SettingMeanReport:
    """Train what is missing (``train``), evaluate, and write ``out/setting_mean.json``."""
    return folder_study(out, train, train_missing, evaluate, "setting_mean.json")


def format_report(rep: SettingMeanReport) -> str:
    runs = len(rep.data_seeds) * len(rep.groups_seeds) * len(FAMILIES)  # per setting
    lines = [f"--as against the target setting's mean: {len(rep.data_seeds)} data orders at groups seeds "
             f"{', '.join(map(str, rep.groups_seeds))}; {rep.rule}",
             f"{'axis':10s} {'pilot':>14s} -> {'target':14s} {'claimed':>8s} {'mean: in':>8s} {'out':>4s} "
             f"{'single: in':>10s} {'out':>4s} {'luck out':>8s} {'in 80 %':>8s} {'RMS mean':>8s} {'single':>7s}"]
    for a in rep.axes:
        lines.append(f"{a.axis:10s} {a.pilot:>14s} -> {a.target:14s} {a.claimed:>4d}/{a.predictions:<3d} "
                     f"{a.mean_within:8d} {a.mean_missed:4d} {a.single_within:10d} {a.single_missed:4d} "
                     f"{a.luck_outside:>5d}/{runs:<2d} "
                     f"{a.inside:>5d}/{a.predictions:<2d} {a.mean_rms:8.3f} {a.single_rms:7.3f}")
    claimed = sum(a.claimed for a in rep.axes)
    lines.append(f"all: {claimed} of {sum(a.predictions for a in rep.axes)} claimed; against the setting's mean "
                 f"{sum(a.mean_within for a in rep.axes)} within, {sum(a.mean_missed for a in rep.axes)} outside; "
                 f"against the single run {sum(a.single_within for a in rep.axes)} within, "
                 f"{sum(a.single_missed for a in rep.axes)} outside ({SPREAD_RULE:.0%})")
    for t in rep.tuner or []:
        j = t.judgement
        against = "the settings' means" if t.against == "mean" else f"data order {t.against}"
        lines.append(f"tuner, {t.family}, against {against}"
                     f": pick {j.pick} {j.measured:.4f} (rank {j.rank} of {j.settings}), best {j.best} {j.best_loss:.4f}, "
                     f"median {j.median_loss:.4f}; half-width {j.high - j.predicted:.4f}: "
                     f"{'holds' if j.better_than_median and j.within_interval_of_best else 'misses'}")
    return "\n".join(lines)
