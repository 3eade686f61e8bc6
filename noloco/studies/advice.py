"""The held-out validation of the advice (:mod:`noloco.advice.forecast`) on the cpu-small GPT.

The settings, the pilots and the agreement rule below were written down (and committed) before any of these
runs existed; the recipe's constants were chosen on an earlier sweep (docs/advice.md, "development sweep"),
none of whose runs is in this one.

Agreement rule, per seed: the root mean square of weight_std over the evaluations of the second half of the
run (outer step > T/2), predicted / measured, within 15 % (:data:`TOLERANCE`). The forecast uses the first
quarter of the run's outer steps (floor(T/4)); a transfer uses the whole pilot (the base setting, same seed).
A prediction that carries a flag counts as a claim the toolkit did not make when the flag says it
extrapolates ("not settled", "extrapolates", "unstable"): it is reported, and counted separately.

The loss side (:mod:`noloco.advice.gap`, added after the first evaluation and committed before its own):
the equipartition gap at every run's final checkpoint against the measured gap of its final evaluation
(8 validation windows), per run; the rule: within a factor :data:`GAP_FACTOR` on at least 80 % of the runs
(the 8-window measurement is noisy; the development snapshots, on 128 windows, were within 2x on 62 of 63).

``noloco llm study advice --runs DIR`` trains what is missing (``noloco llm train``, one thread,
finished runs reused) and writes ``advice_holdout.json`` into DIR (copy it to docs/data/ to refresh the docs).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from noloco.infra.errors import DataError
from noloco.infra.files import read_json, write_json
from noloco.infra.record import JsonRecord
from noloco.theory.config import OUTER_FIELDS
from noloco.advice.forecast import FORECAST_ERROR, SCHEDULE_FIELDS, TRANSFER_ERROR
from noloco.advice.record import RunSetting
from noloco.advice.run_rows import RunResult
from noloco.advice.tune import rms_second_half

SEEDS = (0, 1, 2)
TOLERANCE = 0.15
GAP_FACTOR = 2.0
#: the base setting (the development sweep's): cpu-small model, N 8 pairs, alpha 0.5, beta 0.7, gamma 0.7,
#: AdamW lr 1e-3 without weight decay, H 10, 80 outer steps, constant after 20 warm-up steps
BASE = dict(method="noloco", replicas=8, group_size=2, alpha=0.5, beta=0.7, gamma=0.7, layers=2, heads=4,
            width=64, ctx=64, batch=4, val_windows=8, weight_decay=0.0, lr=1e-3, inner_steps=10, outer_steps=80,
            eval_every=2, schedule="constant", warmup=20)
COSINE = dict(schedule="cosine", warmup=100)
#: held-out settings (changes against BASE); "forecast": forecast from the first quarter
SETTINGS = {
    "base": ({}, False),  # the pilot of the transfers (a new run of the development base, seeds 0-2)
    "cos_h20_lr2e3": (dict(COSINE, inner_steps=20, outer_steps=40, lr=2e-3, eval_every=1), True),
    "cos_h50_long": (dict(COSINE, inner_steps=50, outer_steps=64, eval_every=2), True),
    "const_a03_b09_g05": (dict(alpha=0.3, beta=0.9, gamma=0.5), True),
    "cos_N16_n4": (dict(COSINE, replicas=16, group_size=4), True),
    "cos_nesterov_wd": (dict(COSINE, momentum="nesterov", alpha=0.7, weight_decay=0.1), True),
    "const_h25": (dict(inner_steps=25, outer_steps=32, eval_every=1), False),
    "const_N16_n4": (dict(replicas=16, group_size=4), False),
    "const_lr15e3": (dict(lr=1.5e-3), False),
    "const_a07": (dict(alpha=0.7), False),
}
#: transfers: target setting -> the changes that turn the pilot (``base``, same seed) into it
TRANSFERS = {
    "const_a03_b09_g05": dict(alpha=0.3, beta=0.9, gamma=0.5),
    "const_h25": dict(inner_steps=25, outer_steps=32),
    "const_N16_n4": dict(replicas=16, group_size=4),
    "const_lr15e3": dict(lr=1.5e-3),
    "const_a07": dict(alpha=0.7),
}
EXTRAPOLATING = ("not settled", "unsure", "too few steps", "extrapolates", "unstable", "not reproduced")


def flags(name: str, seed: int, folder: Path, settings: dict | None = None) -> list[str]:
    """``noloco llm train``'s flags for setting ``name`` of ``settings`` (changes against :data:`BASE`, first of a
    tuple; default :data:`SETTINGS`) and ``seed``, into ``folder``."""
    values = {**BASE, **(settings or SETTINGS)[name][0]}
    out = []
    for key, value in values.items():
        out += ["--" + key.replace("_", "-"), str(value)]
    return out + ["--threads", "1", "--seed", str(seed), "--out", str(folder)]


def _finished(folder: Path) -> bool:
    try:
        return RunResult.from_json(read_json(folder / "result.json")).finished is True
    except Exception:  # noqa: BLE001 (missing or partial: train it)
        return False


def train_missing(runs: Path, settings: dict | None = None, seeds=SEEDS, study: str = "advice study") -> None:
    """Train every (setting, seed) of ``settings`` (default :data:`SETTINGS`) not finished under ``runs``."""
    settings = settings or SETTINGS
    todo = [(n, s) for n in settings for s in seeds if not _finished(runs / n / f"s{s}")]
    for i, (name, seed) in enumerate(todo, 1):
        folder = runs / name / f"s{seed}"
        print(f"{study}: training {i}/{len(todo)}: {name} seed {seed}", file=sys.stderr, flush=True)
        cmd = [sys.executable, "-m", "noloco", "llm", "train", *flags(name, seed, folder, settings), "--overwrite"]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL)
        if done.returncode:
            raise DataError(f"training {folder} ended with exit {done.returncode}: {' '.join(cmd)}")


@dataclass(frozen=True)
class ForecastCheck(JsonRecord):
    """One run's forecast from its first quarter against its measured second half."""

    setting: str
    seed: int
    from_step: int
    outer_steps: int
    ratio: float
    flags: list
    verdict: str
    inside_interval: bool


