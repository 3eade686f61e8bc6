"""Claim: in real training of a small GPT, NoLoCo (random pairs, no all-reduce) reaches a
validation loss of the averaged model close to DiLoCo's and data parallel's at the same
tokens, while its replicas keep a small, bounded weight spread (DiLoCo and data parallel:
zero, the replicas are identical), and that spread is what the theory predicts from the
inputs measured inside the run, with no fitted constant.

Reads the cached runs of `noloco llm train` / `noloco llm validate` (every metrics.jsonl
under --llm-runs, default runs/); trains nothing. Runs whose configurations differ only in
the seed are one setting: a line for the mean over seeds and a band for their range. The
prediction is :func:`noloco.advice.predict.predict` on each run (it reads the run's
inputs.jsonl; docs/llm_check.md). Says so when no run is cached.

Each setting's ``forecast`` is :func:`noloco.advice.forecast.forecast` of each seed's run from its first
quarter of outer steps (docs/advice.md; None where a run has too few steps or no inputs, or the forecast is
flagged as not settled), averaged over seeds with its 80 % interval as a band: ``draw`` plots it dotted in
the setting's colour from the step it starts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from noloco.paper_figs import style

NAME = "llm"
CACHED = False     # the runs are the cache
MAX_SETTINGS = 6
SYMBOLS = {"replicas": "N", "group_size": "n", "alpha": "α", "beta": "β", "gamma": "γ", "inner_steps": "H"}
#: settings that change how a run is logged or run, not what it trains: never in a label
BOOKKEEPING = {"eval_every", "ckpt_every", "val_windows", "device", "replica_mode", "dtype"}
IDENTICAL = 1e-7   # weight_std below this: identical replicas up to float round-off


def params(quick: bool, runs: str = "runs") -> dict:
    return {"runs": runs}


def _rows(path: Path) -> list:
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut by an interrupted run
    return [r for r in rows if isinstance(r, dict) and "tokens" in r and "outer_step" in r]  # skip foreign lines


def _config(run: Path) -> dict | None:
    """The run's configuration, the outer step's settings flattened in (None when unreadable)."""
    from noloco.infra.errors import DataError
    from noloco.infra.files import read_json

    try:
        cfg = dict(read_json(run / "result.json", required=("config",))["config"])
        outer = cfg.pop("outer", {})
        return {**cfg, **outer}
    except (DataError, KeyError, TypeError, ValueError):
        return None


def _predicted(run: Path) -> dict:
    """{outer step: predicted weight_std} of the zero-constant prediction; {} when it cannot be made."""
    try:
        from noloco.infra.errors import ConfigError, DataError
        from noloco.advice.predict import predict

        rows = predict(run)["rows"]
    except (ImportError, ConfigError, DataError, KeyError, TypeError, ValueError):
        return {}
    return {r["outer_step"]: r["predicted"] for r in rows if r["predicted"] is not None}


def _forecast(run: Path, cfg: dict | None) -> dict:
    """{outer step: (forecast, low, high)} from the run's first quarter (``cfg``: its configuration, as
    :func:`_config` reads it); {} when none can be made or it is flagged as extrapolating."""
    try:
        from noloco.infra.errors import ConfigError, DataError
        from noloco.advice.forecast import forecast

        rep = forecast(run, from_step=int(cfg["outer_steps"]) // 4)
    except (ImportError, ConfigError, DataError, KeyError, TypeError, ValueError):
        return {}
    if any(f.startswith(("not settled", "too few", "the forecast recursion")) for f in rep["flags"]):
        return {}
    return {r["outer_step"]: (r["forecast"], r["low"], r["high"]) for r in rep["rows"]}


def _forecast_line(g: dict, tokens_per_step: float) -> dict | None:
    per_seed = [run["forecast"] for run in g["runs"] if run["forecast"]]
    if not per_seed:
        return None
    steps = sorted(set.intersection(*(set(f) for f in per_seed)))
    mean = lambda k: [float(np.mean([f[s][k] for f in per_seed])) for s in steps]  # noqa: E731
    return {"tokens": [s * tokens_per_step for s in steps], "weight_std": mean(0), "low": mean(1), "high": mean(2)}


def _stats(values) -> dict:
    """Mean and range over seeds (rows) of a (seeds, steps) table with None for missing."""
    a = np.array([[np.nan if v is None else v for v in row] for row in values], dtype=float)
    missing = np.isnan(a).all(0)
    a = np.where(missing, 0.0, a)  # a step no seed has: NaN below, without numpy's warning
    mean, low, high = (np.where(missing, np.nan, f(a, axis=0)) for f in (np.nanmean, np.nanmin, np.nanmax))
    return {"mean": mean, "low": low, "high": high}


def _labels(configs: list) -> list:
    """Each setting named by its method and the settings that differ between them."""
    order = list(SYMBOLS)
    keys = sorted({k for c in configs if c for k in c} - {"seed", "method"} - BOOKKEEPING,
                  key=lambda k: (order.index(k) if k in order else len(order), k))
    differ = [k for k in keys if len({json.dumps(c.get(k)) for c in configs if c}) > 1]
    return [c["method"] + "".join(f", {SYMBOLS.get(k, k)} = {c.get(k)}" for k in differ) for c in configs]


def compute(runs: str) -> dict:
    root = Path(runs)
    groups: dict[str, dict] = {}
    for path in sorted(root.glob("**/metrics.jsonl")) if root.is_dir() else []:
        rows = _rows(path)
        if not rows:
            continue
        cfg = _config(path.parent)
        where = str(path.parent.relative_to(root))
        key = json.dumps({k: v for k, v in cfg.items() if k != "seed"}, sort_keys=True) if cfg else where
        g = groups.setdefault(key, {"config": cfg or {"method": where}, "runs": []})
        g["runs"].append({"dir": where, "rows": rows, "predicted": _predicted(path.parent),
                          "forecast": _forecast(path.parent, cfg)})
    # method comparisons (`noloco llm train`) first, then sweep runs
    ordered = sorted(groups.values(), key=lambda g: ("validate" in g["runs"][0]["dir"], g["runs"][0]["dir"]))
    settings = []
    for g, label in zip(ordered[:MAX_SETTINGS], _labels([g["config"] for g in ordered[:MAX_SETTINGS]])):
        steps = sorted(set.intersection(*({r["outer_step"] for r in run["rows"]} for run in g["runs"])))
        at = [{r["outer_step"]: r for r in run["rows"]} for run in g["runs"]]
        settings.append({
            "label": label, "method": g["config"].get("method"), "seeds": len(g["runs"]),
            "dirs": [run["dir"] for run in g["runs"]], "outer_step": steps,
            "tokens": [at[0][s]["tokens"] for s in steps],
            "val": _stats([[a[s].get("val_loss_avg_model") for s in steps] for a in at]),
            "measured": _stats([[a[s].get("weight_std") for s in steps] for a in at]),
            "predicted": _stats([[run["predicted"].get(s) for s in steps] for run in g["runs"]]),
            "forecast": _forecast_line(g, at[0][steps[0]]["tokens"] / steps[0]) if steps else None,
        })
    return {"root": str(runs), "settings": settings, "total": len(groups)}


def _line(ax, x, stats, colour, **kw):
    """The mean over seeds, and the seeds' range as a band."""
    ax.plot(x, stats["mean"], color=colour, **kw)
    ax.fill_between(x, stats["low"], stats["high"], color=colour, alpha=0.2, lw=0)


