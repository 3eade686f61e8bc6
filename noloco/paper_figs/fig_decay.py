"""Claim: with random pairs the expected replica variance shrinks by the factor rho(T)
per outer step that the exact second-moment recursion predicts, for every N; the pull
gamma speeds this up until the spread's stability edge, and larger N (a smaller chance
of meeting the same partner) decays a little more slowly.

Lines: rho(T) at the paper's alpha = 0.5, beta = 0.7, c = 0.395. Points: Monte Carlo of the
noise-free scalar model from independent initial offsets, per-step ratio of the mean
variance between two steps (the claim ``noloco.claims.decay_factor``), with 2 standard
errors; black bars: the exact recursion over the same window (it differs from rho(T)
where T has no spectral gap, near gamma = 0.3, and the figure says by how much there). For
N = 4 near the stability edge the points fall below the bar: the expected variance is carried by rare trials whose spread
decays slowly, which a few thousand trials under-sample (a typical run decays faster than
the expectation, by Jensen); the standard error cannot show that."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from noloco.infra.record import JsonRecord
from noloco.paper_figs import common, style

NAME = "decay"
REPLICAS = (4, 8, 16, 64)
#: the annotation's leader: curved, thin and filled-headed, unlike any line the legend keys (the theory is grey)
LEADER = {"arrowstyle": "-|>", "color": style.BLACK, "lw": 0.8, "connectionstyle": "arc3,rad=-0.2", "shrinkB": 6,
          "mutation_scale": 9}


def params(quick: bool) -> dict:
    return {"points": 5 if quick else 10, "trials": 300 if quick else 2000, "t1": 10, "t2": 30}


@dataclass(frozen=True)
class DecayFigure(JsonRecord):
    """The figure's data: rho(T) over gamma per N (``lines``), the Monte Carlo's (mean, se) and the exact
    recursion's ratio over the window ``t`` at ``gamma_mc`` (``mc``, ``window``), each keyed by str(N)."""

    gamma: Any
    gamma_mc: Any
    t: list
    lines: dict
    mc: dict
    window: dict
    title: str


def compute(points: int, trials: int, t1: int, t2: int) -> dict:
    from noloco.claims import decay_factor
    from noloco.theory import numeric
    from noloco.theory.config import group_kappa

    c, _ = common.paper_c_s2()
    o = common.PAPER.outer
    gamma = np.linspace(0, 2.2, 221)
    gamma_mc = np.linspace(0.1, 1.7, points)
    out = DecayFigure(gamma=gamma, gamma_mc=gamma_mc, t=[t1, t2], lines={}, mc={}, window={},
                      title=f"n = {o.group_size}, alpha = {o.alpha:g}, beta = {o.beta:g}, c = {c:.3f}")
    for N in REPLICAS:
        out.lines[str(N)] = numeric.variance_decay_factor(o.alpha, o.beta, gamma, c, group_kappa(N, o.group_size),
                                                             o.momentum)
        # with a window, the claim predicts the exact recursion's ratio over it: where T has no
        # spectral gap it differs from rho(T), and that is what the Monte Carlo estimates
        claims = [decay_factor(outer=common.outer(replicas=N, gamma=float(g)), curvature=common.CURVATURE,
                               window=(t1, t2), trials=trials, seed=1000 * N + i) for i, g in enumerate(gamma_mc)]
        out.window[str(N)] = [claim.predicted for claim in claims]
        out.mc[str(N)] = [(claim.measured, claim.se) for claim in claims]
    return out.to_json()


def _widest_gap(d: DecayFigure):
    """(gamma, window ratio, rho(T)) where the exact recursion over the window differs most from rho(T)."""
    gamma = np.array(d.gamma, dtype=float)
    gaps = [(abs(w - r), g, w, r) for N, line in d.lines.items()
            for g, w, r in zip(d.gamma_mc, d.window[N], np.interp(d.gamma_mc, gamma, line))]
    return max(gaps)[1:]


def draw(data: dict):
    from matplotlib.lines import Line2D

    fig, axs = style.figure(1)
    ax = axs[0][0]
    d = DecayFigure.from_json(data)
    t1, t2 = d.t
    handles = []
    for (N, line), colour, marker in zip(d.lines.items(), style.PALETTE, style.MARKERS):
        ax.plot(d.gamma, line, color=colour)
        mc = np.array(d.mc[N], dtype=float)
        ax.errorbar(d.gamma_mc, mc[:, 0], yerr=2 * mc[:, 1], fmt=marker, color=colour, mfc="white")
        handles.append(Line2D([], [], color=colour, marker=marker, mfc="white", label=f"N = {N}"))
        # a bar wider than the points, on top of them: where it leaves the line, the points follow it
        ax.plot(d.gamma_mc, d.window[N], "_", color=style.BLACK, ms=13, mew=1.6, zorder=5)
    handles += [Line2D([], [], color="grey", label="theory: decay factor ρ(T)"),
                Line2D([], [], color="grey", marker="o", ls="", mfc="white", label="Monte Carlo, steps "
                       f"{t1} to {t2} (± 2 SE)"),
                Line2D([], [], color=style.BLACK, marker="_", ls="", ms=13, mew=1.6,
                       label=f"exact recursion, steps {t1} to {t2}")]
    g, window, rho = _widest_gap(d)
    if abs(window - rho) > 0.02:  # visible at this scale: say why the points leave the line
        ax.annotate(f"no spectral gap here: over steps {t1} to {t2} the exact\nrecursion decays by {window:.3f} "
                    f"per step, not by ρ(T) = {rho:.3f}", (g, window), xytext=(0.98, 0.36), textcoords=ax.transAxes,
                    ha="right", va="top", fontsize=8, arrowprops=LEADER)
    ax.axhline(1, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="pull γ (dimensionless)", ylabel="replica-variance decay factor per outer step (ratio)",
           title=d.title.replace("alpha", "α").replace("beta", "β"), ylim=(0, 1.1))
    ax.legend(handles=handles, ncol=2, loc="lower left")
    return fig