@dataclass(frozen=True)
class TransferCheck(JsonRecord):
    """A transfer from the pilot to ``target``'s setting against ``target``'s measured second half."""

    target: str
    seed: int
    changes: dict
    ratio: float
    flags: list
    verdict: str
    inside_interval: bool


@dataclass(frozen=True)
class GapCheck(JsonRecord):
    """The equipartition gap at a run's final checkpoint against its measured gap (None: not predicted)."""

    setting: str
    seed: int
    predicted: Optional[float]
    measured: Optional[float]
    ratio: Optional[float]


@dataclass(frozen=True)
class Tally(JsonRecord):
    """How many predictions of one kind agree, are flagged, and land inside their interval."""

    runs: int
    claimed: int
    agree: int
    flagged: int
    agree_all_counted: int
    inside_interval: int


@dataclass(frozen=True)
class GapTally(JsonRecord):
    runs: int
    within_factor: int
    factor: float
    within_15_percent: int
    median_ratio: Optional[float]


@dataclass(frozen=True)
class HoldoutSummary(JsonRecord):
    NESTED = {"forecast": Tally, "transfer": Tally, "gap": GapTally}

    forecast: Tally
    transfer: Tally
    gap: GapTally


@dataclass(frozen=True)
class HoldoutReport(JsonRecord):
    """``advice_holdout.json``: every forecast, transfer and gap of the held-out sweep, and their tallies."""

    NESTED = {"forecasts": (list, ForecastCheck), "transfers": (list, TransferCheck), "gaps": (list, GapCheck),
              "summary": HoldoutSummary}

    schema: str
    tolerance: float
    seeds: list
    base: dict
    settings: dict
    forecasts: list
    transfers: list
    gaps: list
    summary: HoldoutSummary


@dataclass(frozen=True)
class DevelopmentChecks(JsonRecord):
    """The development sweep's forecasts (or transfers, from ``pilot``) and the quantiles of the unflagged ratios."""

    OPTIONAL_KEYS = ("pilot",)

    schema: str
    pilot: Optional[str] = None
    runs: list = ()
    unflagged: int = 0
    quantiles: list = ()


@dataclass(frozen=True)
class DevelopmentReport(JsonRecord):
    """``advice_development.json``."""

    NESTED = {"forecasts": DevelopmentChecks, "transfers": DevelopmentChecks}

    forecasts: DevelopmentChecks
    transfers: DevelopmentChecks


def _inside(ratio: float, error: tuple[float, float]) -> bool:
    """Whether the measured value lies in the reported 80 % interval [predicted / high, predicted / low]."""
    return error[0] <= ratio <= error[1]


def _verdict(ratio: float, flagged: bool) -> str:
    if flagged:
        return "flagged"
    return "agrees" if abs(ratio - 1) <= TOLERANCE else "misses"


