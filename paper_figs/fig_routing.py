"""Claim: random pipeline routing is NoLoCo's second way of keeping replicas together. Left: the
replicas' spread over training (theta_std, the inner weights before the outer step; mean over
seeds) of the last stage (thick) and of a middle stage (thin), fixed (dashed) vs random (solid)
routing, for noloco, diloco and the no-synchronisation ablation: routing pulls the last stage
together and spreads the middle ones slightly. Right: validation loss vs the probability of
skipping a middle stage in training, for the whole model and with half of its middle stages
removed (mean and standard error over seeds).

Reads the measured study ``docs/data/routing.json`` (``python -m noloco.llm_check.routing_study``, which
writes routing.json into its --out; copy it there to refresh the figure); trains nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from noloco.paper_figs import style

NAME = "routing"
CACHED = False  # the study's JSON is the cache
DEFAULT_DATA = Path(__file__).resolve().parents[1] / "docs" / "data" / "routing.json"


def params(quick: bool, data: str | None = None) -> dict:
    return {"data": str(data or DEFAULT_DATA)}


def compute(data: str) -> dict:
    from noloco.infra.errors import DataError
    from noloco.infra.files import read_json

    try:
        return {"path": data, **read_json(data, required=("curves", "skipping", "settings"))}
    except DataError as err:
        return {"path": data, "missing": str(err)}


def draw(data: dict):
    fig, axs = style.figure(2)
    a, b = axs[0]
    if "missing" in data:
        fig.text(0.5, 0.5, f"no routing study at {data['path']}\nrun: python -m noloco.llm_check.routing_study",
                 ha="center", va="center", fontsize=10, bbox={"facecolor": "white", "edgecolor": style.VERMILION})
        return fig
    colours = dict(zip(("noloco", "diloco", "no-sync"), style.PALETTE))
    s = data["settings"]
    last = s["stages"] - 1
    for name, curve in data["curves"].items():
        variant, routing = name.rsplit("-", 1)
        per_stage = np.asarray(curve["theta_std_per_stage"], dtype=float)
        style_ = dict(color=colours.get(variant, style.BLACK), ls="-" if routing == "random" else "--")
        a.plot(curve["outer_step"], per_stage[:, last], lw=2, label=f"{variant}, {routing} routing", **style_)
        a.plot(curve["outer_step"], per_stage[:, 1], lw=0.8, alpha=0.7, **style_)
    a.set_yscale("log")
    a.set(xlabel="outer step (count)", ylabel="theta_std before the outer step (weight units)",
          title=f"spread per stage, N = {s['replicas']}, {s['stages']} stages")
    a.text(0.02, 0.97, f"thick: last stage ({last}, with the head)\nthin: middle stage 1", transform=a.transAxes,
           fontsize=7, va="top")
    a.legend(fontsize=6.5, loc="lower left")
    probs = np.array([float(p) for p in data["skipping"]])
    for key, label, colour, marker in (("val_loss", "whole model", style.BLUE, "o"),
                                       ("val_loss_half_removed", "half of the middle stages removed",
                                        style.VERMILION, "s")):
        mean = np.array([row[key]["mean"][0] for row in data["skipping"].values()])
        se = np.array([row[key]["se"][0] for row in data["skipping"].values()])
        b.errorbar(probs, mean, yerr=se, color=colour, marker=marker, ms=4, capsize=3, label=label)
    b.set(xlabel="skip probability per middle stage (training)", ylabel="validation loss (nats/byte)",
          title="stage skipping (noloco, random routing)")
    b.legend(fontsize=7)
    return fig
