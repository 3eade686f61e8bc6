"""The paper's GPT experiments (Fig 3B, Fig 4, Table 2) regenerated on the CPU model, beside the paper's numbers.

``noloco llm study paper --out runs/paper-study`` trains, for every seed, on one model and one
inner optimiser (:data:`FULL`: the ``paper`` preset's plain Adam, warm-up then cosine to lr/10, on its cpu-small
model) and at equal tokens (a global batch split over the DP replicas):

* Table 2 in miniature: ddp, diloco and noloco at DP = ``--replicas`` 4, 8, 16 and PP = ``--stages`` 1, 2; at
  PP 2 noloco routes randomly (as the paper's NoLoCo does), diloco and ddp use fixed chains (for ddp routing
  changes nothing: its replicas are identical). diloco here is noloco's outer step with n = N (alpha 0.5,
  beta 0.7, H 50), so the table isolates the group average;
* the paper's DiLoCo as configured there (alpha 0.3, beta 0.7, H 100) at one (DP, PP), against the table's
  noloco run (alpha 0.5, H 50, pairs) at the same tokens;
* Fig 3B: the weight spread of the noloco runs over training against the learning rate (Pearson r);
* Fig 4: no outer synchronisation (``local``) with fixed and with random routing; the ratios random / fixed
  of the weight spread and of the perplexity over training, paired by seed.

A run whose folder holds a finished run with the same settings is reused, so an interrupted study continues
where it stopped. It writes ``paper_gpt.json`` (every number of the tables and the curves of the figure
``paper_figs/fig_paper_gpt.py``) and prints the tables. The trend checks follow rules fixed before the study
ran (:func:`grows`, :func:`at_or_below`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noloco.infra.errors import ConfigError
from noloco.infra.files import output_dir, write_json
from noloco.llm_check.config import build
from noloco.studies.reports import (ByRouting, ConfiguredRun, Correlations, Estimate, Fig3b, Fig4, GapToDdp,
                                    MethodCell, PaperCell, PaperConfigs, PaperFig4, PaperGptReport, PaperSettings,
                                    Peak, Table2, Table2Cell, Trend)
from noloco.studies.seeds import SeedRun, band, train_seed
from noloco.theory.stats import mean_se

SCHEMA = "paper-gpt-study"
SEEDS = (0, 1, 2)
TABLE_METHODS = ("ddp", "diloco", "noloco")
#: the number of standard errors (over seeds) a trend needs
SE_RULE = 2.0


@dataclass(frozen=True)
class PaperDiLoCo:
    """The paper's DiLoCo: its outer step (alpha, beta) and its inner phase H."""

    alpha: float
    beta: float
    inner_steps: int


@dataclass(frozen=True)
class Plan:
    """What the study trains. ``run``: the TrainConfig fields every run shares on top of the ``paper`` preset;
    ``global_batch`` windows per inner step, split over the DP replicas; runs with outer curves (noloco, local)
    evaluate every ``curve_every`` outer steps, ddp and diloco every ``final_every``; ``fig3b``, ``fig4`` and
    ``paper_cell`` are (DP, PP); ``paper_diloco`` the paper's DiLoCo outer step."""

    run: dict
    global_batch: int
    dp: tuple
    pp: tuple
    curve_every: int
    final_every: int
    fig3b: tuple
    fig4: tuple
    paper_cell: tuple
    paper_diloco: PaperDiLoCo


#: The full study: the ``paper`` preset's model (2 blocks, width 64, 4 heads, context 64; plain Adam betas
#: 0.9/0.999, no weight decay, clip 1, cosine to lr/10), at the cpu-small preset's learning rate (the paper's
#: 6e-4 belongs to its 125M model).
FULL = Plan(run=dict(inner_steps=50, outer_steps=20, warmup=100, lr=3e-3, val_windows=64),
            global_batch=32, dp=(4, 8, 16), pp=(1, 2), curve_every=1, final_every=5,
            fig3b=(8, 1), fig4=(4, 2), paper_cell=(8, 2), paper_diloco=PaperDiLoCo(alpha=0.3, beta=0.7, inner_steps=100))
