"""Claim: the whole trajectory of the expected replica variance, not only its limit,
follows the exact recursion v' = T v + s2 (1/n - 1/N) f: from identical initialisation
the spread rises to its stationary value; from scattered replicas it falls to it, fast
with the pull gamma and slowly (and to a higher level) without it.

Lines: the recursion (noloco.theory.numeric.spread_trajectory). Points: Monte Carlo of the scalar
model, mean over trials with 2 standard errors (both from the claim
``noloco.claims.transient_spread``). Paper setting unless stated (N = 8,
pairs, alpha 0.5, beta = gamma = 0.7, c = 0.395)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from noloco.infra.record import JsonRecord
from noloco.paper_figs import common, style

NAME = "transient"
CASES = (  # label, changes to the paper setting, initial replica offsets std
    ("paper, identical start", {}, 0.0),
    ("paper, scattered start", {}, 0.2),
    ("gamma = 0, scattered", {"gamma": 0.0}, 0.2),
    ("n = 4, scattered", {"group_size": 4}, 0.2),
)


def params(quick: bool) -> dict:
    return {"trials": 300 if quick else 3000, "steps": 30 if quick else 40}


@dataclass(frozen=True)
class Case(JsonRecord):
    """One start: the exact recursion's spread per outer step, the Monte Carlo's (mean, se), the worst z."""

    label: str
    theory: list
    mc: list
    se: list
    worst_z: Optional[float]


@dataclass(frozen=True)
class TransientFigure(JsonRecord):
    NESTED = {"cases": (list, Case)}

    steps: int
    cases: list


def compute(trials: int, steps: int) -> dict:
    from noloco.claims import transient_spread
    from noloco.claims.judge import Paths

    cases = []
    for i, (label, changes, scatter) in enumerate(CASES):
        claim = transient_spread(outer=common.outer(**changes), curvature=common.CURVATURE, scatter=scatter, steps=steps, trials=trials,
                                 seed=100 + i)
        paths = Paths.from_json(claim.details)
        cases.append(Case(label=label, theory=paths.predicted_path, mc=paths.measured_path, se=paths.se_path,
                          worst_z=claim.z))
    return TransientFigure(steps=steps, cases=cases).to_json()


def draw(data: dict):
    from matplotlib.lines import Line2D

    fig, axs = style.figure(1)
    ax = axs[0][0]
    f = TransientFigure.from_json(data)
    t = np.arange(f.steps + 1)
    handles = []
    for case, colour, marker in zip(f.cases, style.PALETTE, style.MARKERS):
        theory = np.array(case.theory, dtype=float)
        ax.plot(t, np.where(theory > 0, theory, np.nan), color=colour)  # an identical start is 0: off a log axis
        mc, se = np.array(case.mc, dtype=float), np.array(case.se, dtype=float)
        ax.errorbar(t[1::2], mc[1::2], yerr=2 * se[1::2], fmt=marker, color=colour, mfc="white", ms=4)
        label = case.label.replace("gamma", "γ") + (" (0 at t = 0)" if theory[0] <= 0 else "")
        handles.append(Line2D([], [], color=colour, marker=marker, mfc="white", label=label))
    handles += [Line2D([], [], color="grey", label="line: exact recursion"),
                Line2D([], [], color="grey", marker="o", ls="", mfc="white", label="points: Monte Carlo ± 2 SE")]
    ax.set(yscale="log", xlabel="outer step t (count)", ylabel="replica variance E z² (weight²)",
           title="transient spread, theory vs Monte Carlo")
    ax.legend(handles=handles, ncol=2, loc="upper right")
    return fig
