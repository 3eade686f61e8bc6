"""Predicted against measured replica spread of real NoLoCo training.

Model (:mod:`noloco.theory.numeric`, flat-direction limit): along a direction the loss
barely curves, one inner phase moves a replica by pure noise, ``c -> 0`` and
``Var(eps) = s2``. The stationary spread is then
``sqrt(stationary_variance(alpha, beta, gamma, 0, s2, N, n))``. For AdamW the
per-step update has size ~lr whatever the gradient scale, and H noisy steps add up
like a random walk, so ``s2 = k * lr^2 * H``; the one unknown constant ``k`` is
fitted on the reference run (its row is marked ``fitted``: its ratio is 1 by
construction), and every other run of the sweep (gamma, n, N, alpha, inner lr changed
one at a time) is a prediction. Measured: the root mean square of ``weight_std`` over
the evaluations of the second half of the run (constant inner lr, so the spread
settles), for each of several seeds (data, initialisation and groups): the mean over seeds and
its standard error across seeds.

Next to it, with no fitted constant: :func:`noloco.advice.predict.predict` on each run's own
measured inputs (``inputs.jsonl``: c, s2, rho, drift per tensor and outer step), the RMS of its
predicted weight_std over the same evaluations (``predicted_zero_constant``, mean over seeds;
``ratio_zero_constant`` = measured / predicted, the mean over seeds of each seed's ratio, with its
standard error ``ratio_zero_constant_se``; the reference run is a prediction there too). A row
*agrees* when that ratio is within 15 % of 1 or within 3 standard errors. Where the theory at the
measured inputs has no stationary spread (decay factor > 1: ``unstable``), the comparison is the
variance growth factor per outer step over the second half, predicted against measured (mean over
seeds; agreement: within 20 %).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np

from noloco.advice.run_rows import MetricsRow, RunResult
from noloco.llm_check.config import TrainConfig, build
from noloco.infra.checks import check_choice
from noloco.infra.files import SCHEMA_VERSION, write_json
from noloco.infra.record import JsonRecord
from noloco.theory.methods import resolve
from noloco.theory.numeric import stationary_variance
from noloco.theory.stats import mean_se, rms_se

# the reference run: the paper's outer step (N 8, pairs, alpha 0.5, beta = gamma = 0.7, heavy-ball)
_BASE = dict(method="noloco", **asdict(resolve("paper")[1]), schedule="constant", warmup=20, lr=1e-3,
             inner_steps=10, weight_decay=0.0)
_SWEEP = [("reference", {}), ("gamma", {"gamma": 0.0}), ("gamma", {"gamma": 0.35}), ("gamma", {"gamma": 1.0}),
          ("n", {"group_size": 4}), ("n", {"group_size": 8}), ("N", {"replicas": 4}),
          ("N", {"replicas": 16}), ("alpha", {"alpha": 0.0}), ("alpha", {"alpha": 0.8}), ("alpha", {"alpha": 0.9}),
          ("inner lr", {"lr": 5e-4}), ("inner lr", {"lr": 2e-3}), ("H", {"inner_steps": 20, "outer_steps": 20}),
          ("momentum", {"momentum": "nesterov"}), ("data", {"noniid": True}),
          ("optimizer", {"inner_optimizer": "sgd", "lr": 0.5})]
#: preset: (the reference run, the sweep of (factor, changes), the seeds of every setting)
PRESETS = {
    "cpu-tiny": (dict(_BASE, replicas=4, outer_steps=6, eval_every=1, batch=2, ctx=16, layers=1, heads=2,
                      width=16, val_windows=4, warmup=5, inner_steps=3),
                 [("reference", {}), ("gamma", {"gamma": 0.35}), ("n", {"group_size": 4})], (0, 1)),
    "cpu-small": (dict(_BASE, outer_steps=40, eval_every=2, batch=4, ctx=64, layers=2, heads=4, width=64,
                       val_windows=8), _SWEEP, (0, 1, 2)),
    "gpu": (dict(_BASE, outer_steps=60, eval_every=2, batch=16, ctx=256, layers=6, heads=8, width=384,
                 val_windows=32, inner_steps=20, device="cuda"), _SWEEP, (0, 1, 2)),
}
#: agreement: |ratio - 1| within this, or within AGREE_SE standard errors; growth factors within AGREE_GROWTH
AGREE_REL, AGREE_SE, AGREE_GROWTH = 0.15, 3.0, 0.20


@dataclass(frozen=True, kw_only=True)
class Row(JsonRecord):
    """One setting of the sweep: predicted against measured (a file written before a field existed lacks it)."""

    factor: str
    changes: dict
    fitted: Optional[bool] = None  # the reference run, on which k is fitted: not a prediction
    replicas: Optional[int] = None
    group_size: Optional[int] = None
    alpha: Optional[float] = None
    gamma: Optional[float] = None
    lr: Optional[float] = None
    predicted: Optional[float] = None  # None: read from a file where it was not finite
    measured: Optional[float] = None
    stderr: Optional[float] = None
    ratio: Optional[float] = None
    val_loss_avg_model: Optional[float] = None
    # no fitted constant: noloco.advice.predict on the run's own measured inputs (inputs.jsonl), RMS over the
    # same evaluations as ``measured``
    predicted_zero_constant: float | None = None
    ratio_zero_constant: float | None = None
    ratio_zero_constant_se: float | None = None
    seeds: int = 1
    unstable: bool = False          # the theory's decay factor at the run's inputs is above 1
    growth_measured: float | None = None
    growth_predicted: float | None = None
    agrees: bool | None = None      # the zero-constant comparison (growth factors where unstable)


@dataclass(frozen=True)
class Agreement(JsonRecord):
    rule: str
    agree: int
    rows: int


@dataclass(frozen=True, kw_only=True)
class ValidateReport(JsonRecord):
    """``validate.json``: the sweep's rows and agreement; a sweep a diverged run ended has ``diverged`` and no
    rows."""

    NESTED = {"agreement": Agreement, "rows": (list, Row)}
    OPTIONAL_KEYS = ("seeds", "noise_constant_k", "model", "model_zero_constant", "agreement", "corpus_sha256",
                     "python", "torch", "n_params", "unigram_entropy", "diverged")

    schema_version: Optional[int] = None
    preset: str
    base: dict
    seeds: Optional[list] = None
    noise_constant_k: Optional[float] = None
    model: Optional[str] = None
    model_zero_constant: Optional[str] = None
    agreement: Optional[Agreement] = None
    corpus_sha256: Optional[str] = None
    python: Optional[str] = None
    torch: Optional[str] = None
    n_params: Optional[int] = None
    unigram_entropy: Optional[float] = None
    rows: list = dataclasses.field(default_factory=list)
    diverged: Optional[str] = None


class SeedRun(NamedTuple):
    """One seed of one setting of the sweep: its config, measured stationary spread, result.json and the
    zero-constant prediction (None where it cannot be made)."""

    config: TrainConfig
    measured: float
    result: RunResult
    zero_constant: ZeroConstant | None


def measure(metrics: list, outer_steps: int) -> tuple[float, float]:
    """RMS weight_std over the second half of the run (:class:`MetricsRow`), and its standard error."""
    return rms_se([m.weight_std for m in metrics if m.outer_step > outer_steps / 2])


def _ratio(measured: float, predicted: float) -> float:
    if math.isnan(predicted):
        return math.nan
    return measured / predicted if predicted > 0 else (1.0 if measured == 0 else float("inf"))


class ZeroConstant(NamedTuple):
    """The prediction with no fitted constant of one run: ``predicted`` is the RMS over the second half of its
    predicted weight_std; the rest as :func:`noloco.advice.predict.predict` reports them."""

    predicted: float
    decay_factor: float | None
    measured_growth: float | None
    predicted_growth: float | None


def zero_constant(run_dir: Path) -> ZeroConstant | None:
    """:func:`noloco.advice.predict.predict` on one run (no fitted constant); None without inputs.jsonl."""
    from noloco.advice.predict import predict

    report = predict(run_dir)
    last = report.rows[-1].outer_step if report.rows else 0
    values = [r.predicted for r in report.rows if r.outer_step > last / 2 and r.predicted is not None]
    if not values:
        return None
    return ZeroConstant(rms_se(values)[0], report.decay_factor, report.measured_growth, report.predicted_growth)


def unit_variance(cfg: TrainConfig) -> float:
    """Predicted stationary variance for s2 = lr^2 * H (k = 1), flat direction (c = 0)."""
    o = cfg.outer
    return float(stationary_variance(o.alpha, o.beta, o.gamma, 0.0, cfg.lr ** 2 * cfg.inner_steps,
                                     o.replicas, o.group_size, o.momentum))


def run_sweep(preset: str, out: str | Path, device: str | None = None, progress: bool | None = None,
              threads: int | None = None, overwrite: bool = False, max_memory=None, reuse: bool = False,
              max_time=None) -> ValidateReport:
    """Train every run of the preset's sweep under ``out``, fit k on the reference run, predict the
    others; the report is also written to ``out/validate.json``. A bar only when stderr is a terminal.
    Before the first run: every config, every run folder (locked; one that holds a run needs
    ``overwrite``) and every memory estimate. With ``reuse`` a folder holding the finished run of the same
    settings is kept and read, not trained again (an interrupted sweep continues; a changed analysis
    re-summarises in seconds). A run that diverges ends the sweep: the report then
    has ``"diverged"`` (its message) and no rows. The runs still to train are timed in advance
    (:func:`noloco.llm_check.resources.time_estimate`, on a CPU): above ``max_time`` (:mod:`noloco.infra.budget`,
    default one hour) the sweep is refused before the first run, above a minute the estimate is printed."""
    from contextlib import ExitStack

    from tqdm import tqdm

    from noloco.llm_check.divergence import Diverged
    from noloco.llm_check.resources import check_memory
    from noloco.llm_check.trainer import Trainer, set_threads
    from noloco.infra.files import output_dir
    from noloco.llm_check.lifecycle import finished_run, read_metrics, run_folder

    from noloco.infra.budget import resolve_time

    check_choice("preset", preset, tuple(PRESETS))
    resolve_time(max_time)  # a malformed --max-time is bad input before anything else
    base, sweep, seeds = PRESETS[preset]
    base = dict(base, **({"device": device} if device else {}))
    jobs = [(i, seed) for i in range(len(sweep)) for seed in seeds]
    configs = [build(**{**base, **sweep[i][1], "seed": seed}) for i, seed in jobs]  # all checked before the first run
    set_threads(threads)
    for cfg in configs:
        check_memory(cfg, max_memory)
    progress = sys.stderr.isatty() if progress is None else progress
    out = output_dir(out)
    folders = [out / (f"run{i:02d}" + (f"-seed{seed}" if seed != seeds[0] else "")) for i, seed in jobs]
    runs: dict[int, list] = {}
    how = "replace the sweep with --overwrite, keep its finished runs with --reuse, or give another --out"
    with ExitStack() as opened:
        kept, runs_in = [], []  # with reuse: each folder's finished run of the same settings (None: train it)
        for where, cfg in zip(folders, configs):
            kept.append(finished_run(where, cfg) if reuse else None)
            runs_in.append(run_folder(where, overwrite=overwrite, how=how).open(accept_existing=kept[-1] is not None))
            opened.callback(runs_in[-1].close)
        _require_time([cfg for cfg, result in zip(configs, kept) if result is None], max_time, preset)
        for (i, seed), cfg, where, folder, result in tqdm(list(zip(jobs, configs, folders, runs_in, kept)),
                                                          desc=f"validate {preset}", unit="run", disable=not progress):
            factor, changes = sweep[i]
            if result is None:
                result = Trainer(cfg, folder, progress=False, max_memory=max_memory).run(overwrite=overwrite)
            result = RunResult.from_json(result)
            if result.diverged:
                report = ValidateReport(schema_version=SCHEMA_VERSION, preset=preset, base=base, rows=[],
                                        diverged=f"{where.name} ({factor} {changes}, seed {seed}): "
                                                 f"{Diverged.from_json(result.diverged).message}")
                write_json(out / "validate.json", report, indent=2)
                return report
            metrics = [MetricsRow.from_json(m) for m in read_metrics(where / "metrics.jsonl")]
            runs.setdefault(i, []).append(SeedRun(cfg, measure(metrics, cfg.outer_steps)[0], result, zero_constant(where)))
    ref_cfg = runs[0][0].config
    ref_measured = mean_se([r.measured for r in runs[0]])[0]
    k = ref_measured ** 2 / unit_variance(ref_cfg)  # the one fitted constant
    rows = []
    for i, (factor, changes) in enumerate(sweep):
        cfg = runs[i][0].config
        measured, se = mean_se([r.measured for r in runs[i]])
        # the fitted model's s2 = k lr^2 H is Adam's (steps of size ~lr whatever the gradient); not SGD's
        predicted = math.sqrt(k * unit_variance(cfg)) if cfg.inner_optimizer == "adamw" else math.nan
        zeros = [r.zero_constant for r in runs[i]]
        row = Row(factor=factor, changes=changes, fitted=i == 0, replicas=cfg.replicas,
                  group_size=cfg.outer.group_size, alpha=cfg.outer.alpha, gamma=cfg.outer.gamma, lr=cfg.lr,
                  predicted=predicted, measured=measured, stderr=se, ratio=_ratio(measured, predicted),
                  val_loss_avg_model=float(np.mean([r.result.final.val_loss_avg_model for r in runs[i]])),
                  seeds=len(runs[i]))
        if all(z is not None for z in zeros):
            ratio_zero, ratio_zero_se = mean_se([_ratio(r.measured, r.zero_constant.predicted) for r in runs[i]])
            decay = [z.decay_factor for z in zeros if z.decay_factor is not None]  # None: no spread (n = N)
            growth = [(z.measured_growth, z.predicted_growth) for z in zeros]
            grown_m = grown_p = None
            if all(g is not None and p is not None for g, p in growth):
                grown_m, grown_p = (float(v) for v in np.mean(growth, axis=0))
            row = dataclasses.replace(row, predicted_zero_constant=float(np.mean([z.predicted for z in zeros])),
                                      ratio_zero_constant=ratio_zero, ratio_zero_constant_se=ratio_zero_se,
                                      unstable=bool(decay) and float(np.mean(decay)) > 1,
                                      growth_measured=grown_m, growth_predicted=grown_p)
            row = dataclasses.replace(row, agrees=_agrees(row))
        rows.append(row)
    summary = [r for r in rows if r.agrees is not None]
    first = runs[0][0].result
    report = ValidateReport(
        schema_version=SCHEMA_VERSION, preset=preset, base=base, seeds=list(seeds), noise_constant_k=k,
        model="flat direction (c = 0), s2 = k lr^2 H, k fitted on the reference run",
        model_zero_constant="noloco.advice.predict (long-run noise model) on each run's measured inputs",
        agreement=Agreement(rule=f"stable: |ratio - 1| <= {AGREE_REL} or <= {AGREE_SE} se; unstable: growth "
                                 f"factors within {AGREE_GROWTH:.0%}",
                            agree=sum(r.agrees for r in summary), rows=len(summary)),
        corpus_sha256=first.corpus_sha256, python=first.python, torch=first.torch, n_params=first.n_params,
        unigram_entropy=first.unigram_entropy, rows=rows)
    write_json(out / "validate.json", report, indent=2)
    return report


def _require_time(configs: list, max_time, preset: str) -> None:
    """The sweep's runs still to train, timed before the first one (:mod:`noloco.infra.budget`)."""
    from noloco.infra import budget
    from noloco.llm_check.resources import time_estimate

    times = [time_estimate(cfg) for cfg in configs]
    if configs and None not in times:  # on a GPU no per-run cost was measured: no estimate
        budget.require_time(sum(times), max_time, f"llm validate --preset {preset}: {len(configs)} training runs",
                            "--reuse to keep finished runs", "at the cpu-small sweep's measured cost, one thread")


