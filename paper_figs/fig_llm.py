"""Claim: in real training of a small GPT, NoLoCo (random pairs, no all-reduce) reaches a
validation loss of the averaged model close to DiLoCo's and data parallel's at the same
tokens, while its replicas keep a small, bounded weight spread (DiLoCo and data parallel:
zero, the replicas are identical).

Reads the cached runs of `noloco llm train` / `noloco llm validate` (every metrics.jsonl
under --llm-runs, default runs/); trains nothing. Says so when no run is cached."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from noloco.paper_figs import style

NAME = "llm"
CACHED = False     # the runs are the cache
MAX_RUNS = 8


def params(quick: bool, runs: str = "runs") -> dict:
    return {"runs": runs}


def _describe(path: Path) -> tuple[str, str]:
    """(method, short hyperparameter note) from the run's result.json, when it has one."""
    from noloco.infra.errors import DataError
    from noloco.infra.files import read_json

    try:
        cfg = read_json(path.parent / "result.json", required=("config",))["config"]
        outer = cfg.get("outer", cfg)  # the outer step's settings, nested or flat
        note = (f"N={outer['replicas']} n={outer.get('group_size', '?')} gamma={outer.get('gamma', 0):g} "
                f"lr={cfg.get('lr', 0):g}")
        return cfg["method"], note
    except (DataError, KeyError, TypeError, ValueError):
        return path.parent.name, "unfinished"


def compute(runs: str) -> dict:
    root = Path(runs)
    found = []
    for path in sorted(root.glob("**/metrics.jsonl")) if root.is_dir() else []:
        rows = []
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a line cut by an interrupted run
        rows = [r for r in rows if isinstance(r, dict) and "tokens" in r]  # skip foreign or damaged lines
        if rows:
            method, note = _describe(path)
            found.append({"label": str(path.parent.relative_to(root)), "method": method, "note": note,
                          "tokens": [r["tokens"] for r in rows],
                          "val": [r.get("val_loss_avg_model") for r in rows],
                          "std": [r.get("weight_std") for r in rows]})
    # method comparisons (`noloco llm train`) first, then sweep runs
    found.sort(key=lambda r: ("validate" in r["label"], r["label"]))
    return {"root": str(runs), "runs": found[:MAX_RUNS], "total": len(found)}


def draw(data: dict):
    fig, axs = style.figure(2)
    a, b = axs[0]
    if not data["runs"]:
        fig.text(0.5, 0.5, f"no cached LLM run under {data['root']}/\nrun: noloco llm train --preset cpu-small "
                 "--out runs/llm-cpu-small", ha="center", va="center", fontsize=11,
                 bbox={"facecolor": "white", "edgecolor": style.VERMILION})
    any_spread = False
    for run, colour, marker in zip(data["runs"], style.PALETTE, style.MARKERS):
        t = np.array(run["tokens"], dtype=float)
        val = np.array([np.nan if v is None else v for v in run["val"]], dtype=float)
        std = np.array([np.nan if v is None else v for v in run["std"]], dtype=float)
        a.plot(t, val, color=colour, marker=marker, ms=3, label=f"{run['label']}: {run['method']}, {run['note']}")
        positive = std > 1e-7  # identical replicas (float round-off): nothing to draw on a log axis
        b.plot(t[positive], std[positive], color=colour, marker=marker, ms=3)
        any_spread |= bool(positive.any())
    a.set(xlabel="training tokens (count)", ylabel="validation loss of averaged model (nats/byte)",
          title="LLM: loss")
    b.set(xlabel="training tokens (count)", ylabel="weight std across replicas (weight units)",
          title="LLM: replica spread")
    if data["runs"]:
        if any_spread:  # a log axis needs one positive value
            b.set_yscale("log")
        from matplotlib.ticker import NullFormatter

        for ax in (a, b):
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        fig.legend(*a.get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=6.5)
        b.text(0.02, 0.02, "identical replicas (n = N): no points", transform=b.transAxes, fontsize=7)
        if data["total"] > len(data["runs"]):
            fig.suptitle(f"first {len(data['runs'])} of {data['total']} cached runs under {data['root']}/")
    return fig
