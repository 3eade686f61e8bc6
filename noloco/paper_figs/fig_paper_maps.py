"""Claim: the paper's stability conditions are not the exact ones. Theorem 3's window (Eq 74,
|d_V| < 1, the same for every N) and the exact spread stability agree on only part of the
(alpha, gamma) plane: the exact upper limit on gamma falls with alpha (in a flat direction towards 0 as alpha -> 1)
and moves a little with N, where the window's rises; below the window's lower edge (gamma < alpha
for pairs) the spread is often stable too, in a curved direction down to gamma = 0. Theorem 2's
sufficient condition beta > alpha admits settings whose mean diverges (beta c > 2 (1 + alpha)),
and misses stable ones.

(a) a flat direction (c = 0) and (b) the paper preset's direction (c = 0.395), pairs at the paper's
beta = 0.7: shaded, the exact region where the second moments of the replica deviations decay for
N = 8 (spectral radius of the exact recursion below 1 - 1e-9, noloco.theory.stability: on the
gamma = 0 line of (a) the radius is exactly 1, marginal, and the spread grows like t); coloured lines, its edge for N = 4, 8 and 64; vermilion,
the paper's window (solid as printed, dashed with the first power of gamma in Eq 55), the same for
every N. (c) In (alpha, beta): shaded, the exact region where the replica mean converges at
c = 0.395; green line, its edge at c = 1 (the paper's "m large"); vermilion, beta = alpha (the
paper's sufficient condition holds above it). Crosses: the strongest counterexample where the paper
says stable and the exact theory unstable (N = 8; c = 0.395); plus signs, the reverse. The legend
gives the share of the grid where the paper and the exact theory agree."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from noloco.infra.record import JsonRecord
from noloco.paper_figs import common, style

NAME = "paper_maps"
REPLICAS = (4, 8, 64)
GROUP = 2
PAD = 0.04


@dataclass(frozen=True)
class Counterexample(JsonRecord):
    """A grid point where the two regions disagree: alpha, the grid's other axis (gamma or beta) and the
    spectral radius there."""

    OPTIONAL_KEYS = ("gamma", "beta")

    alpha: float
    gamma: Optional[float] = None
    beta: Optional[float] = None
    spectral_radius: float = field(kw_only=True)


@dataclass(frozen=True)
class Comparison(JsonRecord):
    """The paper's region against the exact one (:func:`noloco.claims.paper_maps.compare_regions`): the share of
    the grid where they agree, and a counterexample each way (its coordinates and spectral radius; None: none)."""

    NESTED = {"paper_stable_exact_unstable": Counterexample, "paper_unstable_exact_stable": Counterexample}

    agreement: float
    paper_stable_exact_unstable: Optional[Counterexample]
    paper_unstable_exact_stable: Optional[Counterexample]


@dataclass(frozen=True)
class RegionMap(JsonRecord):
    """One map of :mod:`noloco.claims.paper_maps`: the exact stable region (1: stable) and the paper's
    condition compared with it (``power2``: the spread's window; ``sufficient``: the mean's condition)."""

    NESTED = {"power2": Comparison, "sufficient": Comparison}

    exact: Any
    power2: Optional[Comparison] = None
    sufficient: Optional[Comparison] = None


@dataclass(frozen=True)
class PaperMapsFigure(JsonRecord):
    """The grids and the maps: ``windows`` keyed ``"flat|N"`` / ``"curved|N"``, ``means`` keyed by c."""

    NESTED = {"windows": (dict, RegionMap), "means": (dict, RegionMap)}

    alpha: Any
    gamma: Any
    beta_grid: Any
    beta: float
    c: float
    windows: dict
    means: dict


def params(quick: bool, **options) -> dict:
    return {"resolution": 61 if quick else 241}


def compute(resolution: int) -> dict:
    from noloco.claims.paper_maps import mean_map, window_map

    c, _ = common.paper_c_s2()
    beta = common.PAPER.outer.beta
    alpha = np.linspace(0, 0.99, resolution)
    gamma = np.linspace(0, 3, resolution)
    betas = np.linspace(0, 6, resolution)
    windows = {f"{name}|{N}": window_map(c_value, N, GROUP, alpha, gamma, beta)
               for name, c_value in (("flat", 0.0), ("curved", c)) for N in REPLICAS}
    means = {f"{c_value:.3f}": mean_map(c_value, alpha, betas) for c_value in (c, 1.0)}
    return PaperMapsFigure(alpha=alpha, gamma=gamma, beta_grid=betas, beta=beta, c=c, windows=windows,
                           means=means).to_json()


def _padded(values) -> tuple:
    """The grid's range and a margin of :data:`PAD` of it each side: a counterexample on the grid's edge is drawn
    whole inside the panel, not cut by it or over the tick labels."""
    lo, hi = float(values[0]), float(values[-1])
    return lo - PAD * (hi - lo), hi + PAD * (hi - lo)


def _mark(ax, comparison: Comparison) -> None:
    for point, marker in ((comparison.paper_stable_exact_unstable, "x"), (comparison.paper_unstable_exact_stable, "+")):
        if point is not None:  # on the (alpha, gamma) or the (alpha, beta) grid
            y = point.gamma if point.gamma is not None else point.beta
            ax.plot(point.alpha, y, marker, color=style.BLACK, ms=8, mew=1.8, zorder=5)


def _line(colour, ls="-", label=None, marker=None):
    from matplotlib.lines import Line2D

    return Line2D([], [], color=colour, ls="none" if marker else ls, marker=marker, mew=1.8, label=label)


def _patch(colour, alpha, label):
    from matplotlib.patches import Patch

    return Patch(facecolor=colour, alpha=alpha, label=label)


def draw(data: dict):
    from noloco.theory import paper

    fig, axs = style.figure(3)
    f = PaperMapsFigure.from_json(data)
    A = np.array(f.alpha)
    G, Bg = np.array(f.gamma), np.array(f.beta_grid)
    colours = dict(zip(REPLICAS, (style.BLUE, style.BLACK, style.GREEN)))
    for ax, name, title in zip(axs[0], ("flat", "curved"), ("(a) spread, flat direction, c = 0",
                                                            f"(b) spread, c = {f.c:.3f}")):
        shares = []
        for N in REPLICAS:
            w = f.windows[f"{name}|{N}"]
            exact = np.array(w.exact, dtype=float).T
            if N == 8:
                ax.contourf(A, G, exact, levels=[0.5, 1.5], colors=[style.SKY], alpha=0.45)
                _mark(ax, w.power2)
            ax.contour(A, G, exact, levels=[0.5], colors=[colours[N]], linewidths=1.3)
            shares.append(_line(colours[N], label=f"exact edge, N = {N}: agree {w.power2.agreement:.0%}"))
        for power, ls in ((2, "-"), (1, "--")):
            for edge in paper.spread_window(A, GROUP, power):
                ax.plot(A, edge, ls, color=style.VERMILION, lw=1.4)
        ax.set(title=title, xlabel="momentum alpha", ylabel="pull gamma", xlim=_padded(A),
               ylim=(_padded(G)[0], 1.25 * G[-1]))
        ax.set_yticks(np.arange(0, G[-1] + 0.01, 0.5))
        ax.legend(handles=shares, loc="upper left", fontsize=7.5, handlelength=1.2)
    ax = axs[0][2]
    low, high = sorted(f.means, key=float)
    m, m_high = f.means[low], f.means[high]
    ax.contourf(A, Bg, np.array(m.exact, dtype=float).T, levels=[0.5, 1.5], colors=[style.SKY], alpha=0.45)
    ax.contour(A, Bg, np.array(m_high.exact, dtype=float).T, levels=[0.5], colors=[style.GREEN], linewidths=1.3)
    ax.plot(A, A, "-", color=style.VERMILION, lw=1.4)
    _mark(ax, m.sufficient)
    ax.set(title="(c) mean, Theorem 2", xlabel="momentum alpha", ylabel="outer learning rate beta", xlim=_padded(A),
           ylim=_padded(Bg))
    share = m.sufficient.agreement
    # (c)'s entries in the figure's legend: in a panel a third of the figure wide they would cover its top
    fig.legend(handles=[_patch(style.SKY, 0.45, "(a), (b): exact stable (N = 8)"),
                        _patch(style.SKY, 0.45, f"(c): exact, c = {float(low):.3f}: agree {share:.0%}"),
                        _line(style.GREEN, label=f"(c): exact edge, c = 1: agree "
                                                 f"{m_high.sufficient.agreement:.0%}"),
                        _line(style.VERMILION, label="paper: Eq 74 window / beta > alpha"),
                        _line(style.VERMILION, "--", label="Eq 74, gamma^1 in Eq 55"),
                        _line(style.BLACK, marker="x", label="paper stable, exact not"),
                        _line(style.BLACK, marker="+", label="paper unstable, exact stable")],
               loc="outside lower center", ncol=3, fontsize=7.5)
    return fig
