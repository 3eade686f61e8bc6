"""Claim: on real data (L2-regularised logistic regression on the breast-cancer set) NoLoCo
with pairs reaches the same loss at the averaged weights as DiLoCo with the same outer
hyperparameters, while its replicas keep a small spread; the quadratic theory, linearised
at the optimum, predicts where that spread settles once the weights are near the optimum
(far from it, early on, the spread is larger than the linearised value). DiLoCo's
all-reduce keeps the replicas identical.

Simulation with real inner minibatch SGD steps (noloco.quadratic.simulator): N = 8, shared data,
minibatches of 16 rows, eta 0.05, H 20, alpha 0.5, beta = gamma = 0.7 for both methods
(DiLoCo is n = N). Bands: 2 standard errors over independent trials."""

from __future__ import annotations

import numpy as np

from noloco.paper_figs import style

NAME = "logistic"
METHODS = ("noloco", "diloco")


def params(quick: bool) -> dict:
    return {"trials": 6 if quick else 40, "outer_steps": 40 if quick else 150}


def compute(trials: int, outer_steps: int) -> dict:
    from noloco.quadratic.compare import compare
    from noloco.quadratic.simulator import SimConfig
    from noloco.theory.config import InnerConfig, OuterConfig

    out = {}
    for method in METHODS:
        cfg = SimConfig(outer=OuterConfig(replicas=8, group_size=2, alpha=0.5, beta=0.7, gamma=0.7),
                        inner=InnerConfig(lr=0.05, steps=20, noise=0.0), objective="breast-cancer",
                        batch_size=16, method=method, trials=trials, outer_steps=outer_steps, seed=3)
        r = compare(cfg, decay=False)
        tr = r["trajectories"]
        out[method] = {"step": tr["step"], "loss": tr["loss_at_mean"], "spread": tr["spread"],
                       "stationary_theory": r["summary"]["stationary_variance_theory"],
                       "stationary_mc": r["summary"].get("stationary_variance_mc"),
                       "stationary_se": r["summary"].get("stationary_variance_se")}
    from noloco.quadratic.objectives import DataObjective

    obj = DataObjective("breast-cancer", split="shared", l2=1e-2, batch_size=16, replicas=8,
                        rng=np.random.default_rng(0))
    out["loss_optimum"] = float(obj.loss(obj.optimum))
    return out


def _band(ax, x, mean, se, colour, label):
    mean, se = np.array(mean, dtype=float), np.array(se, dtype=float)
    ax.plot(x, mean, color=colour, label=label)
    ax.fill_between(x, mean - 2 * se, mean + 2 * se, color=colour, alpha=0.25, lw=0)


def draw(data: dict):
    fig, axs = style.figure(2)
    a, b = axs[0]
    colours = {"noloco": style.BLUE, "diloco": style.VERMILION}
    names = {"noloco": "NoLoCo (pairs)", "diloco": "DiLoCo (all-reduce)"}
    for m in METHODS:
        d = data[m]
        loss = d["loss"]
        gap = np.array(loss["mc"], dtype=float) - data["loss_optimum"]
        _band(a, d["step"], gap, loss["se"], colours[m], names[m])
    a.set(yscale="log", xlabel="outer step (count)", ylabel="loss at averaged weights minus optimum (nats)",
          title="training loss, breast-cancer logistic regression")
    a.legend()
    d = data["noloco"]
    # from step 1: both start identical, and zero has no place on a log axis
    _band(b, d["step"][1:], d["spread"]["mc"][1:], d["spread"]["se"][1:], colours["noloco"], "NoLoCo, simulated")
    b.plot(d["step"][1:], d["spread"]["theory"][1:], "--", color=style.BLACK, lw=1.2, label="NoLoCo, linearised theory")
    if d["stationary_theory"] is not None:
        b.axhline(d["stationary_theory"], color=style.GREEN, ls=":", label="stationary closed form")
    b.plot([], [], color=colours["diloco"], label="DiLoCo: exactly 0 (identical replicas)")
    b.set(yscale="log", xlabel="outer step (count)", ylabel="replica variance, summed over weights (weight$^2$)",
          title="spread between replicas")
    b.legend(loc="lower right")
    return fig
