"""Claim: random pipeline routing is NoLoCo's second way of keeping replicas together. Left: the
replicas' spread over training (theta_std, the inner weights before the outer step; mean over
seeds), fixed (dashed) vs random (solid) routing, for noloco, diloco and the no-synchronisation
ablation. Right: validation loss vs the probability of skipping a middle stage in training, for
the whole model and with half of its middle stages removed (mean and standard error over seeds).

Reads the measured study ``docs/data/routing.json`` (``python -m llm_check.routing_study``, which
writes routing.json into its --out; copy it there to refresh the figure); trains nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from paper_figs import style

NAME = "routing"
CACHED = False  # the study's JSON is the cache
DEFAULT_DATA = Path(__file__).resolve().parents[1] / "docs" / "data" / "routing.json"


def params(quick: bool, data: str | None = None) -> dict:
    return {"data": str(data or DEFAULT_DATA)}


def compute(data: str) -> dict:
    from theory.io import DataError, read_json

    try:
        return {"path": data, **read_json(data, required=("curves", "skipping", "settings"))}
    except DataError as err:
        return {"path": data, "missing": str(err)}


def draw(data: dict):
    fig, axs = style.figure(2)
    a, b = axs[0]
    if "missing" in data:
        fig.text(0.5, 0.5, f"no routing study at {data['path']}\nrun: python -m llm_check.routing_study",
                 ha="center", va="center", fontsize=10, bbox={"facecolor": "white", "edgecolor": style.VERMILION})
        return fig
    colours = dict(zip(("noloco", "diloco", "no-sync"), style.PALETTE))
    for name, curve in data["curves"].items():
        variant, routing = name.rsplit("-", 1)
        a.plot(curve["outer_step"], curve["theta_std"], color=colours.get(variant, style.BLACK),
               ls="-" if routing == "random" else "--", marker="o" if routing == "random" else None, ms=3,
               label=f"{variant}, {routing} routing")
    a.set_yscale("log")
    s = data["settings"]
    a.set(xlabel="outer step (count)", ylabel="theta_std before the outer step (weight units)",
          title=f"replica spread, N = {s['replicas']}, {s['stages']} stages")
    a.legend(fontsize=6.5)
    probs = np.array([float(p) for p in data["skipping"]])
    for key, label, colour, marker in (("val_loss", "whole model", style.BLUE, "o"),
                                       ("val_loss_half_removed", "half of the middle stages removed",
                                        style.VERMILION, "s")):
        mean = np.array([row[key]["mean"][0] for row in data["skipping"].values()])
        se = np.array([row[key]["se"][0] for row in data["skipping"].values()])
        b.errorbar(probs, mean, yerr=se, color=colour, marker=marker, ms=4, capsize=3, label=label)
    b.set(xlabel="probability of skipping each middle stage in training", ylabel="validation loss (nats/byte)",
          title="stage skipping (noloco, random routing)")
    b.legend(fontsize=7)
    return fig
