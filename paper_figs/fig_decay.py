"""Claim: with random pairs the expected replica variance shrinks by the factor rho(T)
per outer step that the exact second-moment recursion predicts, for every N; the pull
gamma speeds this up until the spread's stability edge, and larger N (a smaller chance
of meeting the same partner) decays a little more slowly.

Lines: rho(T) at the paper's alpha = 0.5, beta = 0.7, c = 0.395. Points: Monte Carlo of the
noise-free scalar model from independent initial offsets, per-step ratio of the mean
variance between two steps (the claim ``noloco.claims.decay_factor``), with 2 standard
errors; black crosses: the exact recursion over the same window (it differs from rho(T)
where T has no spectral gap, near gamma = 0.3). For N = 4 near the stability edge the
points fall below the line: the expected variance is carried by rare trials whose spread
decays slowly, which a few thousand trials under-sample (a typical run decays faster than
the expectation, by Jensen); the standard error cannot show that."""

from __future__ import annotations

import numpy as np

from noloco.paper_figs import common, style

NAME = "decay"
REPLICAS = (4, 8, 16, 64)


def params(quick: bool) -> dict:
    return {"points": 5 if quick else 10, "trials": 300 if quick else 2000, "t1": 10, "t2": 30}


def compute(points: int, trials: int, t1: int, t2: int) -> dict:
    from noloco.claims import decay_factor
    from noloco.theory import numeric
    from noloco.theory.config import group_kappa

    c, _ = common.paper_c_s2()
    o = common.PAPER.outer
    gamma = np.linspace(0, 2.2, 221)
    gamma_mc = np.linspace(0.1, 1.7, points)
    out = {"gamma": gamma, "gamma_mc": gamma_mc, "t": [t1, t2], "lines": {}, "mc": {}, "window": {},
           "title": f"n = {o.group_size}, alpha = {o.alpha:g}, beta = {o.beta:g}, c = {c:.3f}"}
    for N in REPLICAS:
        out["lines"][str(N)] = numeric.variance_decay_factor(o.alpha, o.beta, gamma, c, group_kappa(N, o.group_size),
                                                             o.momentum)
        # with a window, the claim predicts the exact recursion's ratio over it: where T has no
        # spectral gap it differs from rho(T), and that is what the Monte Carlo estimates
        claims = [decay_factor(outer=common.outer(replicas=N, gamma=float(g)), curvature=common.CURVATURE,
                               window=(t1, t2), trials=trials, seed=1000 * N + i) for i, g in enumerate(gamma_mc)]
        out["window"][str(N)] = [claim.details["window_ratio"] for claim in claims]
        out["mc"][str(N)] = [(claim.measured, claim.se) for claim in claims]
    return out


def draw(data: dict):
    fig, axs = style.figure(1)
    ax = axs[0][0]
    for (N, line), colour, marker in zip(data["lines"].items(), style.PALETTE, style.MARKERS):
        ax.plot(data["gamma"], line, color=colour, label=f"N = {N}, theory rho(T)")
        mc = np.array(data["mc"][N], dtype=float)
        ax.errorbar(data["gamma_mc"], mc[:, 0], yerr=2 * mc[:, 1], fmt=marker, color=colour, mfc="white",
                    label=f"N = {N}, Monte Carlo (+-2 SE)")
        ax.plot(data["gamma_mc"], data["window"][N], "x", color=style.BLACK, ms=4,
                label="exact recursion, same window" if N == next(iter(data["lines"])) else None)
    ax.axhline(1, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="pull gamma (dimensionless)", ylabel="replica-variance decay factor per outer step",
           title=data["title"], ylim=(0, 1.1))
    ax.legend(ncol=2, loc="lower left")
    return fig
