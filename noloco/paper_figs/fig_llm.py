"""Claim: in real training of a small GPT, NoLoCo (random pairs, no all-reduce) reaches a
validation loss of the averaged model close to DiLoCo's and data parallel's at the same
tokens, while its replicas keep a small, bounded weight spread (DiLoCo and data parallel:
zero, the replicas are identical), and that spread is what the theory predicts from the
inputs measured inside the run, with no fitted constant.

Reads the runs already on disk (every metrics.jsonl under --llm-runs, default runs/: `noloco llm train`,
`noloco llm validate`, or a user's own loop under `noloco.Observer`, whose rows have no token count: then
the x axis is the outer step); trains nothing. Runs whose configurations differ only in the seed are one
setting: a line for the mean over seeds and a band for their range. The prediction is
:func:`noloco.advice.predict.predict` on each run (it reads the run's inputs.jsonl; docs/llm_check.md). Says so
when there is no run, and how to make one.

Each setting's ``forecast`` is :func:`noloco.advice.forecast.forecast` of each seed's run from its first
quarter of outer steps (docs/advice.md; None where a run has too few steps, no inputs or no finite forecast),
averaged over seeds with its 80 % interval. ``draw`` plots it in the setting's colour from the step it
starts: dotted with its interval as a band where the advice stands behind it, dash-dotted with hollow markers
and no band where it does not (``flagged``: a seed's forecast carries the advice's ``flags``, or the measured
spread leaves its interval), so a forecast that runs away is not read as one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from noloco.infra.record import JsonRecord
from noloco.paper_figs import style

NAME = "llm"
CACHED = False     # the runs are the cache
MAX_SETTINGS = 6
SYMBOLS = {"replicas": "N", "group_size": "n", "alpha": "α", "beta": "β", "gamma": "γ", "inner_steps": "H"}
#: settings that change how a run is logged or run, not what it trains: never in a label
BOOKKEEPING = {"eval_every", "ckpt_every", "val_windows", "device", "replica_mode", "dtype"}
IDENTICAL = 1e-7   # weight_std below this: identical replicas up to float round-off


@dataclass(frozen=True)
class Band(JsonRecord):
    """Mean and range over seeds, per outer step (NaN where no seed has the step)."""

    mean: Any
    low: Any
    high: Any


@dataclass(frozen=True)
class ForecastLine(JsonRecord):
    """A setting's forecast line (:func:`_forecast_line`): per shared outer step, the mean over seeds."""

    outer_step: list
    weight_std: list
    low: list
    high: list
    flags: list
    outside: list
    flagged: bool


@dataclass(frozen=True)
class Setting(JsonRecord):
    """One setting's lines: its seeds' validation loss, measured and predicted spread, and forecast."""

    NESTED = {"val": Band, "measured": Band, "predicted": Band, "forecast": ForecastLine}

    label: str
    method: Any
    seeds: int
    dirs: list
    outer_step: list
    tokens: Optional[list]  # None: an observer's rows count outer steps only
    val: Band
    measured: Band
    predicted: Band
    forecast: Optional[ForecastLine]


@dataclass(frozen=True)
class LlmFigure(JsonRecord):
    """The figure's data: the first :data:`MAX_SETTINGS` settings under ``root`` of ``total``."""

    NESTED = {"settings": (list, Setting)}

    root: str
    settings: list
    total: int


@dataclass(frozen=True)
class RunForecast:
    """One run's forecast: {outer step: (forecast, low, high)}, the advice's flags, the steps outside it."""

    rows: dict
    flags: list
    outside: list


@dataclass(frozen=True)
class Run:
    """One run folder as the figure reads it."""

    dir: str
    rows: list  # MetricsRow
    predicted: dict  # {outer step: predicted weight_std}
    forecast: Optional[RunForecast]


def params(quick: bool, runs: str = "runs") -> dict:
    return {"runs": runs}


def _read_rows(path: Path) -> list:
    """The metrics rows of ``path`` (:class:`noloco.advice.run_rows.MetricsRow`); a cut or foreign line left out."""
    from noloco.advice.run_rows import MetricsRow
    from noloco.infra.files import read_regular_text

    try:
        text = read_regular_text(path)  # a regular file of a sane size: a pipe would block, a huge one fill memory
    except (OSError, ValueError) as err:
        from noloco.infra.errors import warn

        warn(f"{path} left out: {getattr(err, 'strerror', None) or err}")
        return []
    rows = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # a line cut by an interrupted run
        if isinstance(obj, dict) and isinstance(obj.get("outer_step"), int):  # skip foreign lines
            rows.append(MetricsRow.from_json(obj))
    return rows