def disagreements(report: ValidateReport) -> list[str]:
    """The settings whose zero-constant prediction disagrees with the measurement (``agrees`` false), the
    reference run included: nothing is fitted on it there, so it is a prediction like every other row (its
    ``fit`` in the fitted model's ratio is 1 by construction and is not judged). ``noloco llm validate``
    exits 1 when this is not empty: a checked condition that fails, like a claim that does not hold."""
    out = []
    for row in report.rows:
        if row.agrees is False:
            change = ", ".join(f"{k}={_value(v)}" for k, v in row.changes.items()) or "-"
            ratio, se = row.ratio_zero_constant, row.ratio_zero_constant_se
            how = (f"growth {row.growth_measured:.3g}/{row.growth_predicted:.3g}" if row.unstable and
                   row.growth_measured is not None and row.growth_predicted is not None else
                   f"ratio {ratio:.2f} +- {se:.2f}" if ratio is not None and se is not None else "no ratio")
            out.append(f"{row.factor} {change} ({how})")
    return out


def _agrees(row: Row) -> bool:
    """The zero-constant prediction's verdict on one row (see the module docstring)."""
    if row.unstable:
        g, p = row.growth_measured, row.growth_predicted
        return g is not None and p is not None and abs(g / p - 1) <= AGREE_GROWTH
    off = abs(row.ratio_zero_constant - 1)
    se = row.ratio_zero_constant_se
    return off <= AGREE_REL or (se is not None and math.isfinite(se) and off <= AGREE_SE * se)


