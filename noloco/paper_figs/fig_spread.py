"""Claim: the stationary replica spread of NoLoCo is the closed form
V = s2 (1/n - 1/N) R(alpha, beta, gamma, c, kappa): it falls as the pull gamma grows (until
the stability edge), rises only mildly with N for pairs, and shrinks as O(eta^2) with the
inner learning rate eta when gamma > 0 but only as O(eta) without the pull (gamma = 0).

Lines: closed form at the paper's setting (N = 8, pairs, alpha 0.5, beta = gamma = 0.7,
H 50, sigma 1, curvature 1) with one quantity varied per panel (the lines in the right panel: gamma = 0.7 and 0; grey,
reference slopes 2 and 1). Points: Monte Carlo of
the scalar model (window mean per trial after a burn-in; the estimator of the claim
``noloco.claims.stationary_spread``), 2 standard errors. Every setting, the Monte
Carlo's included, is the paper preset (``noloco.theory.methods.PRESETS["paper"]``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from noloco.infra.record import JsonRecord
from noloco.paper_figs import common, style

NAME = "spread"


def params(quick: bool) -> dict:
    return {"points": 5 if quick else 9, "trials": 200 if quick else 1000, "window": 100 if quick else 300}


def _theory(o, c, s2, gamma=None):
    """Closed form at setting ``o`` (``gamma`` may be an array)."""
    from noloco.theory import numeric

    gamma = o.gamma if gamma is None else gamma
    return numeric.stationary_variance(o.alpha, o.beta, gamma, c, s2, o.replicas, o.group_size, o.momentum)


def _mc(o, trials, window, seed, lr=None):
    """(mean, se) of the stationary spread by the claim's own estimator, inner phase from the preset."""
    from noloco.claims import stationary_spread

    inner = common.PAPER.inner if lr is None else dataclasses.replace(common.PAPER.inner, lr=float(lr))
    claim = stationary_spread(outer=o, inner=inner, curvature=common.CURVATURE, trials=trials, window=window,
                              seed=seed)
    return claim.measured, claim.se


@dataclass(frozen=True)
class Setting(JsonRecord):
    replicas: int
    group_size: int
    inner_steps: int


@dataclass(frozen=True)
class Sweep(JsonRecord):
    """One quantity varied: the closed form at ``x``, the Monte Carlo's (mean, se) at ``x_mc``."""

    x: Any
    theory: Any
    x_mc: Any
    mc: list


@dataclass(frozen=True)
class LrSweep(JsonRecord):
    """The inner learning rate varied at each pull in ``gammas``: the closed form and the Monte Carlo per pull,
    under the keys ``theory_<gamma>`` and ``mc_<gamma>`` (kept in ``extra``; :meth:`theory`, :meth:`mc`)."""

    x: Any
    x_mc: Any
    gammas: list

    def theory(self, gamma) -> list:
        return self.extra[f"theory_{gamma}"]

    def mc(self, gamma) -> list:
        return self.extra[f"mc_{gamma}"]


@dataclass(frozen=True)
class SpreadFigure(JsonRecord):
    NESTED = {"setting": Setting, "gamma": Sweep, "replicas": Sweep, "lr": LrSweep}

    setting: Setting
    gamma: Sweep
    replicas: Sweep
    lr: LrSweep


