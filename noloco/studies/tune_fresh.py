"""The tuner from one pilot (``noloco llm tune FORKS --forks``) judged on fresh seeds, with its loss interval in
units of the pilot's own last-quarter progress (:func:`noloco.advice.fork.loss_interval`), set on seeds 1 to 4 of
both families before any run of these seeds was trained.

The rules, written and committed before the runs were trained:

* the runs, in the one-pilot study's layout (:mod:`noloco.studies.one_pilot`, finished runs reused): for cpu-tiny
  and the Llama-style config, the pilot of seed :data:`PILOT_SEED` with its 28 forks, and the 29 settings of
  :data:`noloco.studies.one_pilot.JUDGED` trained whole with seed :data:`JUDGED_SEED`;
* the pick is the tuner's recommendation from the pilot's forks, its final loss read from the judged seed's run of
  that setting; it **holds** when that loss is below the median of the 29 settings' and within its stated 80 %
  interval's upper half-width of the best of them (:func:`noloco.studies.one_pilot.judge_pick`);
* reported per family: the pick, its predicted loss and interval, its measured loss and rank, the grid's best and
  median, whether it holds, and the cost of the pilot and its forks in pilot runs against the grid's 29 runs. Where
  the grid is not complete, the settings missing are named and no verdict is given (``complete`` false).

The grid of each family is trained in the order of the pilot's predicted losses, lowest first, so that a study cut
short has trained the settings that could beat the pick.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from noloco.infra.record import JsonRecord
from noloco.studies import one_pilot
from noloco.studies.one_pilot_rows import FreshReport, FreshTuner, LossModel, StudyRules

FAMILIES = one_pilot.FAMILIES
PILOT_SEED, JUDGED_SEED = 5, 6


#: the development data the interval was set on (:func:`interval_per_drop`)
DEVELOPMENT = Path(__file__).resolve().parents[2] / "docs" / "data" / "tune_interval.json"


@dataclass(frozen=True)
class IntervalRow(JsonRecord):
    """A forked setting's lead and its pilot's final loss and last-quarter drop, and the setting's final loss trained
    whole with another seed (``measured``)."""

    family: str
    pilot_seed: int
    judged_seed: int
    setting: str
    fork_lead: float
    pilot_final: float
    pilot_drop: float
    measured: float


@dataclass(frozen=True)
class IntervalData(JsonRecord):
    """``tune_interval.json``: the development rows the loss interval was set on."""

    NESTED = {"rows": (list, IntervalRow)}

    schema: str
    note: str
    rows: list


@dataclass(frozen=True)
class IntervalQuantiles:
    """The 10 % and 90 % quantiles, pooled and per family, over ``predictions`` rows (printed, not stored)."""

    pooled: list
    predictions: int
    by_family: dict


def read_development(path=DEVELOPMENT) -> list[IntervalRow]:
    """The development rows of ``path`` (``tune_interval.json``)."""
    from noloco.infra.files import read_json

    return IntervalData.from_json(read_json(path)).rows


def interval_per_drop(rows: list[IntervalRow], gain: float | None = None) -> IntervalQuantiles:
    """The 10 % and 90 % quantiles of (measured - predicted) / the pilot's last-quarter drop over ``rows`` (the
    development rows, :func:`read_development`), pooled and per family: how
    :data:`noloco.advice.fork.LOSS_ERROR_PER_DROP` was set."""
    import numpy as np

    from noloco.advice.fork import LOSS_GAIN

    gain = LOSS_GAIN if gain is None else gain

    def q(rs):
        z = [(r.measured - r.pilot_final - gain * r.fork_lead) / r.pilot_drop for r in rs]
        return [float(v) for v in np.quantile(z, [0.1, 0.9])]

    families = sorted({r.family for r in rows})
    return IntervalQuantiles(pooled=q(rows), predictions=len(rows),
                             by_family={f: q([r for r in rows if r.family == f]) for f in families})


#: the pilot's seed and the seed the grid is trained whole with, the defaults of every function below; any other
#: pair of seeds judged under the same rule (``--seeds PILOT,JUDGED``) was trained after the rule was committed
SEEDS = (PILOT_SEED, JUDGED_SEED)


def _report(out, family: str, seeds=SEEDS):
    """The tuner's report from the family's pilot of ``seeds[0]`` (None before all its forks are written)."""
    from noloco.advice.tune import tune_forks

    if not all(one_pilot.fork_done(one_pilot.fork_folder(out, family, n, seeds[0]), n) for n in one_pilot.FORKED):
        return None
    return tune_forks(Path(out) / family / f"forks-s{seeds[0]}")


def grid_order(out, family: str, report=None, seeds=SEEDS) -> list[str]:
    """The judged settings, lowest predicted loss first (the pilot's ``report``, read when not given), else in the
    study's order."""
    report = report or _report(out, family, seeds)
    if report is None:
        return list(one_pilot.JUDGED)
    rank = {r.setting: i for i, r in enumerate(report.rows)}
    return sorted(one_pilot.JUDGED, key=lambda n: rank.get(n, len(rank)))


def jobs(out, families=FAMILIES) -> list[tuple[str, str]]:
    """``(family, "forks")`` for the pilot with its forks, else ``(family, setting)`` trained whole with the judged
    seed; per family the pilot first (the order of the rest needs its forks)."""
    return [(f, "forks") for f in families] + [(f, n) for f in families for n in one_pilot.JUDGED]


def train_job(out, family: str, name: str, seeds=SEEDS) -> None:
    from noloco.studies.families import train_hf

    if name == "forks":
        one_pilot.train_pilot(out, family, seeds[0])
    elif not one_pilot.finished(path := one_pilot.folder(out, family, name, seeds[1])):
        train_hf(one_pilot._hf_family(family), one_pilot.setting(name), seeds[1], path)


def train_missing(out, families=FAMILIES, seeds=SEEDS, progress: bool | None = None) -> None:
    """Every run not finished yet: each family's pilot with its forks, then its grid, lowest predicted loss first."""
    import torch

    from noloco.infra.progress import Progress

    torch.set_num_threads(1)  # as the one-pilot study's runs were trained
    with Progress(len(families) * (1 + len(one_pilot.JUDGED)), "tuner on fresh seeds", unit="run",
                  show=progress) as bar:
        for f in families:
            train_job(out, f, "forks", seeds)
            bar.update()
            for n in grid_order(out, f, seeds=seeds):
                train_job(out, f, n, seeds)
                bar.update()


def judge(out, family: str, report=None, seeds=SEEDS) -> FreshTuner | None:
    """The family's judgement (:func:`noloco.studies.one_pilot.judge_pick`) of the pilot's ``report`` (read when
    not given) on the judged seed's finished settings; ``complete`` false and no verdict where some are missing."""
    report = report or _report(out, family, seeds)
    if report is None:
        return None
    done = {n: one_pilot.folder(out, family, n, seeds[1]) for n in one_pilot.JUDGED}
    loss = {n: one_pilot._measured(p)[0] for n, p in done.items() if one_pilot.finished(p)}
    missing = [n for n in one_pilot.JUDGED if n not in loss]
    head = dict(family=family, pilot_seed=seeds[0], judged_seed=seeds[1], complete=not missing,
                missing=missing, grid_runs=len(one_pilot.JUDGED), pilot_drop=_pilot_drop(out, family, seeds[0]))
    pick = report.recommendation.setting
    if pick not in loss:
        return FreshTuner(**head, pick=pick, holds=None)
    judged = one_pilot.judge_pick(report, loss)
    # descriptive, not the rule: how many trained settings' losses fell inside their own predicted intervals
    bands = {r.setting: (r.low, r.high) for r in report.rows}
    inside = [sum(bands[n][0] <= v <= bands[n][1] for n, v in loss.items() if n in bands),
              sum(n in bands for n in loss)]
    holds = (judged.better_than_median and judged.within_interval_of_best) if not missing else None
    return FreshTuner(**head, **judged.judgement(), inside_own_interval=inside, holds=holds)


def _pilot_drop(out, family: str, pilot_seed: int) -> float:
    from noloco.advice.fork import last_quarter_drop
    from noloco.advice.record import read_run

    return last_quarter_drop(read_run(one_pilot.folder(out, family, one_pilot.PILOT, pilot_seed)))


def evaluate(out, families=FAMILIES, seeds=SEEDS) -> FreshReport:
    from noloco.advice.fork import LOSS_ERROR_PER_DROP, LOSS_GAIN

    rows = [r for f in families if (r := judge(out, f, seeds=seeds)) is not None]
    rules = StudyRules(tuner="pick's loss on the judged seed below the 29 settings' median and within its "
                             "interval's upper half-width of their best")
    return FreshReport(schema="tune-fresh", rules=rules,
                       model=LossModel(gain=LOSS_GAIN, interval_per_drop=list(LOSS_ERROR_PER_DROP)),
                       families=list(families), pilot_seed=seeds[0], judged_seed=seeds[1], tuner=rows,
                       holds=sum(r.holds is True for r in rows), judged=sum(r.holds is not None for r in rows))


def run_study(out, train: bool = True, families=FAMILIES, seeds=SEEDS) -> FreshReport:
    """Trains what is missing (``train``) and judges; the report written to ``out/tune_fresh.json``, or
    ``tune_fresh_sP_sJ.json`` for seeds other than the defaults."""
    from noloco.studies.families import seeded_name, train_and_evaluate

    seeds = tuple(seeds)
    return train_and_evaluate(out, seeded_name("tune_fresh.json", seeds, SEEDS), train_missing, evaluate, train,
                              families, seeds)


def format_report(rep: FreshReport) -> str:
    lines = [f"rule: {rep.rules.tuner}; interval {rep.model.interval_per_drop} x the pilot's last-quarter "
             f"loss drop; pilot seed {rep.pilot_seed}, judged on seed {rep.judged_seed}"]
    for r in rep.tuner:
        if r.measured is None:
            lines.append(f"{r.family}: pick {r.pick} not trained yet; missing {len(r.missing)} settings")
            continue
        lines.append(f"{r.family}: pick {r.pick} predicted {r.predicted:.4f} [{r.low:.4f}, "
                     f"{r.high:.4f}], measured {r.measured:.4f} (rank {r.rank} of {r.settings}; best "
                     f"{r.best} {r.best_loss:.4f}, median {r.median_loss:.4f}); holds: "
                     f"{'not judged, missing ' + ', '.join(r.missing) if r.holds is None else r.holds}; "
                     f"cost {r.cost_pilot_runs:.2f} pilot runs vs {r.grid_runs}")
    return "\n".join(lines)