def _value(v) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _number(v) -> float:
    return math.nan if v is None else v  # strict JSON wrote NaN/inf as null


def format_table(report: ValidateReport) -> str:
    if report.diverged:
        return f"noloco llm validate --preset {report.preset}: a run diverged: {report.diverged}"
    seeds = report.seeds
    lines = [f"noloco llm validate --preset {report.preset}: stationary weight std, flat-direction theory "
             f"(k = {report.noise_constant_k:.4g} fitted on the reference run)"
             + (f"; mean +- se over seeds {seeds}" if seeds else ""),
             f"{'factor':<10} {'change':<32} {'predicted':>10} {'measured':>10} {'+-se':>9} {'ratio':>6} {'val loss':>8} "
             f"{'zero-const':>10} {'ratio':>13} {'growth meas/pred':>17} {'agrees':>6}"]
    n = _number
    for r in report.rows:
        change = ", ".join(f"{k}={_value(v)}" for k, v in r.changes.items()) or "-"
        fitted = r.factor == "reference" if r.fitted is None else r.fitted  # absent in the oldest files
        ratio = ("fit" if fitted else f"{n(r.ratio):.2f}" if math.isfinite(n(r.predicted)) else "-")  # inf: no spread
        zero_ratio = f"{n(r.ratio_zero_constant):.2f} +- {n(r.ratio_zero_constant_se):.2f}"
        growth = f"{n(r.growth_measured):.3f}/{n(r.growth_predicted):.3f}" if r.unstable else "stable"
        agrees = {True: "yes", False: "NO"}.get(r.agrees, "-")
        lines.append(f"{r.factor:<10} {change:<32} {n(r.predicted):>10.3e} {n(r.measured):>10.3e} "
                     f"{n(r.stderr):>9.1e} {ratio:>6} {n(r.val_loss_avg_model):>8.3f} "
                     f"{n(r.predicted_zero_constant):>10.3e} {zero_ratio:>13} {growth:>17} {agrees:>6}")
    if report.agreement:
        a = report.agreement
        lines.append(f"zero-constant prediction agrees on {a.agree} of {a.rows} settings ({a.rule}; the "
                     "reference run is a prediction there too, k is fitted only in the first ratio); a NO is a finding: "
                     "exit 1")
    return "\n".join(lines)
