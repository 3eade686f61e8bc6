"""Claim: random pipeline routing is NoLoCo's second way of keeping replicas together. Left: the
replicas' spread per pipeline stage with random routing divided by that with fixed routing
(theta_std, the inner weights before the outer step, averaged over the second half of training;
mean over seeds of the per-seed ratio, 2 standard errors), for noloco, diloco and the
no-synchronisation ablation, with the change of the final validation loss in the legend: routing
pulls the last stage (the one with the head) together, spreads the middle ones slightly and leaves
the loss unchanged. Right: validation loss of the averaged model vs the probability of skipping a
middle stage in training, for the whole model and with half of its middle stages removed (mean
and 2 standard errors over seeds). The spread over training per stage is in routing.json
(``curves``).

Reads the measured study ``docs/data/routing.json`` (``noloco llm study routing``, which
writes routing.json into its --out; copy it there to refresh the figure); trains nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from noloco.infra.files import NUMBER
from noloco.paper_figs import style
from noloco.paper_figs.reports import MissingStudy
from noloco.studies.reports import RoutingReport

NAME = "routing"
#: a bar at least this tall (ratio) holds its value inside; 0.35 of the axis' 1.9 is ~70 px at gallery size
INSIDE = 0.35
CACHED = False  # the study's JSON is the cache
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "routing.json"


def params(quick: bool, data: str | None = None) -> dict:
    return {"data": str(data or DEFAULT_DATA)}


_SERIES = {"mean": [NUMBER], "se": [NUMBER]}
#: what :func:`draw` reads of the study's JSON (noloco.infra.files.shape_error): a file of another shape is drawn
#: as missing, naming what is wrong
SHAPE = {"settings": {"stages": int, "replicas": int},
         "ratios": {...: {"theta_std_random_over_fixed": _SERIES, "val_loss_random_minus_fixed": _SERIES}},
         "skipping": {...: {"val_loss": _SERIES, "val_loss_half_removed": _SERIES}}, "curves": dict}


def compute(data: str) -> dict:
    from noloco.infra.errors import DataError

    try:
        return {"path": data, **_read_study(data).to_json()}
    except DataError as err:  # a record's own error names the class, not the file: the file goes first
        return MissingStudy(path=data, missing=str(err) if data in str(err) else f"{data}: {err}").to_json()


def _read_study(data: str) -> RoutingReport:
    """The study's file, its series checked: as many standard errors as means, one per stage for a spread ratio
    (DataError otherwise)."""
    from noloco.infra.errors import DataError
    from noloco.infra.files import read_json

    doc = read_json(data, required=("curves", "skipping", "settings", "ratios"), types=SHAPE)
    stages = doc["settings"]["stages"]
    for name, series in [(f"ratios.{v}.{k}", x) for v, row in doc["ratios"].items() for k, x in row.items()] + \
            [(f"skipping.{p}.{k}", x) for p, row in doc["skipping"].items() for k, x in row.items()]:
        if not series["mean"] or len(series["mean"]) != len(series["se"]) or (
                name.startswith("ratios") and name.endswith("fixed") and "theta" in name
                and len(series["mean"]) != stages):
            raise DataError(f"{data} has {name} of {len(series['mean'])} means and {len(series['se'])} standard "
                            f"errors; expected as many, one per stage ({stages}) for a spread ratio")
    bad = [p for p in doc["skipping"] if not _is_number(p)]
    if bad:
        raise DataError(f"{data} has skipping.{bad[0]!r}; expected a skip probability")
    return RoutingReport.from_json(doc)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


NAMES = {"noloco": "NoLoCo", "diloco": "DiLoCo", "no-sync": "no synchronisation"}


def draw(data: dict):
    fig, axs = style.figure(2)
    a, b = axs[0]
    missing = MissingStudy.of(data)
    if missing:
        for ax in (a, b):
            ax.set_axis_off()
        fig.text(0.5, 0.5, f"no routing study at {missing.path}\nrun: noloco llm study routing",
                 ha="center", va="center", fontsize=10, wrap=True,
                 bbox={"facecolor": "white", "edgecolor": style.VERMILION})
        return fig
    report = RoutingReport.from_json(data)
    s = report.settings
    stages = np.arange(s.stages)
    width = 0.8 / len(report.ratios)
    for k, ((variant, row), colour) in enumerate(zip(report.ratios.items(), style.PALETTE)):
        ratio, loss = row.theta_std_random_over_fixed, row.val_loss_random_minus_fixed
        x, mean, err = stages + (k - (len(report.ratios) - 1) / 2) * width, ratio.mean, 2 * np.array(ratio.se)
        a.bar(x, mean, width, yerr=err, color=colour, capsize=2,
              label=f"{NAMES.get(variant, variant)}: loss {loss.mean[0]:+.3f} ± {2 * loss.se[0]:.3f}")
        for xi, m, e in zip(x, mean, err):
            # the value inside its bar, from the foot: clear of the error caps; above the cap where the bar is short
            inside = m > INSIDE
            a.annotate(f"{m:.2f}", (xi, 0 if inside else m + e), xytext=(0, 3), textcoords="offset points",
                       rotation=90, ha="center", va="bottom", fontsize=7.5, color="white" if inside else style.BLACK)
    a.axhline(1, color="grey", lw=0.8, ls=":")
    a.set_xticks(stages, labels=[f"{t}" for t in stages[:-1]] + [f"{stages[-1]} (head)"])
    a.set(xlabel="pipeline stage", ylabel="replica spread, random ÷ fixed routing (ratio)", ylim=(0, 1.9),
          title=f"random vs fixed routing, N = {s.replicas}")
    a.legend(loc="upper left", title="val. loss change, random − fixed (± 2 SE)", title_fontsize=8)
    probs = np.array([float(p) for p in report.skipping])
    for pick, label, colour, marker, shift in ((lambda row: row.val_loss, "whole model", style.BLUE, "o", -0.005),
                                               (lambda row: row.val_loss_half_removed,
                                                "half of the middle stages removed", style.VERMILION, "s", 0.005)):
        mean = np.array([pick(row).mean[0] for row in report.skipping.values()])
        se = np.array([pick(row).se[0] for row in report.skipping.values()])
        b.errorbar(probs + shift, mean, yerr=2 * se, color=colour, marker=marker, capsize=3, label=label)
    b.set(xlabel="skip probability per middle stage in training", ylabel="validation loss (nats/byte)",
          title="stage skipping (NoLoCo, random routing)", xticks=probs)
    b.legend(loc="upper left")
    return fig