#: a smoke test of the same pipeline (well under a minute)
QUICK = Plan(run=dict(layers=1, heads=2, width=16, ctx=16, inner_steps=3, outer_steps=4, warmup=2, lr=3e-3,
                      val_windows=8),
             global_batch=8, dp=(2, 4), pp=(1, 2), curve_every=1, final_every=2,
             fig3b=(4, 1), fig4=(2, 2), paper_cell=(4, 2), paper_diloco=PaperDiLoCo(alpha=0.3, beta=0.7, inner_steps=6))

#: the paper's Table 2's Small model (FSDP / DiLoCo / NoLoCo final validation perplexity) at the (DP, PP) of
#: this study, with its accelerator count; Reddit then C4
PAPER_TABLE2 = {(8, 1): (8, (25.5, 27.6, 27.3), (29.1, 35.4, 34.5)),
                (4, 2): (8, (25.7, 26.8, 26.4), (29.1, 32.1, 31.3)),
                (8, 2): (16, (25.5, 27.6, 27.2), (29.1, 34.0, 33.1)),
                (16, 2): (32, (25.5, 29.7, 29.1), (29.1, 39.1, 37.7))}
PAPER_FIG3B = (0.91, 0.97)  # Pearson r of weight std with the learning rate
PAPER_FIG4 = PaperFig4(weight_std_ratio=0.85, perplexity_ratio_max=1.04)  # small model, DP 4: 15 % lower, <= 4 % higher


# ----------------------------------------------------------------- statistics (pure, tested by hand)

