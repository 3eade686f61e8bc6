"""Claim: the paper's setting (pairs, alpha 0.5, beta = gamma = 0.7) is not on the
rate-vs-spread frontier of the quadratic theory: at the same stationary spread, other
(alpha, beta, gamma) make the replica mean converge faster, and `noloco tune` finds them.

Left: the mean's rate per outer step over (alpha, beta) (it does not depend on gamma),
with the region where some gamma keeps the stationary spread within the budget.
Right: the frontier, best rate at each spread, with the paper setting and the tuner's pick."""

from __future__ import annotations

import numpy as np

from noloco.paper_figs import style

NAME = "tune"


def params(quick: bool) -> dict:
    return {"grid": 16 if quick else 32}


def compute(grid: int) -> dict:
    from noloco.theory.methods import PRESETS
    from noloco.theory.spectrum import Spectrum
    from noloco.theory.tune import TuneProblem, evaluate, tune

    p = PRESETS["paper"]
    o = p.outer
    budget = float(evaluate(TuneProblem(o, p.inner, Spectrum((1.0,)), 1.0), o.alpha, o.beta, o.gamma,
                            o.group_size, p.inner.steps)["spread"])
    return result_data(tune(TuneProblem(o, p.inner, Spectrum((1.0,)), budget, grid=grid)))


def result_data(result) -> dict:
    """What the figure needs from a :class:`noloco.theory.tune.TuneResult`."""
    L = result.landscape
    pt = lambda q: {"alpha": q.alpha, "beta": q.beta, "gamma": q.gamma, "rate": q.rate, "spread": q.spread,
                    "group_size": q.group_size, "inner_steps": q.inner_steps}
    return {
        "alpha": L["alpha"], "beta": L["beta"], "rate": L["rate"], "min_spread": L["min_spread"],
        "budget": result.problem.budget, "group_size": L["group_size"], "inner_steps": L["inner_steps"],
        "frontier": [pt(q) for q in result.frontier], "best": pt(result.best), "paper": pt(result.paper),
        "given": pt(result.start),
    }


def _array(values) -> np.ndarray:
    """Cached JSON values as a float array (null, a non-finite value, becomes NaN)."""
    return np.array(values, dtype=float)


def draw(data: dict):
    fig, axs = style.figure(2)
    ax, bx = axs[0]
    A, B, rate = _array(data["alpha"]), _array(data["beta"]), _array(data["rate"])
    ok = np.nan_to_num(_array(data["min_spread"]), nan=np.inf) <= data["budget"] * (1 + 1e-9)
    mesh = ax.pcolormesh(B, A, np.clip(rate, 0, 1), shading="nearest", cmap="viridis_r", vmin=0, vmax=1,
                         rasterized=True)
    fig.colorbar(mesh, ax=ax, label="mean's rate per outer step (spectral radius of M)")
    ax.contour(B, A, ok.astype(float), levels=[0.5], colors="white", linewidths=1.6)
    ax.contourf(B, A, (~ok).astype(float), levels=[0.5, 1.5], colors="none", hatches=["///"])
    best, paper = data["best"], data["paper"]
    ax.plot(paper["beta"], paper["alpha"], "s", color=style.VERMILION, mec="white", ms=8, label="paper setting")
    ax.plot(best["beta"], best["alpha"], "*", color=style.YELLOW, mec="black", ms=12, label="tuned")
    ax.set(xlabel="outer learning rate beta (dimensionless)", ylabel="outer momentum alpha (dimensionless)",
           title="rate; hatched: no gamma meets the spread budget")
    ax.legend(loc="upper right", frameon=True)
    s = np.array([q["spread"] for q in data["frontier"]], dtype=float)
    r = np.array([q["rate"] for q in data["frontier"]], dtype=float)
    bx.plot(s, r, color=style.BLUE, label="frontier: best rate at each spread")
    bx.axvline(data["budget"], color="grey", ls="--", lw=1, label="spread budget")
    bx.plot(paper["spread"], paper["rate"], "s", color=style.VERMILION, ms=8, label="paper setting")
    bx.plot(best["spread"], best["rate"], "*", color=style.YELLOW, mec="black", ms=12, label="tuned")
    bx.set(xscale="log", xlabel="stationary replica variance (weight units$^2$)",
           ylabel="mean's rate per outer step", title=f"trade-off, n={data['group_size']}, H={data['inner_steps']}")
    bx.xaxis.set_minor_formatter(__import__("matplotlib").ticker.NullFormatter())
    bx.legend(loc="lower left")
    return fig


def draw_result(result, path) -> str:
    """The tuner's figure for ``noloco tune --out``; returns the PNG path."""
    from noloco.infra.files import jsonable

    return style.save(draw(jsonable(result_data(result))), path)[0]
