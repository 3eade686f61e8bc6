"""Claim: the stationary replica spread of NoLoCo is the closed form
V = s2 (1/n - 1/N) R(alpha, beta, gamma, c, kappa): it falls as the pull gamma grows (until
the stability edge), rises only mildly with N for pairs, and shrinks as O(eta^2) with the
inner learning rate eta when gamma > 0 but only as O(eta) without the pull (gamma = 0).

Lines: closed form at the paper's setting (N = 8, pairs, alpha 0.5, beta = gamma = 0.7,
H 50, sigma 1, curvature 1) with one quantity varied per panel. Points: Monte Carlo of
the scalar model (window mean per trial after a burn-in), 2 standard errors."""

from __future__ import annotations

import numpy as np

from paper_figs import common, style

NAME = "spread"


def params(quick: bool) -> dict:
    return {"points": 5 if quick else 9, "trials": 200 if quick else 1000, "window": 100 if quick else 300}


def _theory(o, c, s2):
    from theory import numeric

    return numeric.stationary_variance(o.alpha, o.beta, o.gamma, c, s2, o.replicas, o.group_size, o.momentum)


def _mc(o, c, s2, trials, window, seed):
    return common.mc_stationary(o, c, s2, trials=trials, burn=common.burn_in(o, c), window=window, seed=seed)


def compute(points: int, trials: int, window: int) -> dict:
    from theory import numeric

    c, s2 = common.paper_c_s2()
    o = common.PAPER.outer
    out = {}
    # (a) gamma
    g, gm = np.linspace(0, 1.9, 191), np.linspace(0.1, 1.7, points)
    out["gamma"] = {"x": g, "theory": numeric.stationary_variance(o.alpha, o.beta, g, c, s2, o.replicas, 2), "x_mc": gm,
                    "mc": [_mc(common.outer(gamma=float(x)), c, s2, trials, window, 10 + i) for i, x in enumerate(gm)]}
    # (b) N, pairs
    Ns = np.array([2, 4, 8, 16, 32, 64, 128])
    Nm = Ns[1: 1 + min(points, 5)]
    out["replicas"] = {"x": Ns, "theory": numeric.stationary_variance(o.alpha, o.beta, o.gamma, c, s2, Ns, 2),
                       "x_mc": Nm, "mc": [_mc(common.outer(replicas=int(N)), c, s2, max(trials // 2, 50), window,
                                              20 + i) for i, N in enumerate(Nm)]}
    # (c) inner learning rate, with and without the pull
    lr = np.logspace(-3.5, -1, 60)
    lm = np.logspace(-3, -1.3, points)
    out["lr"] = {"x": lr, "x_mc": lm}
    for gamma in (0.7, 0.0):
        cs = [numeric.inner_sgd(x, 1.0, common.PAPER.inner.steps, 1.0) for x in lr]
        out["lr"][f"theory_{gamma}"] = [float(_theory(common.outer(gamma=gamma), *cs_)) for cs_ in cs]
        out["lr"][f"mc_{gamma}"] = [_mc(common.outer(gamma=gamma), *map(float, numeric.inner_sgd(x, 1.0, 50, 1.0)),
                                        trials, window, 30 + i + int(10 * gamma)) for i, x in enumerate(lm)]
    return out


def _points(ax, x, mc, colour, marker, label):
    mc = np.array(mc, dtype=float)
    ax.errorbar(x, mc[:, 0], yerr=2 * mc[:, 1], fmt=marker, color=colour, mfc="white", label=label)


def draw(data: dict):
    fig, axs = style.figure(3)
    a, b, cax = axs[0]
    d = data["gamma"]
    a.plot(d["x"], d["theory"], color=style.BLUE, label="closed form")
    _points(a, d["x_mc"], d["mc"], style.BLUE, "o", "Monte Carlo +-2 SE")
    a.set(yscale="log", xlabel="pull gamma (dimensionless)", ylabel="stationary replica variance (weight$^2$)",
          title="vs gamma (N = 8)")
    a.legend()
    d = data["replicas"]
    b.plot(d["x"], d["theory"], color=style.VERMILION, label="closed form")
    _points(b, d["x_mc"], d["mc"], style.VERMILION, "s", "Monte Carlo +-2 SE")
    b.set(xscale="log", xlabel="replicas N (count)", title="vs N (pairs)")
    b.set_xticks([2, 8, 32, 128], labels=["2", "8", "32", "128"])
    b.legend()
    d = data["lr"]
    for gamma, colour, marker in ((0.7, style.BLUE, "o"), (0.0, style.PURPLE, "D")):
        cax.plot(d["x"], d[f"theory_{gamma}"], color=colour, label=f"gamma = {gamma:g}")
        _points(cax, d["x_mc"], d[f"mc_{gamma}"], colour, marker, None)
    x = np.array(d["x"])
    ref = np.array(d["theory_0.7"])[0]
    cax.plot(x, ref * (x / x[0]) ** 2, ":", color="grey", label="slope 2 (eta$^2$)")
    cax.plot(x, np.array(d["theory_0.0"])[0] * (x / x[0]), "--", color="grey", label="slope 1 (eta)")
    cax.set(xscale="log", yscale="log", xlabel="inner learning rate eta (1/curv.)", title="vs eta (H = 50)")
    cax.legend(loc="lower right")
    return fig
