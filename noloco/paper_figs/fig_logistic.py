"""Claim: on real data (L2-regularised logistic regression on the breast-cancer set) NoLoCo
with pairs reaches the same loss at the averaged weights as DiLoCo with the same outer
hyperparameters, while its replicas keep a small spread; the quadratic theory, linearised
at the optimum, predicts where that spread settles once the weights are near the optimum
(far from it, early on, the spread is larger than the linearised value). DiLoCo's
all-reduce keeps the replicas identical.

Simulation with real inner minibatch SGD steps (noloco.quadratic.simulator): N = 8, shared data,
minibatches of 16 rows, eta 0.05, H 20, alpha 0.5, beta = gamma = 0.7 for both methods
(DiLoCo is n = N). Bands: 2 standard errors over independent trials. The linearised theory takes
the Hessian and the minibatch noise at the optimum: in the first steps the weights are far
from it and the noise is larger, so the simulated spread starts above the theory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from noloco.infra.record import JsonRecord
from noloco.paper_figs import style
from noloco.quadratic.compare import Series

NAME = "logistic"
METHODS = ("noloco", "diloco")


def params(quick: bool) -> dict:
    return {"trials": 6 if quick else 40, "outer_steps": 40 if quick else 150}


@dataclass(frozen=True)
class MethodRun(JsonRecord):
    """One method's run: the loss at the averaged weights and the spread per outer step, and the stationary
    spread (closed form, and simulated with its SE; None where the run has none)."""

    NESTED = {"loss": Series, "spread": Series}

    step: list
    loss: Series
    spread: Series
    stationary_theory: Optional[float]
    stationary_mc: Optional[float]
    stationary_se: Optional[float]


@dataclass(frozen=True)
class LogisticFigure(JsonRecord):
    NESTED = {"noloco": MethodRun, "diloco": MethodRun}

    noloco: MethodRun
    diloco: MethodRun
    loss_optimum: float


def compute(trials: int, outer_steps: int) -> dict:
    from noloco.quadratic.compare import SimulateReport, compare
    from noloco.quadratic.sim_config import SimConfig
    from noloco.theory.config import InnerConfig, OuterConfig

    out = {}
    for method in METHODS:
        cfg = SimConfig(outer=OuterConfig(replicas=8, group_size=2, alpha=0.5, beta=0.7, gamma=0.7),
                        inner=InnerConfig(lr=0.05, steps=20, noise=0.0), objective="breast-cancer",
                        batch_size=16, method=method, trials=trials, outer_steps=outer_steps, seed=3)
        r = SimulateReport.from_json(compare(cfg, decay=False))
        tr, summary = r.trajectories, r.summary
        out[method] = MethodRun(step=tr.step, loss=tr.loss_at_mean, spread=tr.spread,
                                stationary_theory=summary.stationary_variance_theory,
                                stationary_mc=summary.stationary_variance_mc,
                                stationary_se=summary.stationary_variance_se)
    from noloco.quadratic.objectives import DataObjective

    obj = DataObjective("breast-cancer", split="shared", l2=1e-2, batch_size=16, replicas=8,
                        rng=np.random.default_rng(0))
    return LogisticFigure(**out, loss_optimum=float(obj.loss(obj.optimum))).to_json()


def _band(ax, x, mean, se, colour, label, **line):
    mean, se = np.array(mean, dtype=float), np.array(se, dtype=float)
    ax.plot(x, mean, color=colour, label=label, **line)
    ax.fill_between(x, mean - 2 * se, mean + 2 * se, color=colour, alpha=0.25, lw=0)


def draw(data: dict):
    fig, axs = style.figure(2)
    a, b = axs[0]
    f = LogisticFigure.from_json(data)
    noloco, diloco = f.noloco, f.diloco
    gap_n, gap_d = (np.array(run.loss.mc, dtype=float) - f.loss_optimum for run in (noloco, diloco))
    # DiLoCo wide and pale underneath, NoLoCo dashed on top: the two curves coincide
    _band(a, diloco.step, gap_d, diloco.loss.se, style.VERMILION, "DiLoCo (all-reduce)", lw=4, alpha=0.5)
    _band(a, noloco.step, gap_n, noloco.loss.se, style.BLUE, "NoLoCo (pairs), dashed", ls="--")
    worst = float(np.nanmax(np.abs(gap_n / gap_d - 1)))
    a.text(0.97, 0.62, f"NoLoCo's gap to the optimum is\nwithin {100 * worst:.1f} % of DiLoCo's\nat every step",
           transform=a.transAxes, ha="right", va="top", fontsize=8)
    a.set(yscale="log", xlabel="outer step (count)", ylabel="loss at averaged weights minus optimum (nats)",
          title="loss (bands: ± 2 SE)")
    a.legend(loc="upper right")
    d = noloco
    # from step 1: both start identical, and zero has no place on a log axis
    _band(b, d.step[1:], d.spread.mc[1:], d.spread.se[1:], style.BLUE, "NoLoCo, simulated ± 2 SE")
    b.plot(d.step[1:], d.spread.theory[1:], "--", color=style.BLACK, lw=1.2,
           label="NoLoCo, theory linearised at the optimum")
    if d.stationary_theory is not None:
        b.axhline(d.stationary_theory, color=style.GREEN, ls=":", label="its stationary closed form")
    b.plot([], [], " ", label="DiLoCo: exactly 0 (identical replicas)")
    early = int(np.argmax(np.array(d.spread.mc[1:], dtype=float))) + 1
    b.annotate("first steps: the weights are far from\nthe optimum, where the minibatch noise\nis larger than "
               "the linearised theory's", (d.step[early], d.spread.mc[early]), xytext=(0.2, 0.93),
               textcoords=b.transAxes, va="top", fontsize=8, arrowprops={"arrowstyle": "->", "color": "grey"})
    b.set(yscale="log", xlabel="outer step (count)", ylabel="replica variance, summed over weights (weight²)",
          title="spread between replicas")
    b.legend(loc="lower right")
    return fig
