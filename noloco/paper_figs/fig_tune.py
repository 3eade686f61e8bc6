"""Claim: the paper's setting (pairs, alpha 0.5, beta = gamma = 0.7) is not on the
rate-vs-spread frontier of the quadratic theory: at the same stationary spread, other
(alpha, beta, gamma) make the replica mean converge faster, and `noloco tune` finds them.

Left: the mean's rate per outer step over (alpha, beta) (it does not depend on gamma) at the
tuned (n, H), with the region where some gamma keeps the stationary spread within the budget.
Right: the frontier, best rate at each spread, with the paper setting and the tuner's pick.
When the tuner changes n or H, the paper setting is not on that landscape: it is drawn only on
the right, next to the frontier at its own (n, H)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from noloco.infra.record import JsonRecord
from noloco.paper_figs import style
from noloco.quadratic.tune_check import FrontierPoint

NAME = "tune"


def params(quick: bool) -> dict:
    return {"grid": 16 if quick else 32}


@dataclass(frozen=True)
class RateSpread(JsonRecord):
    """A frontier as two arrays: the mean's rate and the stationary spread."""

    rate: Any
    spread: Any


@dataclass(frozen=True)
class TuneFigure(JsonRecord):
    """The figure's data: the landscape at the tuned (n, H), its frontier and three settings
    (:class:`noloco.quadratic.tune_check.FrontierPoint`); ``paper_frontier`` only where the paper's (n, H)
    is another."""

    NESTED = {"frontier": (list, FrontierPoint), "best": FrontierPoint, "paper": FrontierPoint,
              "given": FrontierPoint, "paper_frontier": RateSpread}
    OPTIONAL_KEYS = ("paper_frontier",)

    alpha: Any
    beta: Any
    rate: Any
    min_spread: Any
    budget: float
    group_size: int
    inner_steps: int
    frontier: list
    best: FrontierPoint
    paper: FrontierPoint
    given: FrontierPoint
    paper_frontier: Optional[RateSpread] = None


def compute(grid: int) -> dict:
    from noloco.theory.methods import PAPER_PRESET as p
    from noloco.theory.spectrum import Spectrum
    from noloco.theory.tune import TuneProblem, evaluate, tune

    o = p.outer
    budget = float(evaluate(TuneProblem(o, p.inner, Spectrum((1.0,)), 1.0), o.alpha, o.beta, o.gamma,
                            o.group_size, p.inner.steps).spread)
    return result_data(tune(TuneProblem(o, p.inner, Spectrum((1.0,)), budget, grid=grid)))


def result_data(result) -> dict:
    """What the figure needs from a :class:`noloco.theory.tune.TuneResult`, as JSON."""
    L = result.landscape
    pt = lambda q: FrontierPoint(rate=q.rate, spread=q.spread, alpha=q.alpha, beta=q.beta, gamma=q.gamma,  # noqa: E731
                                 group_size=q.group_size, inner_steps=q.inner_steps)
    p = result.paper
    # the paper's (n, H) may have another landscape: its point then goes with its own frontier
    other = (p.group_size, p.inner_steps) != (L.group_size, L.inner_steps)
    return TuneFigure(alpha=L.alpha, beta=L.beta, rate=L.rate, min_spread=L.min_spread,
                      budget=result.problem.budget, group_size=L.group_size, inner_steps=L.inner_steps,
                      frontier=[pt(q) for q in result.frontier], best=pt(result.best), paper=pt(p),
                      given=pt(result.start), paper_frontier=_frontier(result.problem, p) if other else None).to_json()


def _frontier(problem, point) -> RateSpread:
    """The rate-vs-spread frontier at ``point``'s (n, H) (as :func:`noloco.theory.tune.landscape` finds it)."""
    from noloco.theory.tune import evaluate, landscape

    alpha, beta, gamma = np.array(landscape(problem, point, point).frontier, dtype=float).T
    r = evaluate(problem, alpha, beta, gamma, point.group_size, point.inner_steps)
    return RateSpread(rate=r.rate, spread=r.spread)