def draw(data: dict):
    from matplotlib.lines import Line2D

    fig, axs = style.figure(2)
    a, b = axs[0]
    if not data["settings"]:
        for ax in (a, b):
            ax.set_axis_off()
        fig.text(0.5, 0.5, f"no cached LLM run under {data['root']}/\n\nrun: noloco llm train --preset cpu-small "
                 "--out runs/llm-cpu-small\nthen: noloco figs --only llm --llm-runs runs", ha="center", va="center",
                 fontsize=10, wrap=True, bbox={"facecolor": "white", "edgecolor": style.VERMILION})
        return fig
    kinds = [Line2D([], [], color="grey", marker="o", ms=3, label="measured"),
             Line2D([], [], color="grey", ls="--", label="predicted from the run's inputs")]
    positive = False
    for s, colour, marker in zip(data["settings"], style.PALETTE, style.MARKERS):
        t = np.array(s["tokens"], dtype=float)
        seeds = f" ({s['seeds']} seeds)" if s["seeds"] > 1 else ""
        _line(a, t, s["val"], colour, marker=marker, ms=3, label=s["label"] + seeds)
        measured = np.array(s["measured"]["mean"], dtype=float)
        if np.nanmax(measured, initial=0.0) <= IDENTICAL:  # nothing to draw on a log axis
            kinds.append(Line2D([], [], ls="", label=f"{s['method']}: 0, identical replicas"))
            continue
        positive = True
        _line(b, t, s["measured"], colour, marker=marker, ms=3)
        _line(b, t, s["predicted"], colour, ls="--")
        if s.get("forecast"):
            f = s["forecast"]
            b.plot(f["tokens"], f["weight_std"], ":", color=colour)
            if "low" in f and "high" in f:
                b.fill_between(f["tokens"], f["low"], f["high"], color=colour, alpha=0.1, lw=0)
    if any(s.get("forecast") for s in data["settings"]):
        kinds.append(Line2D([], [], color="grey", ls=":", label="forecast from the first quarter"))
    a.set(xlabel="training tokens (count)", ylabel="validation loss of averaged model (nats/byte)",
          title="loss (band: range over seeds)")
    b.set(xlabel="training tokens (count)", ylabel="weight std across replicas (weight units)",
          title="replica spread: measured and predicted")
    if positive:  # a log axis needs one positive value
        b.set_yscale("log")
    b.legend(handles=kinds, loc="best")
    handles, labels = a.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2 if max(map(len, labels)) <= 45 else 1)
    if data["total"] > len(data["settings"]):
        fig.suptitle(f"first {len(data['settings'])} of {data['total']} settings under {data['root']}/")
    return fig