def forecast_check(folder: Path, setting: str, seed: int) -> ForecastCheck:
    """The forecast of one run from its first quarter, against its measured second half."""
    from noloco.advice.forecast import forecast
    from noloco.advice.record import read_run

    T = read_run(folder).setting.outer_steps
    fc = forecast(folder, from_step=T // 4)
    measured = [r for r in fc.rows if r.measured is not None]
    ratio = (rms_second_half([(r.outer_step, r.forecast) for r in measured], T)
             / rms_second_half([(r.outer_step, r.measured) for r in measured], T))
    flagged = any(f.startswith(EXTRAPOLATING) for f in fc.flags)
    return ForecastCheck(setting=setting, seed=seed, from_step=fc.from_step, outer_steps=T, ratio=ratio,
                         flags=fc.flags, verdict=_verdict(ratio, flagged),
                         inside_interval=_inside(ratio, FORECAST_ERROR))


def _runs_with_spread(root: Path):
    """The finished runs ``root/SETTING/sSEED`` with measured inputs and a spread to predict (n < N)."""
    for folder in sorted(root.glob("*/s[0-9]*")):
        try:
            result = RunResult.from_json(read_json(folder / "result.json"))
            outer = RunSetting.from_config(result.config).outer
            spread = outer.group_size < outer.replicas
        except Exception:  # noqa: BLE001 (missing, partial or foreign: not a run of the sweep)
            continue
        if result.finished is True and spread and (folder / "inputs.jsonl").exists():
            yield folder


def _quantiles(items: list) -> dict:
    """The unflagged ratios' count and 10 % / 90 % quantiles (the reported interval)."""
    unflagged = [x.ratio for x in items if x.verdict != "flagged"]
    if not unflagged:
        raise DataError("no unflagged forecast or transfer among the runs: the development sweep's folder holds "
                        "its runs as DIR/SETTING/sSEED (noloco llm train), the pilot DIR/const_h10")
    return dict(unflagged=len(unflagged),
                quantiles=[float(np.quantile(unflagged, 0.1)), float(np.quantile(unflagged, 0.9))])


def development(root: Path) -> DevelopmentChecks:
    """The forecasts of every run ``root/SETTING/sSEED`` of the development sweep (where the recipe was chosen)
    and the 10 % / 90 % quantiles of forecast / measured over the unflagged ones: the forecast's interval."""
    items = [forecast_check(f, f.parent.name, int(f.name[1:])) for f in _runs_with_spread(root)]
    return DevelopmentChecks(schema="advice-development", runs=items, **_quantiles(items))


def changes_between(pilot, target) -> dict | None:
    """The transferable changes that turn config ``pilot`` into ``target`` (None when anything else differs)."""
    outer_a, outer_b = dataclasses.asdict(pilot.outer), dataclasses.asdict(target.outer)
    changes = {k: outer_b[k] for k in OUTER_FIELDS if outer_a[k] != outer_b[k]}
    a, b = pilot.as_dict(), target.as_dict()
    changes.update({k: b[k] for k in SCHEDULE_FIELDS if a[k] != b[k]})
    ignored = {"outer", *SCHEDULE_FIELDS, "seed", "eval_every", "ckpt_every", "val_windows"}
    if any(a[k] != b[k] for k in a if k not in ignored):
        return None
    return changes


def transfer_check(pilot: Path, target: Path, setting: str, seed: int, changes: dict) -> TransferCheck:
    """The transfer from ``pilot`` to the setting of ``target``, against ``target``'s measured second half."""
    from noloco.advice.forecast import transfer
    from noloco.advice.record import read_run

    pred = transfer(pilot, **changes)
    run = read_run(target)
    T = run.setting.outer_steps
    predicted = {r.outer_step: r.predicted for r in pred.rows}
    measured = [(int(m.outer_step), m.weight_std) for m in run.metric_rows]
    ratio = rms_second_half([(t, predicted.get(t)) for t, _ in measured], T) / rms_second_half(measured, T)
    flagged = any(f.startswith(EXTRAPOLATING) for f in pred.flags)
    return TransferCheck(target=setting, seed=seed, changes=changes, ratio=ratio, flags=pred.flags,
                         verdict=_verdict(ratio, flagged), inside_interval=_inside(ratio, TRANSFER_ERROR))


def development_transfers(root: Path, pilot: str = "const_h10") -> DevelopmentChecks:
    """Transfers from ``root/pilot/sS`` to every other setting of the development sweep that differs from it
    only in transferable fields (same seed), and the 10 % / 90 % quantiles of the unflagged ratios."""
    from noloco.advice.record import read_run

    items = []
    for folder in _runs_with_spread(root):
        if folder.parent.name == pilot:
            continue
        source = root / pilot / folder.name
        changes = changes_between(read_run(source).setting, read_run(folder).setting)
        if changes:
            items.append(transfer_check(source, folder, folder.parent.name, int(folder.name[1:]), changes))
    return DevelopmentChecks(schema="advice-development-transfers", pilot=pilot, runs=items, **_quantiles(items))


def evaluate(runs: Path) -> HoldoutReport:
    """Every forecast and transfer of the held-out sweep against the measured runs."""
    forecasts, transfers = [], []
    for name, (_, do_forecast) in SETTINGS.items():
        if do_forecast:
            forecasts += [forecast_check(runs / name / f"s{seed}", name, seed) for seed in SEEDS]
    for name, changes in TRANSFERS.items():
        transfers += [transfer_check(runs / "base" / f"s{seed}", runs / name / f"s{seed}", name, seed, changes)
                      for seed in SEEDS]

    def tally(items) -> Tally:
        claimed = [x for x in items if x.verdict != "flagged"]
        return Tally(runs=len(items), claimed=len(claimed), agree=sum(x.verdict == "agrees" for x in items),
                     flagged=len(items) - len(claimed),
                     agree_all_counted=sum(abs(x.ratio - 1) <= TOLERANCE for x in items),
                     inside_interval=sum(x.inside_interval for x in claimed))

    gaps = [gap_check(runs / name / f"s{seed}", name, seed) for name in SETTINGS for seed in SEEDS]
    ratios = [g.ratio for g in gaps if g.ratio is not None]
    gap = GapTally(runs=len(gaps), within_factor=sum(1 / GAP_FACTOR <= r <= GAP_FACTOR for r in ratios),
                   factor=GAP_FACTOR, within_15_percent=sum(abs(r - 1) <= TOLERANCE for r in ratios),
                   median_ratio=float(np.median(ratios)) if ratios else None)
    return HoldoutReport(schema="advice-holdout", tolerance=TOLERANCE, seeds=list(SEEDS), base=BASE,
                         settings={n: c for n, (c, _) in SETTINGS.items()}, forecasts=forecasts, transfers=transfers,
                         gaps=gaps, summary=HoldoutSummary(forecast=tally(forecasts), transfer=tally(transfers),
                                                           gap=gap))


def gap_check(folder: Path, setting: str, seed: int) -> GapCheck:
    """The equipartition gap at the run's final checkpoint against its final evaluation's measured gap."""
    from noloco.advice.gap import equipartition_gap
    from noloco.llm_check.adam_state import second_moment_root

    rep = equipartition_gap(folder, second_moment_root)
    return GapCheck(setting=setting, seed=seed, predicted=rep.predicted, measured=rep.measured, ratio=rep.ratio)


def format_report(rep: HoldoutReport) -> str:
    lines = [f"forecast from the first quarter (agreement: |ratio - 1| <= {rep.tolerance:g}):",
             f"{'setting':<20} {'seed':>4} {'ratio':>6}  verdict"]
    lines += [f"{x.setting:<20} {x.seed:>4} {x.ratio:6.3f}  {x.verdict}" for x in rep.forecasts]
    lines += ["", "transfer from the base run (same seed):", f"{'target':<20} {'seed':>4} {'ratio':>6}  verdict"]
    lines += [f"{x.target:<20} {x.seed:>4} {x.ratio:6.3f}  {x.verdict}" for x in rep.transfers]
    g = rep.summary.gap
    lines.append(f"loss gap: {g.within_factor} of {g.runs} runs within a factor {g.factor:g}, "
                 f"{g.within_15_percent} within 15 %, median predicted / measured {g.median_ratio:.3f}")
    for key, s in (("forecast", rep.summary.forecast), ("transfer", rep.summary.transfer)):
        lines.append(f"{key}: {s.agree} of {s.claimed} unflagged predictions agree ({s.flagged} flagged); "
                     f"counting every run: {s.agree_all_counted} of {s.runs}; measured inside the 80 % interval: "
                     f"{s.inside_interval} of {s.claimed}")
    return "\n".join(lines)


def run_development(root) -> DevelopmentReport:
    """The forecasts and transfers of the development sweep's runs ``root/SETTING/sSEED`` (pilot
    ``root/const_h10``), also written to ``root/advice_development.json``."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"--development {root}: no such folder")
    rep = DevelopmentReport(forecasts=development(root), transfers=development_transfers(root))
    write_json(root / "advice_development.json", rep)
    return rep


def format_development(rep: DevelopmentReport) -> str:
    return (f"development sweep: forecast 10/90 % quantiles {rep.forecasts.quantiles}, transfer "
            f"{rep.transfers.quantiles}")


def run_holdout(runs, train: bool = True) -> HoldoutReport:
    """The held-out evaluation: train what is missing under ``runs`` (unless ``train`` is False), evaluate, and
    write ``runs/advice_holdout.json``."""
    runs = Path(runs)
    if train:
        train_missing(runs)
    rep = evaluate(runs)
    write_json(runs / "advice_holdout.json", rep)
    return rep
