"""The held-out validation of ``noloco llm tune`` (:mod:`noloco.advice.tune`) on the cpu-small GPT.

Written down and committed before any held-out run existed. The tuner's pilots are the development sweep of
docs/advice.md (23 settings, seeds 0 to 2, the advice study's :data:`~noloco.studies.advice.BASE`
setting and its variants); its reference is the base setting (``const_h10``). The command, fixed here:

    noloco llm tune DEV_RUNS --reference const_h10 --goal time --compute-seconds 0.05

(the comm model's internet-like network: 50 ms a message, 1 Gbit/s, bf16 values; 0.05 s of compute per inner
step, about what this CPU measures, stated so that the result does not move with the machine's load).
Its recommendation and the reference are then trained with three new seeds (:data:`SEEDS`, none of them a
pilot), with 64 validation windows instead of 8 (measurement only: training is the same).

The rules (the issue's), per seed s, with time = inner steps x 0.05 s + outer steps x the setting's
synchronisation (the same cost model as the promise):

1. **At least as fast**: target_s = the reference's final loss in seed s (mean of its last 3 evaluations,
   the averaged model); t_ref_s and t_rec_s are the times at which each smoothed curve first reaches target_s.
   Holds when mean(t_rec - t_ref) <= 2 SE (the standard error of the paired differences); a seed whose
   recommendation never reaches its target fails the rule.
2. **Spread**: the mean over seeds of the recommendation's RMS weight_std over the second half within
   15 % of the spread the tuner reported.
3. **Speed-up**: measured mean(t_ref) / mean(t_rec) within 25 % of the promised speed-up.

``noloco llm study tune --pilots DEV_RUNS --runs DIR`` tunes, trains what is missing (one thread,
finished runs reused) and writes ``tune_holdout.json`` into DIR (copy it to docs/data/).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from noloco.infra.files import write_json
from noloco.infra.record import JsonRecord
from noloco.advice.run_rows import MetricsRow
from noloco.advice.tune import SMOOTH, second_half_spread, tune
from noloco.advice.tune_rows import TuneResult, TuneRow

SEEDS = (10, 11, 12)
REFERENCE = "const_h10"
COMPUTE_SECONDS = 0.05
VAL_WINDOWS = 64
SPREAD_TOLERANCE, SPEEDUP_TOLERANCE, SE_FACTOR = 0.15, 0.25, 2.0


@dataclass(frozen=True)
class TuneRule(JsonRecord):
    """The rules' fixed numbers, written beside the verdicts they judge."""

    seeds: list
    compute_seconds: float
    val_windows: int
    spread_tolerance: float
    speedup_tolerance: float
    se_factor: float


@dataclass(frozen=True)
class SeedTiming(JsonRecord):
    """One held-out seed: the reference's final loss as the target and when each run reached it (None: never)."""

    seed: int
    target: float
    t_ref: Optional[float]
    t_rec: Optional[float]
    spread: float
    final_loss_rec: float
    ref_wall_s: Optional[float]


@dataclass(frozen=True)
class HeldOut(JsonRecord):
    """The three rules' measurements and verdicts (the time rules only when every seed reached its target)."""

    NESTED = {"seeds": (list, SeedTiming)}
    OPTIONAL_KEYS = ("mean_difference", "difference_se", "as_fast", "measured_speedup", "speedup_ratio",
                     "speedup_holds")

    seeds: list
    reached_every_seed: bool
    mean_difference: Optional[float] = None
    difference_se: Optional[float] = None
    as_fast: Optional[bool] = None
    measured_speedup: Optional[float] = None
    speedup_ratio: Optional[float] = None
    speedup_holds: Optional[bool] = None
    measured_spread: float = math.nan
    predicted_spread: float = math.nan
    spread_ratio: float = math.nan
    spread_holds: bool = False


@dataclass(frozen=True)
class TuneReport(JsonRecord):
    """``tune_holdout.json``: the rules, the tuner's answer (as :func:`noloco.advice.tune.tune` gives it) and the
    held-out verdicts (None when the tuner recommended nothing, and no rules then)."""

    NESTED = {"rule": TuneRule, "tune": TuneResult, "held_out": HeldOut}
    OPTIONAL_KEYS = ("rule",)

    rule: Optional[TuneRule] = None
    tune: Optional[TuneResult] = None
    held_out: Optional[HeldOut] = None


def held_out_settings(recommendation: TuneRow) -> dict:
    """The reference and the recommendation as settings of :func:`noloco.studies.advice.flags`."""
    rec = dict(alpha=recommendation.alpha, beta=recommendation.beta, gamma=recommendation.gamma,
               group_size=recommendation.n, inner_steps=recommendation.H,
               outer_steps=recommendation.outer_steps, val_windows=VAL_WINDOWS)
    return {"reference": (dict(val_windows=VAL_WINDOWS), False), "recommended": (rec, False)}


