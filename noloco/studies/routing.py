"""Fixed vs random routing and stage skipping, measured at equal tokens over several seeds.

``noloco llm study routing --out runs/routing`` trains, for every seed:

* noloco, diloco and the no-synchronisation ablation (``local``: n = 1, routing only), each with
  fixed and with random routing, on the same 4-stage model (:data:`STUDY`);
* noloco with random routing and stage skipping at each probability of :data:`SKIP_PROBS`, then
  evaluates every one of them whole and with half of its middle stages removed (each middle stage
  in turn; the mean over the choices).

A run whose folder holds a finished run with the same settings is reused, so an interrupted study
continues where it stopped. It writes ``routing.json`` (every summary below, and the spread curves
of the figure ``paper_figs/fig_routing.py``) and prints the tables of docs/routing.md:

* spread: theta_std (the inner weights' spread before the outer step, per stage) and weight_std
  (after it), averaged over the second half of training, mean and standard error over seeds; the
  ratio random/fixed paired by seed (same data, initialisation and groups);
* loss: the replica-mean model's and the replicas' own validation losses at the end;
* skipping: validation loss vs skip probability, whole and with half of the middle stages removed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from noloco.infra.files import output_dir, write_json
from noloco.llm_check.config import build
from noloco.llm_check.routing import middle_stages
from noloco.studies.reports import Curve, Estimate, RoutingRatio, RoutingReport, RoutingSettings, Skipping, Spread
from noloco.studies.seeds import SeedRun, band, train_seed

#: the model and run every study run shares (the cpu-small preset, then these)
STUDY = dict(replicas=8, layers=4, heads=2, width=32, ctx=32, batch=4, inner_steps=25, outer_steps=40, warmup=100,
             eval_every=4, val_windows=128, stages=4)
QUICK = dict(STUDY, replicas=4, inner_steps=3, outer_steps=4, warmup=3, eval_every=2, val_windows=8)
#: name -> method of the routing comparison
VARIANTS = {"noloco": "noloco", "diloco": "diloco", "no-sync": "local"}
SKIP_PROBS = (0.0, 0.25, 0.5)
SEEDS = (0, 1, 2)


THETA_PER_STAGE = lambda r: r.theta_std_per_stage
WEIGHT_PER_STAGE = lambda r: r.weight_std_per_stage
AVG_MODEL_LOSS = lambda r: r.val_loss_avg_model


def _second_half_mean(rows: list, pick, stages: int) -> np.ndarray:
    """Per stage, the mean of ``pick(row)`` (a per-stage list) over the evaluations of the second half of the run."""
    last = rows[-1].outer_step
    kept = [pick(r) for r in rows if r.outer_step > last / 2]
    return np.mean(np.asarray(kept, dtype=float).reshape(-1, stages), axis=0)


def run_study(out: str | Path, seeds=SEEDS, quick: bool = False, threads: int | None = 1,
              progress: bool | None = None) -> RoutingReport:
    """Train (or reuse) every run under ``out`` and summarise them; the report written to routing.json."""
    from noloco.llm_check.evaluation import evaluate_run

    out = output_dir(out)
    base = QUICK if quick else STUDY
    S = build("cpu-small", "noloco", **base).stages  # the stages of every run of the study
    jobs = [(f"{name}-{routing}", method, dict(routing=routing))
            for name, method in VARIANTS.items() for routing in ("fixed", "random")]
    jobs += [(f"skip-{p:g}", "noloco", dict(routing="random", skip_prob=p)) for p in SKIP_PROBS if p > 0]
    show = sys.stderr.isatty() if progress is None else progress
    bar = None
    if show:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs) * len(seeds), desc="routing study", unit="run", leave=False)
    runs: dict[str, list[SeedRun]] = {}
    for name, method, fields in jobs:
        for seed in seeds:
            cfg = build("cpu-small", method, **base, seed=seed, **fields)
            runs.setdefault(name, []).append(train_seed(cfg, out / name / f"seed{seed}", threads,
                                                        ("outer_step", "theta_std_per_stage")))
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()

    spread, curves = {}, {}
    for name in (f"{v}-{r}" for v in VARIANTS for r in ("fixed", "random")):
        seeds_rows = [run.rows for run in runs[name]]
        spread[name] = Spread(
            theta_std_per_stage=band([_second_half_mean(rows, THETA_PER_STAGE, S) for rows in seeds_rows]),
            weight_std_per_stage=band([_second_half_mean(rows, WEIGHT_PER_STAGE, S) for rows in seeds_rows]),
            val_loss_avg_model=band([rows[-1].val_loss_avg_model for rows in seeds_rows]),
            val_loss_replicas=band([np.mean(rows[-1].val_loss_per_replica) for rows in seeds_rows]))
        curves[name] = Curve(outer_step=[r.outer_step for r in seeds_rows[0]],
                             theta_std=np.mean([[r.theta_std for r in rows] for rows in seeds_rows], axis=0).tolist(),
                             theta_std_per_stage=np.mean([[r.theta_std_per_stage for r in rows]
                                                          for rows in seeds_rows], axis=0).tolist())
    ratios = {}
    for variant in VARIANTS:
        pairs = list(zip(runs[f"{variant}-fixed"], runs[f"{variant}-random"]))
        per_seed = [_second_half_mean(b.rows, THETA_PER_STAGE, S) / _second_half_mean(a.rows, THETA_PER_STAGE, S)
                    for a, b in pairs]
        loss = [b.rows[-1].val_loss_avg_model - a.rows[-1].val_loss_avg_model for a, b in pairs]
        ratios[variant] = RoutingRatio(theta_std_random_over_fixed=band(per_seed),
                                       val_loss_random_minus_fixed=band(loss))

    middle = middle_stages(S)
    halves = [[s] for s in middle] if len(middle) == 2 else [middle[: len(middle) // 2], middle[len(middle) // 2:]]
    skipping = {}
    for p in SKIP_PROBS:
        name = "noloco-random" if p == 0 else f"skip-{p:g}"
        whole, cut = [], []
        for run in runs[name]:
            whole.append(run.rows[-1].val_loss_avg_model)
            cut.append(np.mean([evaluate_run(run.folder, removed, threads).val_loss_avg_model
                                for removed in halves]))
        skipping[f"{p:g}"] = Skipping(val_loss=band(whole), val_loss_half_removed=band(cut),
                                      increase=band(np.subtract(cut, whole)))
    settings = RoutingSettings(**base, seeds=list(seeds), skip_probs=list(SKIP_PROBS), removed_halves=halves)
    report = RoutingReport(schema="routing-study", settings=settings, spread=spread, ratios=ratios, curves=curves,
                           skipping=skipping)
    write_json(out / "routing.json", report, indent=1)
    return report


def _pm(summary: Estimate, i: int = 0, fmt: str = ".3g") -> str:
    return f"{summary.mean[i]:{fmt}} +- {summary.se[i]:{fmt}}"


def format_report(rep: RoutingReport) -> str:
    s = rep.settings
    S = s.stages
    lines = [f"N = {s.replicas}, {S} stages, seeds {s.seeds}; spread: mean over the "
             f"second half of training, then mean +- SE over seeds",
             "", "theta_std per stage (x 1e-3), before the outer step",
             f"{'run':<16}" + "".join(f"{'stage ' + str(k):>18}" for k in range(S)) + f"{'val loss (avg model)':>24}"]
    for name, row in rep.spread.items():
        th = row.theta_std_per_stage
        scaled = Estimate(mean=[v * 1e3 for v in th.mean], se=[v * 1e3 for v in th.se])
        lines.append(f"{name:<16}" + "".join(f"{_pm(scaled, k, '.3f'):>18}" for k in range(S))
                     + f"{_pm(row.val_loss_avg_model, 0, '.4f'):>24}")
    lines += ["", "random / fixed, paired by seed",
              f"{'method':<10}" + "".join(f"{'theta_std stage ' + str(k):>22}" for k in range(S))
              + f"{'val loss difference':>24}"]
    for variant, row in rep.ratios.items():
        lines.append(f"{variant:<10}" + "".join(f"{_pm(row.theta_std_random_over_fixed, k, '.3f'):>22}"
                                                 for k in range(S))
                     + f"{_pm(row.val_loss_random_minus_fixed, 0, '+.4f'):>24}")
    lines += ["", f"stage skipping (noloco, random routing); half of the middle stages removed: "
                  f"{s.removed_halves} in turn",
              f"{'skip p':>7}{'val loss':>20}{'half removed':>20}{'increase':>20}"]
    for p, row in rep.skipping.items():
        lines.append(f"{p:>7}{_pm(row.val_loss, 0, '.4f'):>20}{_pm(row.val_loss_half_removed, 0, '.4f'):>20}"
                     f"{_pm(row.increase, 0, '.4f'):>20}")
    return "\n".join(lines)