def _array(values) -> np.ndarray:
    """Cached JSON values as a float array (null, a non-finite value, becomes NaN)."""
    return np.array(values, dtype=float)


def draw(data: dict):
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import NullFormatter

    fig, axs = style.figure(2)
    ax, bx = axs[0]
    d = TuneFigure.from_json(data)
    n, h = d.group_size, d.inner_steps
    A, B, rate = _array(d.alpha), _array(d.beta), _array(d.rate)
    ok = np.nan_to_num(_array(d.min_spread), nan=np.inf) <= d.budget * (1 + 1e-9)
    mesh = ax.pcolormesh(B, A, np.clip(rate, 0, 1), shading="nearest", cmap="viridis_r", vmin=0, vmax=1,
                         rasterized=True)
    fig.colorbar(mesh, ax=ax, label="mean's rate per outer step (1: no progress)")
    ax.contour(B, A, ok.astype(float), levels=[0.5], colors="white", linewidths=1.6)
    ax.contourf(B, A, (~ok).astype(float), levels=[0.5, 1.5], colors="none", hatches=["///"])
    best, paper = d.best, d.paper
    other = d.paper_frontier is not None  # the paper setting is not on this (n, H)
    paper_label = f"paper (n = {paper.group_size}, H = {paper.inner_steps})" if other else "paper setting"
    setting = lambda q: f"α {q.alpha:.2f}, β {q.beta:.2f}, γ {q.gamma:.2f}"  # noqa: E731
    if not other:
        ax.plot(paper.beta, paper.alpha, "s", color=style.VERMILION, mec="white", ms=8,
                label=f"paper: {setting(paper)}")
    ax.plot(best.beta, best.alpha, "*", color=style.YELLOW, mec="black", ms=12, label=f"tuned: {setting(best)}",
            clip_on=False)
    handles = ax.get_legend_handles_labels()[0] + [
        Line2D([], [], color="white", lw=1.6, label="edge of the spread budget"),
        Patch(facecolor="white", edgecolor="black", hatch="///", label="no γ meets the budget")]
    ax.set(xlabel="outer learning rate β (dimensionless)", ylabel="outer momentum α (dimensionless)",
           title=f"mean's rate at n = {n}, H = {h}")
    ax.legend(handles=handles, loc="upper right", frameon=True, facecolor="0.8")  # grey: the white edge shows
    s, r = (np.array([q.spread for q in d.frontier], dtype=float), np.array([q.rate for q in d.frontier], dtype=float))
    bx.plot(s, r, color=style.BLUE,
            label=f"frontier at n = {n}, H = {h}" if other else "frontier: best rate at each spread")
    if other:
        bx.plot(d.paper_frontier.spread, d.paper_frontier.rate, "--", color=style.VERMILION,
                label=f"frontier at n = {paper.group_size}, H = {paper.inner_steps}")
    bx.axvline(d.budget, color="grey", ls="--", lw=1, label=f"spread budget {d.budget:.3g}")
    bx.plot(paper.spread, paper.rate, "s", color=style.VERMILION, ms=8, label=f"{paper_label}, rate {paper.rate:.3f}")
    bx.plot(best.spread, best.rate, "*", color=style.YELLOW, mec="black", ms=12,
            label=f"tuned, rate {best.rate:.3f}", clip_on=False)
    bx.set(xscale="log", xlabel="stationary replica variance (weight²)", ylabel="mean's rate per outer step (ratio)",
           title="frontiers: best rate at each spread" if other else f"rate vs spread, n = {n}, H = {h}")
    bx.xaxis.set_minor_formatter(NullFormatter())
    bx.set_xlim(left=bx.get_xlim()[0] / 10)  # a decade of room left of the budget line for the legend
    bx.legend(loc="lower left")
    return fig


def draw_result(result, path) -> str:
    """The tuner's figure for ``noloco tune --out``, written to exactly ``path`` (its suffix chooses the
    format: :func:`noloco.paper_figs.style.figure_file`); returns the path."""
    from noloco.infra.files import jsonable

    path = style.figure_file(path)
    return style.save(draw(jsonable(result_data(result))), path, formats=(path.suffix.lower().lstrip("."),))[0]
