"""Claim: NoLoCo sits between data parallel and no communication at all. Left: validation perplexity
(the geometric mean over the domains an expert trained on, and over the held-out ones, mean over seeds
with 2 standard errors) against the bytes each replica sends during training, for ddp, diloco, noloco
and HDEE's domain-expert ensembles (homogeneous, heterogeneous in size, heterogeneous in steps, and the
project's combined extension: 0 bytes, mixed by the domain posterior with the cached prior), all trained
with one budget of matmul FLOPs on the same text. Right: every domain's perplexity divided by ddp's, the
domains held out of all training marked; below 1 a method beats data parallel there.

Reads the measured study ``docs/data/hdee.json`` (``noloco llm ensemble --out DIR`` writes DIR/hdee.json;
copy it there to refresh the figure); trains nothing. docs/hdee.md has the tables."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from noloco.paper_figs import style
from noloco.paper_figs.reports import MissingStudy
from noloco.studies.ensemble.records import EnsembleReport

NAME = "hdee"
CACHED = False  # the study's JSON is the cache
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "hdee.json"
COMMAND = "noloco llm ensemble --out DIR, then copy DIR/hdee.json to docs/data/"
#: the study's data-parallel configuration (its name in hdee.json), the right panel's reference
DDP = "ddp"
LABELS = {"homogeneous": "homogeneous", "size-heterogeneous": "size-heterogeneous",
          "step-heterogeneous": "step-heterogeneous", "combined": "combined (extension)", DDP: "data parallel",
          "diloco": "DiLoCo", "noloco": "NoLoCo"}
COLOURS = {"homogeneous": style.GREEN, "size-heterogeneous": style.PURPLE, "step-heterogeneous": style.ORANGE,
           "combined": style.SKY, DDP: style.BLACK, "diloco": style.BLUE, "noloco": style.VERMILION}
#: the part of the domains the left panel averages over, filled and open markers
PARTS = (("expert_domains", "o", "trained by an expert"), ("held_out", "s", "held out"))


def params(quick: bool, data: str | None = None) -> dict:
    return {"data": str(data or DEFAULT_DATA)}


def compute(data: str) -> dict:
    from noloco.infra.errors import ConfigError, DataError
    from noloco.infra.files import read_json

    try:
        doc = read_json(data, required=("per_domain", "averages", "communication", "settings", "evaluated", "domains"))
        return {"path": data, **EnsembleReport.from_json(doc).to_json()}
    except (DataError, ConfigError) as err:  # the study's settings out of range read as "no study" too
        return MissingStudy(path=data, missing=str(err)).to_json()


def _missing(fig, axs, missing: MissingStudy):
    for ax in axs:
        ax.set_axis_off()
    fig.text(0.5, 0.5, f"no ensemble study at {missing.path}\nrun: {COMMAND}", ha="center", va="center",
             fontsize=10, wrap=True, bbox={"facecolor": "white", "edgecolor": style.VERMILION})
    return fig


def draw(data: dict):
    fig, axs = style.figure(2)
    a, b = axs[0]
    missing = MissingStudy.of(data)
    if missing:
        return _missing(fig, (a, b), missing)
    report = EnsembleReport.from_json(data)
    configs = report.settings.configs
    sent_by = {c: report.communication[c].bytes_per_replica for c in configs}
    sent = [b for b in sent_by.values() if b > 0]
    zero = min(sent) / 30 if sent else 1.0  # where "no communication" sits on the log axis
    ensembles = [c for c in configs if sent_by[c] == 0]
    for c in configs:
        x = sent_by[c] or zero * (1.35 ** (ensembles.index(c) - (len(ensembles) - 1) / 2))
        for (part, marker, _), fill in zip(PARTS, (COLOURS[c], "white")):
            row = report.averages[c][part]
            if row.mean is None:
                continue
            se = row.se or 0.0
            y, low, high = (math.exp(row.mean + k * 2 * se) for k in (0, -1, 1))
            a.errorbar([x], [y], yerr=[[y - low], [high - y]], color=COLOURS[c], marker=marker, mfc=fill, ms=6,
                       capsize=3, lw=1.2, label=LABELS[c] if part == PARTS[0][0] and c == DDP else None)
    a.set_xscale("log")
    ticks = [zero] + [10.0 ** k for k in range(math.ceil(math.log10(min(sent) if sent else 10)),
                                              math.floor(math.log10(max(sent) if sent else 10)) + 1)]
    a.set_xticks(ticks, labels=["0"] + [f"$10^{{{round(math.log10(t))}}}$" for t in ticks[1:]])
    a.minorticks_off()
    a.set_xlim(zero / 3, (max(sent) if sent else 10) * 3)
    a.set(xlabel="bytes sent per replica during training (B)",
          ylabel="validation perplexity per byte\n(geometric mean over domains)",
          title=f"equal training FLOPs ({_power(report.budget.flops)}), {_seeds(len(report.settings.seeds))}")
    for (_, marker, text), fill in zip(PARTS, ("k", "white")):
        a.plot([], [], "k" + marker, mfc=fill, label=f"domains {text}")
    # the other configurations' colours are named by the right panel's legend
    a.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=7.5)

    names = report.evaluated
    held = {r.name for r in report.domains if r.held_out}
    x = np.arange(len(names))
    others = [c for c in configs if c != DDP]
    width = 0.7 / max(len(others), 1)
    if DDP in configs:
        ddp = np.array([report.per_domain[DDP][d].perplexity for d in names])
        top = 1.0
        for k, c in enumerate(others):
            ratio = np.array([report.per_domain[c][d].perplexity for d in names]) / ddp
            top = max(top, float(np.nanmax(ratio)))
            b.plot(x + (k - (len(others) - 1) / 2) * width, ratio, ls="none", marker=style.MARKERS[k],
                   color=COLOURS[c], label=LABELS[c])
        b.axhline(1, color=COLOURS[DDP], lw=0.8, ls=":")
        b.set_ylim(top=top + 0.45 * (top - b.get_ylim()[0]))  # room above the highest domain for the legend
    for lo, hi in _runs([d in held for d in names]):
        b.axvspan(lo - 0.5, hi + 0.5, color="grey", alpha=0.12, lw=0)
    b.set_xticks(x, labels=[d + (" (held out)" if d in held else "") for d in names], rotation=90, fontsize=7.5)
    b.set_xlim(-0.6, len(names) - 0.4)
    b.set(xlabel="domain (shaded: held out)", ylabel="perplexity ÷ data parallel's (ratio)",
          title="per domain")
    b.legend(loc="upper left", fontsize=7.5, ncol=2)
    return fig


def _power(x: float) -> str:
    """``x`` as mathtext, two significant digits: 3.9e12 -> ``$3.9 \\times 10^{12}$``."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"${mantissa} \\times 10^{{{int(exponent)}}}$"


def _seeds(count: int) -> str:
    return f"{count} seed" + ("s" if count != 1 else "")


def _runs(flags: list) -> list:
    """(first, last) index of every run of consecutive True."""
    out, start = [], None
    for i, f in enumerate(list(flags) + [False]):
        if f and start is None:
            start = i
        elif not f and start is not None:
            out.append((start, i - 1))
            start = None
    return out