def compute(points: int, trials: int, window: int) -> dict:
    c, s2 = common.paper_c_s2()
    o = common.PAPER.outer
    setting = Setting(replicas=o.replicas, group_size=o.group_size, inner_steps=common.PAPER.inner.steps)
    # (a) gamma
    g, gm = np.linspace(0, 1.9, 191), np.linspace(0.1, 1.7, points)
    by_gamma = Sweep(x=g, theory=_theory(o, c, s2, gamma=g), x_mc=gm,
                     mc=[_mc(common.outer(gamma=float(x)), trials, window, 10 + i) for i, x in enumerate(gm)])
    # (b) N, the preset's group size
    Ns = o.group_size * 2 ** np.arange(7)
    Nm = Ns[1: 1 + min(points, 5)]
    by_replicas = Sweep(x=Ns, theory=[float(_theory(common.outer(replicas=int(N)), c, s2)) for N in Ns], x_mc=Nm,
                        mc=[_mc(common.outer(replicas=int(N)), max(trials // 2, 50), window, 20 + i)
                            for i, N in enumerate(Nm)])
    # (c) inner learning rate, with and without the pull
    lr = np.logspace(-3.5, -1, 60)
    lm = np.logspace(-3, -1.3, points)
    per_pull = {}
    for gamma in (o.gamma, 0.0):
        og = common.outer(gamma=gamma)
        per_pull[f"theory_{gamma}"] = [float(_theory(og, *common.paper_c_s2(lr=float(x)))) for x in lr]
        per_pull[f"mc_{gamma}"] = [_mc(og, trials, window, 30 + i + int(10 * gamma), lr=x) for i, x in enumerate(lm)]
    by_lr = LrSweep(x=lr, x_mc=lm, gammas=[o.gamma, 0.0], extra=per_pull)
    return SpreadFigure(setting=setting, gamma=by_gamma, replicas=by_replicas, lr=by_lr).to_json()


def _points(ax, x, mc, colour, marker, label):
    mc = np.array(mc, dtype=float)
    ax.errorbar(x, mc[:, 0], yerr=2 * mc[:, 1], fmt=marker, color=colour, mfc="white", label=label)


VARIANCE = "stationary replica variance (weight²)"


def draw(data: dict):
    fig, axs = style.figure(3)
    a, b, cax = axs[0]
    f = SpreadFigure.from_json(data)
    d = f.gamma
    a.plot(d.x, d.theory, color=style.BLUE, label="closed form")
    _points(a, d.x_mc, d.mc, style.BLUE, "o", "Monte Carlo ± 2 SE")
    a.set(yscale="log", xlabel="pull γ (dimensionless)", ylabel=VARIANCE,
          title=f"vs γ (N = {f.setting.replicas})", xticks=np.arange(0, 2, 0.5))
    a.legend()
    d = f.replicas
    b.plot(d.x, d.theory, color=style.VERMILION, label="closed form")
    _points(b, d.x_mc, d.mc, style.VERMILION, "s", "Monte Carlo ± 2 SE")
    n = f.setting.group_size
    b.set(xscale="log", xlabel="replicas N (count)", ylabel=VARIANCE,
          title="vs N (pairs)" if n == 2 else f"vs N (n = {n})")
    ticks = np.array(d.x)[::2]
    b.set_xticks(ticks, labels=[f"{t:g}" for t in ticks])
    b.legend(loc="lower right")
    lr = f.lr
    pull, unpulled = lr.gammas
    for gamma, colour, marker in zip(lr.gammas, (style.BLUE, style.PURPLE), ("o", "D")):
        cax.plot(lr.x, lr.theory(gamma), color=colour, label=f"γ = {gamma:g}")
        _points(cax, lr.x_mc, lr.mc(gamma), colour, marker, None)
    x = np.array(lr.x)
    ref = np.array(lr.theory(pull))[0]
    guide = ref * (x / x[0]) ** 2
    # the guide of the pulled line, as far as it goes: beyond, it ran under the legend
    cax.plot(x, np.where(guide <= np.max(lr.theory(pull)), guide, np.nan), ":", color="grey",
             label="slope 2 (∝ η²)")
    cax.plot(x, np.array(lr.theory(unpulled))[0] * (x / x[0]), "--", color="grey", label="slope 1 (∝ η)")
    cax.errorbar([], [], yerr=[], fmt="o", color="grey", mfc="white", label="Monte Carlo ± 2 SE")
    cax.set(xscale="log", yscale="log", xlabel="inner learning rate η\n(1/curvature)", ylabel=VARIANCE,
            title=f"vs η (H = {f.setting.inner_steps})")
    cax.set_ylim(top=30 * float(np.max(lr.theory(unpulled))))  # a decade of room for the legend
    cax.legend(loc="upper left")
    return fig
