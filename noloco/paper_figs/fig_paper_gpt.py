"""Claim: the paper's GPT experiments, regenerated on the toolkit's CPU model beside the paper's numbers.
(a) Fig 3B: NoLoCo's weight spread across replicas over a run with warm-up and cosine decay, normalised by its
maximum, follows the learning rate (Pearson r in the legend; the paper reports 0.91 to 0.97). (b) Fig 4:
without outer synchronisation, random pipeline routing against fixed chains, paired by seed: the ratio of the
weight spread and of the validation perplexity over training (the paper: spread about 15 % lower, perplexity
up to about 4 % higher with random routing; dotted lines). (c) Table 2 in miniature: final validation
perplexity (exp of the mean replica loss) against the data-parallel width DP for ddp, DiLoCo and NoLoCo at 1
and 2 pipeline stages (NoLoCo routes randomly at PP 2), mean and 2 standard errors over seeds.

Reads the measured study ``docs/data/paper_gpt.json`` (``noloco llm study paper``, which writes
paper_gpt.json into its --out; copy it there to refresh the figure); trains nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from noloco.paper_figs import style
from noloco.paper_figs.reports import MissingStudy
from noloco.studies.reports import Estimate, Fig3b, Fig4, PaperGptReport, Table2

NAME = "paper_gpt"
CACHED = False  # the study's JSON is the cache
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "paper_gpt.json"
METHOD_STYLE = {"ddp": ("ddp", style.BLACK), "diloco": ("DiLoCo", style.VERMILION), "noloco": ("NoLoCo", style.BLUE)}
PP_STYLE = {1: ("-", "o"), 2: ("--", "s")}


def params(quick: bool, data: str | None = None) -> dict:
    return {"data": str(data or DEFAULT_DATA)}


def compute(data: str) -> dict:
    from noloco.infra.errors import DataError
    from noloco.infra.files import read_json

    try:
        doc = read_json(data, required=("fig3b", "fig4", "table2", "settings"))
        return {"path": data, **PaperGptReport.from_json(doc).to_json()}
    except DataError as err:
        return MissingStudy(path=data, missing=str(err)).to_json()


def _band(ax, x, band: Estimate, colour, label, scale=1.0):
    mean, se = np.asarray(band.mean, dtype=float) * scale, 2 * np.asarray(band.se, dtype=float) * scale
    ax.plot(x, mean, color=colour, marker="o", ms=3, label=label)
    ax.fill_between(x, mean - se, mean + se, color=colour, alpha=0.2, lw=0)


def _fig3b(ax, d: Fig3b) -> None:
    step = np.asarray(d.step)
    r = d.pearson.weight_std
    _band(ax, step, d.weight_std_normalised, style.BLUE, f"weight std ÷ max\n(r = {r.mean:.2f} ± {2 * r.se:.2f})")
    lr = np.asarray(d.lr, dtype=float)
    ax.plot(step, lr / lr.max(), color=style.ORANGE, ls="--", label="learning rate ÷ max")
    ax.axvline(d.warmup, color="grey", lw=0.8, ls=":")
    lo, hi = d.paper_pearson
    ax.set(xlabel="inner step", ylabel="value ÷ its maximum (ratio)", ylim=(0, 1.32),
           title=f"(a) Fig 3B: NoLoCo, DP {d.dp}")
    ax.legend(loc="upper right", title=f"paper: r = {lo:g} to {hi:g}", title_fontsize=7.5, fontsize=7.5)


def _fig4(ax, d: Fig4) -> None:
    step = np.asarray(d.step)
    _band(ax, step, d.weight_std_ratio, style.BLUE, "weight std")
    _band(ax, step, d.perplexity_ratio, style.VERMILION, "perplexity")
    ax.axhline(1, color="grey", lw=0.8)
    paper = (d.paper.weight_std_ratio, d.paper.perplexity_ratio_max)
    ax.axhline(paper[0], color=style.BLUE, lw=1, ls=":")
    ax.axhline(paper[1], color=style.VERMILION, lw=1, ls=":")
    bands = [np.asarray(e.mean) + sign * 2 * np.asarray(e.se)
             for e in (d.weight_std_ratio, d.perplexity_ratio) for sign in (-1, 1)]
    values = np.concatenate(bands + [list(paper)])
    span = values.max() - values.min()
    ax.set(xlabel="inner step", ylabel="random ÷ fixed routing (ratio)",
           ylim=(values.min() - 0.1 * span, values.max() + 0.45 * span),
           title=f"(b) Fig 4: no sync, DP {d.dp}, PP {d.pp}")
    ax.legend(loc="upper right", title="dotted: the paper's", title_fontsize=7.5, fontsize=7.5)


def _table2(ax, d: Table2) -> None:
    from matplotlib.lines import Line2D

    cells = d.cells
    dps = sorted({c.dp for c in cells})
    pps = sorted({c.pp for c in cells})
    for method, (name, colour) in METHOD_STYLE.items():
        for k, pp in enumerate(pps):
            rows = sorted((c for c in cells if c.pp == pp), key=lambda c: c.dp)
            x = np.array([c.dp for c in rows], dtype=float) * (1 + 0.04 * (k - 0.5))
            mean = np.array([c.method(method).perplexity.mean for c in rows])
            se = np.array([c.method(method).perplexity.se for c in rows])
            ls, marker = PP_STYLE.get(pp, ("-.", "^"))
            ax.errorbar(x, mean, yerr=2 * se, color=colour, ls=ls, marker=marker, ms=4, capsize=2)
    ax.set_xscale("log", base=2)
    ax.set_xticks(dps, labels=[str(v) for v in dps])
    ax.minorticks_off()
    handles = [Line2D([], [], color=c, label=n) for n, c in METHOD_STYLE.values()]
    handles += [Line2D([], [], color="grey", ls=PP_STYLE.get(p, ("-.", "^"))[0], marker=PP_STYLE.get(p, ("-.", "^"))[1],
                       label=f"PP {p}") for p in pps]
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi + 0.5 * (hi - lo))
    ax.set(xlabel="data-parallel replicas DP", ylabel="final validation perplexity", title="(c) Table 2, miniature")
    ax.legend(handles=handles, loc="upper left", ncols=2, fontsize=7.5)


def draw(data: dict):
    fig, axs = style.figure(3)
    missing = MissingStudy.of(data)
    if missing:
        for ax in axs[0]:
            ax.set_axis_off()
        path = str(missing.path)
        path = path if len(path) <= 80 else "..." + path[-77:]  # a long path would run off the canvas
        fig.text(0.5, 0.5, f"no GPT paper study at\n{path}\nrun: noloco llm study paper "
                           f"--out runs/paper-study\nand copy runs/paper-study/paper_gpt.json there",
                 ha="center", va="center", fontsize=10, wrap=True,
                 bbox={"facecolor": "white", "edgecolor": style.VERMILION})
        return fig
    a, b, c = axs[0]
    report = PaperGptReport.from_json(data)
    _fig3b(a, report.fig3b)
    _fig4(b, report.fig4)
    _table2(c, report.table2)
    return fig
