"""Claim: NoLoCo's replicas stay together only for a bounded pull gamma, and the bound
depends on the outer momentum alpha, on the group size n and, weakly, on N; the Nesterov
convention (torch SGD(nesterov=True)) has a smaller region than heavy-ball once alpha
exceeds about 0.3, and there the bound barely moves with n.

Stable region in (alpha, gamma) at the paper's beta = 0.7 and inner phase (c = 0.395): the
replica mean contracts and the second moments of the deviations decay (spectral radii of
the exact quadratic theory below 1 - 1e-9, the one classification of noloco.theory.stability). Each line bounds the region of one group size n."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from noloco.infra.record import JsonRecord
from noloco.paper_figs import common, style

NAME = "stability"
REPLICAS = (4, 16, 64)
GROUPS = (2, 4, 8)


def params(quick: bool) -> dict:
    return {"resolution": 120 if quick else 400}


@dataclass(frozen=True)
class StabilityFigure(JsonRecord):
    """The (alpha, gamma) grid at the paper's beta and c; ``regions``: 1 where stable, keyed ``"momentum|N|n"``."""

    alpha: Any
    gamma: Any
    beta: float
    c: float
    regions: dict


def compute(resolution: int) -> dict:
    from noloco.theory import numeric
    from noloco.theory.config import MOMENTUM_CONVENTIONS, group_kappa

    c, _ = common.paper_c_s2()
    beta = common.PAPER.outer.beta
    alpha = np.linspace(0, 0.99, resolution)[:, None]
    gamma = np.linspace(0, 4, resolution)[None, :]
    regions = {}
    for m in MOMENTUM_CONVENTIONS:
        mean_ok = numeric.mean_stable(alpha, beta, gamma, c, m)
        for N in REPLICAS:
            for n in GROUPS:
                if n < N and N % n == 0:
                    ok = mean_ok & numeric.spread_stable(alpha, beta, gamma, c, group_kappa(N, n), m)
                    regions[f"{m}|{N}|{n}"] = ok.astype(np.int8)
    return StabilityFigure(alpha=alpha.ravel(), gamma=gamma.ravel(), beta=beta, c=c, regions=regions).to_json()


def draw(data: dict):
    fig, axs = style.figure(3, 2, sharex=True, sharey=True)
    f = StabilityFigure.from_json(data)
    A, G = np.array(f.alpha), np.array(f.gamma)
    colours = dict(zip(GROUPS, (style.BLUE, style.VERMILION, style.GREEN)))
    for row, m in enumerate(("heavy-ball", "nesterov")):
        for col, N in enumerate(REPLICAS):
            ax = axs[row][col]
            for n in GROUPS:
                key = f"{m}|{N}|{n}"
                if key not in f.regions:
                    continue
                ok = np.array(f.regions[key], dtype=float)
                if n == 2:
                    ax.contourf(G, A, ok, levels=[0.5, 1.5], colors=[style.SKY], alpha=0.35)
                ax.contour(G, A, ok, levels=[0.5], colors=[colours[n]], linewidths=1.5)
                ax.plot([], [], color=colours[n], label=f"n = {n}")
            ax.set_title(f"{m}, N = {N}")
            if row == 1:
                ax.set_xlabel("pull γ (dimensionless)")
            if col == 0:
                ax.set_ylabel("outer momentum α")
            if row == 0 and col == 2:
                ax.legend(loc="upper right", title="boundary", title_fontsize=8)
    fig.suptitle(f"stable region (shaded: pairs), β = {f.beta:g}, c = {f.c:.3f}")
    return fig