def _read_config(run: Path) -> tuple | None:
    """The run's method, outer steps and configuration, the outer step's settings flattened in (None when
    unreadable)."""
    from noloco.advice.run_rows import RunResult
    from noloco.infra.errors import DataError
    from noloco.infra.files import read_json

    try:
        setting = RunResult.from_json(read_json(run / "result.json", required=("config",))).setting()
        return setting.get("method"), setting.get("outer_steps"), setting
    except (DataError, KeyError, TypeError, ValueError):
        return None


def _predicted(run: Path) -> dict:
    """{outer step: predicted weight_std} of the zero-constant prediction; {} when it cannot be made."""
    try:
        from noloco.infra.errors import ConfigError, DataError
        from noloco.advice.predict import predict

        rows = predict(run).rows
    except (ImportError, ConfigError, DataError, KeyError, TypeError, ValueError):
        return {}
    return {r.outer_step: r.predicted for r in rows if r.predicted is not None}


def _forecast(run: Path, outer_steps: int | None) -> RunForecast | None:
    """The run's forecast from its first quarter (of its ``outer_steps``, as its configuration reads), ``outside``
    the steps whose measured spread leaves the interval; None when none can be made or none of it is finite."""
    try:
        from noloco.infra.errors import ConfigError, DataError
        from noloco.advice.forecast import forecast

        rep = forecast(run, from_step=int(outer_steps) // 4)
    except (ImportError, ConfigError, DataError, KeyError, TypeError, ValueError):
        return None
    finite = [r for r in rep.rows if all(np.isfinite((r.forecast, r.low, r.high)))]
    if not finite:
        return None
    return RunForecast(rows={r.outer_step: (r.forecast, r.low, r.high) for r in finite},
                       flags=rep.flags, outside=[r.outer_step for r in finite if r.measured is not None
                                                 and not r.low <= r.measured <= r.high])


def _forecast_line(runs: list) -> ForecastLine | None:
    """The seeds' forecasts averaged over the outer steps they share; ``flagged`` when any seed's is."""
    per_seed = [run.forecast for run in runs if run.forecast]
    if not per_seed:
        return None
    steps = sorted(set.intersection(*(set(f.rows) for f in per_seed)))
    mean = lambda k: [float(np.mean([f.rows[s][k] for f in per_seed])) for s in steps]  # noqa: E731
    flags = sorted({flag.split(":")[0] for f in per_seed for flag in f.flags})  # the kinds: "not settled", ...
    outside = sorted({s for f in per_seed for s in f.outside})
    return ForecastLine(outer_step=steps, weight_std=mean(0), low=mean(1), high=mean(2), flags=flags,
                        outside=outside, flagged=bool(flags or outside))


def _stats(values) -> Band:
    """Mean and range over seeds (rows) of a (seeds, steps) table with None for missing."""
    a = np.array([[np.nan if v is None else v for v in row] for row in values], dtype=float)
    missing = np.isnan(a).all(0)
    a = np.where(missing, 0.0, a)  # a step no seed has: NaN below, without numpy's warning
    mean, low, high = (np.where(missing, np.nan, f(a, axis=0)) for f in (np.nanmean, np.nanmin, np.nanmax))
    return Band(mean=mean, low=low, high=high)


#: the model's shape: one item of a label ("model L2 d64") where it differs, not one item per dimension
SHAPE = {"layers": "L", "width": "d", "heads": "h", "mlp_hidden": "m", "ctx": "ctx", "batch": "b"}
#: the outer step's settings, which a method fixes in part (diloco: n = N, gamma 0): named after the others
OUTER_KEYS = {"replicas", "group_size", "alpha", "beta", "gamma", "momentum"}
#: the most characters a label takes, its items cut there (then "+k more"): a key stays within its panel's width
LABEL_CHARS = 52


def _short(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _labels(methods: list, configs: list) -> list:
    """Each setting named by its method and what differs between the settings: the outer step's symbols first, the
    model's shape as one item, at most :data:`LABEL_ITEMS` items; settings that would read alike get #1, #2."""
    order = list(SYMBOLS)
    keys = sorted({k for c in configs if c for k in c} - {"seed", "method"} - BOOKKEEPING,
                  key=lambda k: (order.index(k) if k in order else len(order), k))
    differ = [k for k in keys if len({json.dumps(c.get(k)) for c in configs if c}) > 1]
    shape = [k for k in SHAPE if k in differ]
    # what the method does not already say first: a value that differs between runs of one method
    within = {k for k in differ if any(len({json.dumps(c.get(k)) for n, c in zip(methods, configs) if c and n == m}) > 1
                                       for m in {n for n, c in zip(methods, configs) if c})}
    parts = [[k] for k in differ if k not in SHAPE]
    if shape:  # one item, after the outer step's symbols
        parts.insert(sum(k in SYMBOLS for k in differ), shape)
    # stable, the order above within each kind: what varies within a method, then what the method does not fix
    parts.sort(key=lambda ks: (not within & set(ks), bool(OUTER_KEYS & set(ks))))
    labels = []
    for method, c in zip(methods, configs):
        items = ["model " + " ".join(f"{SHAPE[k]}{_short(c.get(k))}" for k in ks) if ks is shape else
                 f"{SYMBOLS.get(ks[0], ks[0])} = {_short(c.get(ks[0]))}" for ks in parts]
        label, shown = str(method), 0
        for item in items:  # as many as fit in LABEL_CHARS, the count of the rest after them
            rest = len(items) - shown - 1
            if shown and len(f"{label}, {item}") + (len(f", +{rest} more") if rest else 0) > LABEL_CHARS:
                break
            label, shown = f"{label}, {item}", shown + 1
        labels.append(label + (f", +{len(items) - shown} more" if shown < len(items) else ""))
    seen = {label: labels.count(label) for label in labels}
    count: dict[str, int] = {}
    for i, label in enumerate(labels):
        if seen[label] > 1:
            count[label] = count.get(label, 0) + 1
            labels[i] = f"{label} #{count[label]}"
    return labels


def _metrics_files(root: Path, depth: int = 6) -> list:
    """Every metrics.jsonl under ``root``, symbolic links to run folders followed (each real folder once, so a
    link back up cannot loop), at most ``depth`` levels down."""
    import os

    found, seen = [], set()
    for here, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(here)
        level = len(Path(here).relative_to(root).parts)
        if real in seen or level > depth:
            dirs[:] = []
            continue
        seen.add(real)
        dirs.sort()
        if "metrics.jsonl" in files:
            found.append(Path(here) / "metrics.jsonl")
    return sorted(found)


def compute(runs: str) -> dict:
    root = Path(runs)
    groups: dict[str, tuple] = {}
    for path in _metrics_files(root) if root.is_dir() else []:
        rows = _read_rows(path)
        if not rows:
            continue
        method, outer_steps, cfg = _read_config(path.parent) or (None, None, None)
        where = str(path.parent.relative_to(root))
        key = json.dumps({k: v for k, v in cfg.items() if k != "seed"}, sort_keys=True) if cfg else where
        # an unreadable run is its own setting, named by its folder
        _, _, runs_of = groups.setdefault(key, (method, cfg, []) if cfg else (where, {"method": where}, []))
        runs_of.append(Run(dir=where, rows=rows, predicted=_predicted(path.parent),
                           forecast=_forecast(path.parent, outer_steps)))
    # method comparisons (`noloco llm train`) first, then sweep runs
    ordered = sorted(groups.values(), key=lambda g: ("validate" in g[2][0].dir, g[2][0].dir))
    settings = []
    shown = ordered[:MAX_SETTINGS]
    for (method, _, group), label in zip(shown, _labels([g[0] for g in shown], [g[1] for g in shown])):
        steps = sorted(set.intersection(*({r.outer_step for r in run.rows} for run in group)))
        at = [{r.outer_step: r for r in run.rows} for run in group]
        settings.append(Setting(
            label=label, method=method, seeds=len(group), dirs=[run.dir for run in group],
            outer_step=steps,
            tokens=[at[0][s].tokens for s in steps] if all(a[s].tokens is not None for a in at for s in steps)
            else None,
            val=_stats([[a[s].val_loss_avg_model for s in steps] for a in at]),
            measured=_stats([[a[s].weight_std for s in steps] for a in at]),
            predicted=_stats([[run.predicted.get(s) for s in steps] for run in group]),
            forecast=_forecast_line(group)))
    return LlmFigure(root=str(runs), settings=settings, total=len(groups)).to_json()


def _line(ax, x, band: Band, colour, **kw):
    """The mean over seeds, and the seeds' range as a band."""
    ax.plot(x, band.mean, color=colour, **kw)
    ax.fill_between(x, band.low, band.high, color=colour, alpha=0.2, lw=0)


def _positive(band: Band) -> Band:
    """``band`` with the values a log axis cannot show (a spread of 0: replicas that start equal) left out."""
    keep = lambda v: np.where(np.array(v, dtype=float) > 0, np.array(v, dtype=float), np.nan)  # noqa: E731
    return Band(mean=keep(band.mean), low=keep(band.low), high=keep(band.high))


#: how a forecast is drawn: dotted with its interval where the advice stands behind it; dash-dotted with hollow
#: markers and no interval where it is flagged or the measured spread leaves the interval
FORECAST = {"ls": ":"}
FLAGGED = {"ls": "-.", "lw": 1.1, "marker": "o", "ms": 3.5, "mfc": "white"}


def _placeholder(fig, axs, root: str) -> None:
    for ax in axs:
        ax.set_axis_off()
    fig.text(0.5, 0.5, f"no LLM run (a folder with metrics.jsonl) under {root}/\n\n"
             f"make one: noloco llm train --preset cpu-tiny --out {root}/pilot\n"
             "(or noloco.Observer in your own loop, docs/own_run.md)\n"
             f"then: noloco figs --only llm --llm-runs {root}", ha="center", va="center", fontsize=10, wrap=True,
             bbox={"facecolor": "white", "edgecolor": style.VERMILION})


def draw(data: dict):
    from matplotlib.lines import Line2D
    from matplotlib.ticker import EngFormatter

    figure = LlmFigure.from_json(data)
    if not figure.settings:
        fig, axs = style.figure(2)
        _placeholder(fig, axs[0], figure.root)
        return fig
    fig, (a, b), keys = style.keyed_figure(2)
    # tokens where every run counts them; outer steps otherwise (an observer's run)
    by_tokens = all(s.tokens for s in figure.settings)
    kinds = [Line2D([], [], color="grey", marker="o", ms=3, label="measured"),
             Line2D([], [], color="grey", ls="--", label="predicted from the run's inputs")]
    positive = False
    for s, colour, marker in zip(figure.settings, style.PALETTE, style.MARKERS):
        x = np.array(s.tokens if by_tokens else s.outer_step, dtype=float)
        seeds = f" ({s.seeds} seeds)" if s.seeds > 1 else ""
        _line(a, x, s.val, colour, marker=marker, ms=3, label=s.label + seeds)
        measured = np.array(s.measured.mean, dtype=float)
        if np.nanmax(measured, initial=0.0) <= IDENTICAL:  # nothing to draw on a log axis
            if f"{s.method}: 0, identical replicas" not in [k.get_label() for k in kinds]:
                kinds.append(Line2D([], [], ls="", label=f"{s.method}: 0, identical replicas"))
            continue
        positive = True
        _line(b, x, _positive(s.measured), colour, marker=marker, ms=3)
        _line(b, x, _positive(s.predicted), colour, ls="--")
        f = s.forecast
        if f:
            # tokens grow by the same count every outer step
            fx = np.array(f.outer_step, dtype=float) * (x[-1] / s.outer_step[-1] if by_tokens else 1.0)
            b.plot(fx, f.weight_std, color=colour, **(FLAGGED if f.flagged else FORECAST))
            if not f.flagged:
                b.fill_between(fx, f.low, f.high, color=colour, alpha=0.1, lw=0)
    forecasts = [s.forecast for s in figure.settings if s.forecast]
    if any(not f.flagged for f in forecasts):
        kinds.append(Line2D([], [], color="grey", label="forecast from the first quarter", **FORECAST))
    if any(f.flagged for f in forecasts):
        kinds.append(Line2D([], [], color="grey", label="forecast, flagged or outside its interval", **FLAGGED))
    xlabel = "training tokens (count)" if by_tokens else "outer step (count)"
    if not any(np.isfinite(np.array(s.val.mean, dtype=float)).any() for s in figure.settings):
        a.text(0.5, 0.5, "no validation loss in these runs\n(Observer.log(step, val_loss_avg_model=...))",
               transform=a.transAxes, ha="center", va="center", fontsize=8.5)
    a.set(xlabel=xlabel, ylabel="val. loss, averaged model (nats/byte)",
          title="loss (band: range over seeds)")
    b.set(xlabel=xlabel, ylabel="weight std across replicas (weight units)",
          title="replica spread: measured and predicted")
    if by_tokens:  # 20k, not 20000: long counts side by side read as one number
        for ax in (a, b):
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    if positive:  # a log axis needs one positive value
        b.set_yscale("log")
    style.key(keys[0], *a.get_legend_handles_labels())
    style.key(keys[1], kinds)
    if figure.total > len(figure.settings):
        root = figure.root if len(figure.root) <= 40 else "..." + figure.root[-37:]  # stays on the canvas
        fig.suptitle(f"first {len(figure.settings)} of {figure.total} settings under {root}/")
    return fig