def _time_to(run, target: float, tuned: TuneResult) -> float | None:
    """Seconds for ``run`` (a :class:`~noloco.advice.record.RunRecord`) to reach ``target`` under the
    tuner's cost model with the study's compute time."""
    from noloco.advice.tune import Setting, time_to
    from noloco.theory.comm import Network

    net = tuned.network
    return time_to(Setting("run", run.setting, [run]), target, Network.from_bandwidth(net.latency, net.bandwidth),
                   COMPUTE_SECONDS, net.bytes_per_value).seconds


def evaluate(runs: Path, tuned: TuneResult) -> HeldOut:
    from noloco.advice.record import read_run

    rec = tuned.recommendation
    final = lambda rows: float(np.mean([MetricsRow.from_json(r).val_loss_avg_model for r in rows[-SMOOTH:]]))  # noqa: E731
    per_seed = []
    for seed in SEEDS:
        reference, recommended = runs / "reference" / f"s{seed}", runs / "recommended" / f"s{seed}"
        ref_run, run = read_run(reference), read_run(recommended)
        target = final(ref_run.metrics)
        t_ref, t_rec = _time_to(ref_run, target, tuned), _time_to(run, target, tuned)
        per_seed.append(SeedTiming(seed=seed, target=target, t_ref=t_ref, t_rec=t_rec,
                                   spread=second_half_spread(run),
                                   final_loss_rec=final(run.metrics), ref_wall_s=ref_run.wall_s))
    reached = all(p.t_rec is not None and p.t_ref is not None for p in per_seed)
    times = {}
    if reached:
        diffs = np.array([p.t_rec - p.t_ref for p in per_seed])
        se = float(diffs.std(ddof=1) / math.sqrt(len(diffs)))
        speedup = float(np.mean([p.t_ref for p in per_seed]) / np.mean([p.t_rec for p in per_seed]))
        times = dict(mean_difference=float(diffs.mean()), difference_se=se,
                     as_fast=bool(diffs.mean() <= SE_FACTOR * se), measured_speedup=speedup,
                     speedup_ratio=speedup / tuned.promised_speedup,
                     speedup_holds=bool(abs(speedup / tuned.promised_speedup - 1) <= SPEEDUP_TOLERANCE))
    spread = float(np.mean([p.spread for p in per_seed]))
    return HeldOut(seeds=per_seed, reached_every_seed=reached, **times, measured_spread=spread,
                   predicted_spread=rec.spread, spread_ratio=spread / rec.spread,
                   spread_holds=bool(abs(spread / rec.spread - 1) <= SPREAD_TOLERANCE))


def run_study(pilots: Path, runs: Path) -> TuneReport:
    from noloco.studies.advice import train_missing

    tuned = tune([pilots], reference=REFERENCE, goal="time", compute_seconds=COMPUTE_SECONDS)
    if tuned.recommendation is None:
        return TuneReport(tune=tuned, held_out=None)
    train_missing(runs, held_out_settings(tuned.recommendation), SEEDS, "tune study")
    rule = TuneRule(seeds=list(SEEDS), compute_seconds=COMPUTE_SECONDS, val_windows=VAL_WINDOWS,
                    spread_tolerance=SPREAD_TOLERANCE, speedup_tolerance=SPEEDUP_TOLERANCE, se_factor=SE_FACTOR)
    report = TuneReport(rule=rule, tune=tuned, held_out=evaluate(runs, tuned))
    write_json(runs / "tune_holdout.json", report)
    return report


def format_report(report: TuneReport) -> str:
    tuned, held = report.tune, report.held_out
    rec = tuned.recommendation
    if held is None:
        return "the tuner recommended nothing"
    lines = [f"recommended {rec.setting} (alpha {rec.alpha:g}, beta {rec.beta:g}, gamma {rec.gamma:g}, "
             f"n {rec.n}, H {rec.H}); promised {tuned.promised_speedup:.3f}x, spread {rec.spread:.3e}",
             f"{'seed':>5}{'target':>9}{'t_ref s':>9}{'t_rec s':>9}{'spread':>11}"]
    for p in held.seeds:
        fmt = lambda t: "never" if t is None else f"{t:.1f}"  # noqa: E731
        lines.append(f"{p.seed:>5}{p.target:>9.4f}{fmt(p.t_ref):>9}{fmt(p.t_rec):>9}{p.spread:>11.3e}")
    if held.reached_every_seed:
        lines.append(f"1. as fast: t_rec - t_ref {held.mean_difference:+.1f} +- {held.difference_se:.1f} s: "
                     f"{'holds' if held.as_fast else 'fails'}")
        lines.append(f"3. speed-up measured {held.measured_speedup:.3f}x, promised {tuned.promised_speedup:.3f}x "
                     f"(ratio {held.speedup_ratio:.3f}): {'holds' if held.speedup_holds else 'fails'}")
    else:
        lines.append("1. as fast: fails (a seed never reached its target)")
    lines.append(f"2. spread measured {held.measured_spread:.3e}, predicted {held.predicted_spread:.3e} "
                 f"(ratio {held.spread_ratio:.3f}): {'holds' if held.spread_holds else 'fails'}")
    return "\n".join(lines)