def pearson(x, y) -> float:
    """Pearson's correlation of two equally long samples; NaN when either is constant or shorter than 2."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"pearson needs two 1-d samples of one length, not shapes {x.shape} and {y.shape}")
    if len(x) < 2:
        return math.nan
    dx, dy = x - x.mean(), y - y.mean()
    denom = math.sqrt(float(dx @ dx) * float(dy @ dy))
    return float(dx @ dy) / denom if denom > 0 else math.nan


def summary(values) -> Estimate:
    """The mean, standard error (std with ddof 1 over sqrt(n)) and values of per-seed values."""
    values = [float(v) for v in values]
    mean, se = mean_se(np.asarray(values))
    return Estimate(mean=mean, se=se, values=values)


def grows(differences) -> Trend:
    """Rule of trend (1), fixed before the study ran: a paired per-seed difference (the gap at the largest DP
    minus the gap at the smallest) shows growth when its mean is positive by more than :data:`SE_RULE`
    standard errors over seeds."""
    s = summary(differences)
    return Trend(mean=s.mean, se=s.se, values=s.values, holds=bool(s.mean > SE_RULE * s.se),
                 rule=f"mean > {SE_RULE:g} SE (paired by seed)")


def at_or_below(differences) -> Trend:
    """Rule of trend (2), fixed before the study ran: noloco is *at or below* diloco when the paired per-seed
    difference noloco - diloco is at most :data:`SE_RULE` standard errors (not significantly above; equal
    runs, a difference of exactly 0, are at), and *below* when it is below minus that."""
    s = summary(differences)
    return Trend(mean=s.mean, se=s.se, values=s.values, holds=bool(s.mean <= SE_RULE * s.se),
                 below=bool(s.mean < -SE_RULE * s.se),
                 rule=f"at or below: mean <= {SE_RULE:g} SE; below: mean < -{SE_RULE:g} SE (paired by seed)")


# ----------------------------------------------------------------- the runs

STEP = lambda r: r.step
LR = lambda r: r.lr
WEIGHT_STD = lambda r: r.weight_std
THETA_STD = lambda r: r.theta_std
PERPLEXITY = lambda r: r.perplexity


def _plan(quick: bool) -> Plan:
    return QUICK if quick else FULL


def _cell(dp: int, pp: int) -> str:
    return f"dp{dp}-pp{pp}"


def _table_routing(method: str, pp: int) -> str:
    return "random" if method == "noloco" and pp > 1 else "fixed"


def _config(plan: Plan, method: str, dp: int, pp: int, seed: int, routing: str = "fixed", **fields):
    if plan.global_batch % dp:
        raise ConfigError(f"global batch {plan.global_batch} is not divisible by DP {dp}")
    every = plan.curve_every if method in ("noloco", "local") else plan.final_every
    values = {**plan.run, "eval_every": every, **fields}
    return build("paper", method, **values, replicas=dp, batch=plan.global_batch // dp, stages=pp,
                 routing=routing, seed=seed)


def jobs(plan: Plan) -> dict:
    """Every run of the study: ``{name: (method, dp, pp, routing, extra fields)}``."""
    out = {}
    for method in TABLE_METHODS:
        for pp in plan.pp:
            for dp in plan.dp:
                out[f"{method}-{_cell(dp, pp)}"] = (method, dp, pp, _table_routing(method, pp), {})
    dp, pp = plan.fig4
    for routing in ("fixed", "random"):
        out[f"local-{routing}-{_cell(dp, pp)}"] = ("local", dp, pp, routing, {})
    dp, pp = plan.paper_cell
    d = plan.paper_diloco
    total = _config(plan, "diloco", dp, pp, 0).total_inner_steps  # the inner steps every run of the plan takes
    if total % d.inner_steps:
        raise ConfigError(f"the paper's DiLoCo H {d.inner_steps} does not divide the run's {total} inner steps")
    out[f"diloco-paper-{_cell(dp, pp)}"] = ("diloco", dp, pp, "fixed", dict(
        alpha=d.alpha, beta=d.beta, inner_steps=d.inner_steps, outer_steps=total // d.inner_steps))
    return out


def train_all(out: Path, plan: Plan, seeds, threads: int | None, progress: bool | None) -> dict:
    """``{name: [SeedRun per seed]}`` for every job, trained or reused."""
    todo = jobs(plan)
    configs = {(name, seed): _config(plan, method, dp, pp, seed, routing, **extra)
               for name, (method, dp, pp, routing, extra) in todo.items() for seed in seeds}  # all checked first
    bar = None
    if (sys.stderr.isatty() if progress is None else progress):
        from tqdm import tqdm

        bar = tqdm(total=len(configs), desc="paper study", unit="run", leave=False)
    runs: dict[str, list[SeedRun]] = {}
    for (name, seed), cfg in configs.items():
        runs.setdefault(name, []).append(train_seed(cfg, out / name / f"seed{seed}", threads,
                                                    ("step", "lr", "perplexity", "weight_std")))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return runs


# ----------------------------------------------------------------- the figures' data and the tables

def _correlations(cell: list) -> Correlations:
    return Correlations(*(summary([pearson(s.curve(pick), s.curve(LR)) for s in cell])
                          for pick in (WEIGHT_STD, THETA_STD)))


def fig3b(runs: dict, plan: Plan) -> Fig3b:
    """Weight spread over training (normalised by its maximum) and the learning rate, the noloco run at
    ``plan.fig3b``; Pearson r of weight_std (after the outer step) and of theta_std (before it) with the
    learning rate for every noloco setting of the table."""
    dp, pp = plan.fig3b
    seeds = runs[f"noloco-{_cell(dp, pp)}"]
    weight = [s.curve(WEIGHT_STD) for s in seeds]
    norm = [w / w.max() for w in weight]
    peaks = [int(s.curve(STEP)[np.argmax(w)]) for s, w in zip(seeds, weight)]
    correlations = {_cell(d, p): _correlations(runs[f"noloco-{_cell(d, p)}"]) for p in plan.pp for d in plan.dp}
    return Fig3b(dp=dp, pp=pp, warmup=seeds[0].config.warmup, step=seeds[0].curve(STEP).astype(int).tolist(),
                 lr=seeds[0].curve(LR).tolist(), weight_std_normalised=band(norm), weight_std=band(weight),
                 peak_step=peaks, final_over_max=summary([n[-1] for n in norm]),
                 pearson=correlations[_cell(dp, pp)], pearson_by_setting=correlations, paper_pearson=list(PAPER_FIG3B))


def _per_stage(run: SeedRun) -> np.ndarray:
    return np.asarray([r.weight_std_per_stage for r in run.rows], dtype=float)


def fig4(runs: dict, plan: Plan) -> Fig4:
    """Random / fixed routing without outer synchronisation, paired by seed: the ratios of weight_std (all
    parameters and per stage) and of the perplexity at every evaluation; summaries over the second half of
    training (weight_std: ratio of the second-half means) and at the end."""
    dp, pp = plan.fig4
    by_routing = {r: runs[f"local-{r}-{_cell(dp, pp)}"] for r in ("fixed", "random")}
    fixed, rand = by_routing.values()
    pairs = list(zip(fixed, rand))
    step = fixed[0].curve(STEP)
    half = step > step[-1] / 2
    weight_ratio = [b.curve(WEIGHT_STD) / a.curve(WEIGHT_STD) for a, b in pairs]
    ppl_ratio = [b.curve(PERPLEXITY) / a.curve(PERPLEXITY) for a, b in pairs]
    second_half = [b.curve(WEIGHT_STD)[half].mean() / a.curve(WEIGHT_STD)[half].mean() for a, b in pairs]
    stages = stage_half = None
    if pp > 1:
        stages = band([_per_stage(b) / _per_stage(a) for a, b in pairs])
        stage_half = band([_per_stage(b)[half].mean(0) / _per_stage(a)[half].mean(0) for a, b in pairs])
    ppl = band(ppl_ratio)
    peak = int(np.argmax(ppl.mean))
    curves = lambda pick: ByRouting(*(band([s.curve(pick) for s in run]) for run in by_routing.values()))
    return Fig4(dp=dp, pp=pp, step=step.astype(int).tolist(), weight_std_ratio=band(weight_ratio),
                perplexity_ratio=ppl, weight_std_ratio_per_stage=stages, weight_std=curves(WEIGHT_STD),
                perplexity=curves(PERPLEXITY), weight_std_ratio_second_half=summary(second_half),
                weight_std_ratio_second_half_per_stage=stage_half,
                perplexity_ratio_final=summary([r[-1] for r in ppl_ratio]),
                perplexity_ratio_max=Peak(step=int(step[peak]), mean=ppl.mean[peak], se=ppl.se[peak]),
                paper=PAPER_FIG4)


def _final(run: list, pick) -> list[float]:
    return [pick(s.rows[-1]) for s in run]


def _method_cell(run: list, routing: str) -> MethodCell:
    return MethodCell(routing=routing, perplexity=summary(_final(run, PERPLEXITY)),
                      val_loss_replicas_mean=summary(_final(run, lambda r: r.val_loss_replicas_mean)),
                      val_loss_avg_model=summary(_final(run, lambda r: r.val_loss_avg_model)))


def _configured(run: list, routing: str, **shown) -> ConfiguredRun:
    return ConfiguredRun(**shown, routing=routing, perplexity=summary(_final(run, PERPLEXITY)),
                         val_loss_avg_model=summary(_final(run, lambda r: r.val_loss_avg_model)))


def table2(runs: dict, plan: Plan) -> Table2:
    """Final perplexity and averaged-model loss per (DP, PP) and method; the two trend checks; the paper's
    DiLoCo configuration against noloco."""
    cells = []
    for pp in plan.pp:
        for dp in plan.dp:
            ddp, diloco, noloco = (_method_cell(runs[f"{m}-{_cell(dp, pp)}"], _table_routing(m, pp))
                                   for m in TABLE_METHODS)
            paper = None
            if (dp, pp) in PAPER_TABLE2:
                acc, reddit, c4 = PAPER_TABLE2[(dp, pp)]
                paper = PaperCell(accelerators=acc, reddit=dict(zip(TABLE_METHODS, reddit)),
                                  c4=dict(zip(TABLE_METHODS, c4)))
            cells.append(Table2Cell(dp=dp, pp=pp, paper=paper, ddp=ddp, diloco=diloco, noloco=noloco,
                                    noloco_minus_diloco=at_or_below(np.subtract(noloco.perplexity.values,
                                                                                diloco.perplexity.values))))
    gaps = {}
    for method in ("diloco", "noloco"):
        for pp in plan.pp:
            per_dp = {}
            for dp in plan.dp:
                ours = np.asarray(_final(runs[f"{method}-{_cell(dp, pp)}"], PERPLEXITY))
                ddp_ppl = np.asarray(_final(runs[f"ddp-{_cell(dp, pp)}"], PERPLEXITY))
                per_dp[dp] = 100 * (ours / ddp_ppl - 1)
            lo, hi = min(plan.dp), max(plan.dp)
            steps = [summary(per_dp[b] - per_dp[a]) for a, b in zip(plan.dp, plan.dp[1:])]
            gaps[f"{method}-pp{pp}"] = GapToDdp(method=method, pp=pp, dp=list(plan.dp),
                                                gap_percent=[summary(per_dp[dp]) for dp in plan.dp], steps=steps,
                                                largest_minus_smallest=grows(per_dp[hi] - per_dp[lo]))
    dp, pp = plan.paper_cell
    paper_diloco = runs[f"diloco-paper-{_cell(dp, pp)}"]
    noloco = runs[f"noloco-{_cell(dp, pp)}"]
    d, n = paper_diloco[0].config, noloco[0].config
    configs = PaperConfigs(
        dp=dp, pp=pp,
        diloco=_configured(paper_diloco, "fixed", alpha=d.outer.alpha, beta=d.outer.beta, inner_steps=d.inner_steps,
                           outer_steps=d.outer_steps),
        noloco=_configured(noloco, _table_routing("noloco", pp), alpha=n.outer.alpha, inner_steps=n.inner_steps,
                           group_size=n.outer.group_size),
        noloco_minus_diloco=at_or_below(np.subtract(_final(noloco, PERPLEXITY), _final(paper_diloco, PERPLEXITY))))
    return Table2(cells=cells, gap_to_ddp=gaps, paper_configs=configs)


def run_study(out, seeds=SEEDS, quick: bool = False, threads: int | None = 1,
              progress: bool | None = None) -> PaperGptReport:
    """Train (or reuse) every run under ``out``, compute the figures' data and the tables, write
    ``out/paper_gpt.json``; the report."""
    if len(seeds) < 2:
        raise ConfigError(f"{len(seeds)} seed(s): at least 2 are needed for a standard error")
    out = output_dir(out)
    plan = _plan(quick)
    start = time.perf_counter()
    runs = train_all(out, plan, tuple(seeds), threads, progress)
    first = runs[f"noloco-{_cell(*plan.fig3b)}"][0]
    cfg, result = first.config, first.result
    settings = PaperSettings(
        quick=quick, seeds=list(seeds), preset="paper", inner_steps=cfg.inner_steps, outer_steps=cfg.outer_steps,
        warmup=cfg.warmup, lr=cfg.lr, val_windows=cfg.val_windows, layers=cfg.layers, width=cfg.width,
        heads=cfg.heads, ctx=cfg.ctx, adam_beta2=cfg.adam_beta2, weight_decay=cfg.weight_decay, clip=cfg.clip,
        min_lr_frac=cfg.min_lr_frac, schedule=cfg.schedule, n_params=result.n_params,
        global_batch=plan.global_batch,
        tokens_per_run=cfg.outer_steps * cfg.inner_steps * plan.global_batch * cfg.ctx, dp=list(plan.dp),
        pp=list(plan.pp), noloco_outer=dataclasses.asdict(cfg.outer), runs=sum(len(v) for v in runs.values()),
        torch=result.torch, python=result.python)
    report = PaperGptReport(schema=SCHEMA, settings=settings,
                            train_wall_s=sum(s.result.wall_s for run in runs.values() for s in run),
                            this_call_s=time.perf_counter() - start,
                            fig3b=fig3b(runs, plan), fig4=fig4(runs, plan), table2=table2(runs, plan))
    write_json(out / "paper_gpt.json", report, indent=1)
    return report


# ----------------------------------------------------------------- text

def _pm(s, fmt: str = ".3f", i: int | None = None) -> str:
    """An :class:`Estimate` or :class:`Trend` as mean ± SE (the ``i``-th of a curve's)."""
    mean, se = (s.mean, s.se) if i is None else (s.mean[i], s.se[i])
    if mean is None or mean != mean:  # not defined (a constant curve has no correlation): NaN, null in the JSON
        return "-"
    return f"{mean:{fmt}} ± " + ("-" if se is None or se != se else f"{se:{fmt.lstrip('+')}}")


def format_report(rep: PaperGptReport) -> str:
    s, f3, f4, t2 = rep.settings, rep.fig3b, rep.fig4, rep.table2
    lines = [f"{s.layers} blocks, width {s.width}, context {s.ctx} ({s.n_params} parameters); Adam "
             f"lr {s.lr:g}, warm-up {s.warmup} then cosine to lr x {s.min_lr_frac:g}; "
             f"{s.outer_steps * s.inner_steps} inner steps of {s.global_batch} windows "
             f"({s.tokens_per_run} tokens per run); seeds {s.seeds}; mean ± SE over seeds; "
             f"{s.runs} runs, {rep.train_wall_s / 60:.1f} min of training",
             "", f"Fig 3B: noloco, DP {f3.dp}, PP {f3.pp}: weight_std / its maximum and the learning rate",
             f"{'step':>6}{'lr':>10}{'weight_std / max':>20}"]
    for i, step in enumerate(f3.step):
        lines.append(f"{step:>6}{f3.lr[i]:>10.2e}{_pm(f3.weight_std_normalised, '.3f', i):>20}")
    lines += [f"peak at step {f3.peak_step} (warm-up ends at {f3.warmup}); final / max {_pm(f3.final_over_max)}",
              f"Pearson r with the learning rate (paper: {f3.paper_pearson[0]} to {f3.paper_pearson[1]})",
              f"{'setting':<10}{'weight_std':>18}{'theta_std':>18}"]
    for cell, row in f3.pearson_by_setting.items():
        lines.append(f"{cell:<10}{_pm(row.weight_std):>18}{_pm(row.theta_std):>18}")
    stages = f4.weight_std_ratio_per_stage
    lines += ["", f"Fig 4: no synchronisation (local), DP {f4.dp}, PP {f4.pp}: random / fixed routing, "
                  f"paired by seed",
              f"{'step':>6}{'weight_std':>18}" + ("".join(f"{'stage ' + str(k):>18}" for k in
                                                         range(len(stages.mean[0]))) if stages else "")
              + f"{'perplexity':>18}"]
    for i, step in enumerate(f4.step):
        per = "".join(f"{stages.mean[i][k]:>11.3f} ± {stages.se[i][k]:.3f}"
                      for k in range(len(stages.mean[i]))) if stages else ""
        lines.append(f"{step:>6}{_pm(f4.weight_std_ratio, '.3f', i):>18}{per}"
                     f"{_pm(f4.perplexity_ratio, '.4f', i):>18}")
    peak, half = f4.perplexity_ratio_max, f4.weight_std_ratio_second_half_per_stage
    lines += [f"weight_std ratio over the second half {_pm(f4.weight_std_ratio_second_half)}"
              + (f" (per stage {', '.join(_pm(Estimate(mean=m, se=e)) for m, e in zip(half.mean, half.se))})"
                 if half else "")
              + f"; paper about {f4.paper.weight_std_ratio}",
              f"perplexity ratio at the end {_pm(f4.perplexity_ratio_final, '.4f')}, largest {peak.mean:.4f} ± "
              f"{peak.se:.4f} (step {peak.step}); paper up to about {f4.paper.perplexity_ratio_max}"]
    lines += ["", "Table 2: final validation perplexity (exp of the mean replica loss); paper: Small model, "
                  "FSDP / DiLoCo / NoLoCo, Reddit; C4",
              f"{'DP':>3}{'PP':>3}{'ddp':>17}{'diloco':>17}{'noloco':>17}{'noloco - diloco':>26}  paper"]
    for row in t2.cells:
        d, paper = row.noloco_minus_diloco, row.paper
        ptext = ("-" if paper is None else " / ".join(f"{v:g}" for v in paper.reddit.values()) + "; "
                 + " / ".join(f"{v:g}" for v in paper.c4.values()) + f" ({paper.accelerators} acc.)")
        verdict = "below" if d.below else "at" if d.holds else "above"
        lines.append(f"{row.dp:>3}{row.pp:>3}" + "".join(f"{_pm(row.method(m).perplexity, '.3f'):>17}"
                                                          for m in TABLE_METHODS)
                     + f"{_pm(d, '+.3f'):>19} {verdict:<6}  {ptext}")
    lines += ["", "averaged model's validation loss (nats/byte)",
              f"{'DP':>3}{'PP':>3}" + "".join(f"{m:>18}" for m in TABLE_METHODS)]
    for row in t2.cells:
        lines.append(f"{row.dp:>3}{row.pp:>3}" + "".join(f"{_pm(row.method(m).val_loss_avg_model, '.4f'):>18}"
                                                          for m in TABLE_METHODS))
    lines += ["", f"trend (1): gap to ddp, 100 (ppl / ppl_ddp - 1) %, grows with DP; rule: "
                  f"{next(iter(t2.gap_to_ddp.values())).largest_minus_smallest.rule}"]
    for row in t2.gap_to_ddp.values():
        g = row.largest_minus_smallest
        lines.append(f"{row.method:<7} PP {row.pp}: " + ", ".join(
            f"DP {dp} {_pm(v, '.2f')}" for dp, v in zip(row.dp, row.gap_percent))
                     + f"; DP {row.dp[-1]} - DP {row.dp[0]} {_pm(g, '+.2f')}: "
                     + ("holds" if g.holds else "does not hold"))
    cells = t2.cells
    lines.append(f"trend (2): noloco at or below diloco ({cells[0].noloco_minus_diloco.rule}): "
                 f"{sum(c.noloco_minus_diloco.holds for c in cells)} of {len(cells)} settings, below in "
                 f"{sum(c.noloco_minus_diloco.below for c in cells)}")
    pc = t2.paper_configs
    dl, nl, d = pc.diloco, pc.noloco, pc.noloco_minus_diloco
    lines += ["", f"the paper's configurations at DP {pc.dp}, PP {pc.pp}, equal tokens: DiLoCo alpha "
                  f"{dl.alpha:g}, H {dl.inner_steps} ({dl.routing} routing): {_pm(dl.perplexity)} "
                  f"(averaged model {_pm(dl.val_loss_avg_model, '.4f')}); NoLoCo alpha {nl.alpha:g}, "
                  f"H {nl.inner_steps}, n {nl.group_size} ({nl.routing} routing): {_pm(nl.perplexity)} "
                  f"(averaged model {_pm(nl.val_loss_avg_model, '.4f')}); noloco - diloco {_pm(d, '+.3f')}: "
                  + ("below" if d.below else "at or below" if d.holds else "above")]
    return "\n".join(lines)
