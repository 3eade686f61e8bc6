"""Claim: the paper's communication figures regenerate. Eq 7, E max(t1, t2) = (1 + erf(sigma/2))
exp(mu + sigma^2/2), is exact (Monte Carlo and the toolkit's expected_max agree with it). A tree
all-reduce slows down with the message-time variance only through the maxima the tree waits for:
with one expected pair maximum per level (Eq 5 with Eq 7) the ratio to pair averaging stays log2 N;
an asynchronous tree, whose time is its slowest path, gives the paper's Fig 5A (about 39 at
N = 1024 and std/mean 2.5, where the paper's axis ends at 40); a tree that waits at every level for
the slowest message of the level gives more than twice that. Fig 5B: with log-normal inner steps
(mu 1, sigma^2 0.5) and no communication time, DiLoCo's barrier makes 500 outer steps about 1.19
times as long as NoLoCo's at H = 100 on 1024 workers, where the paper reads about 1.2.

(a) Eq 7 against Monte Carlo and noloco.theory.jitter.expected_max, message times of mean 1.
(b) Fig 5A: tree all-reduce time over pair averaging time 2 E max(t1, t2), by world size N (the paper's n;
the project's n is the group size)
(c) Fig 5B: total time DiLoCo / NoLoCo, by world size N; mean over runs with 2 standard errors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from noloco.claims.paper_comm import Fig5A, Fig5B
from noloco.infra.record import JsonRecord
from noloco.paper_figs import style

NAME = "paper_comm"
#: one colour per world size in both panels
SIZE_COLOURS = dict(zip((4, 16, 64, 256, 1024), style.PALETTE))
#: the paper's reading of Fig 5B: about 1.2 at H = 100 with 1024 workers (Section 5.3)
PAPER_5B = (100, 1024, 1.2)


def params(quick: bool, **options) -> dict:
    if quick:
        return {"cvs": [0.0, 1.0, 2.0, 2.5], "trials": 30, "pair_samples": 20_000,
                "world_sizes_b": [16, 64], "inner_steps": [1, 10, 50, 100], "outer_steps": 100, "trials_b": 2,
                "check_trials": 2}
    return {"cvs": [float(x) for x in np.linspace(0, 2.5, 11)], "trials": 800, "pair_samples": 400_000,
            "world_sizes_b": [16, 64, 256, 1024], "inner_steps": [1, 2, 5, 10, 20, 40, 60, 80, 100, 120],
            "outer_steps": 500, "trials_b": 3, "check_trials": 8}


@dataclass(frozen=True)
class PaperCommFigure(JsonRecord):
    NESTED = {"fig5a": Fig5A, "fig5b": Fig5B}

    fig5a: Fig5A
    fig5b: Fig5B


def compute(cvs, trials, pair_samples, world_sizes_b, inner_steps, outer_steps, trials_b, check_trials) -> dict:
    from noloco.claims import paper_comm as paper

    return PaperCommFigure(fig5a=paper.fig5a(cvs=cvs, trials=trials, pair_samples=pair_samples),
                           fig5b=paper.fig5b(world_sizes_b, inner_steps, outer_steps=outer_steps, trials=trials_b,
                                             check_trials=check_trials)).to_json()


def draw(data: dict):
    fig, axs = style.figure(3)
    a, b, c = axs[0]
    f = PaperCommFigure.from_json(data)
    A = f.fig5a
    cv = np.array(A.cv)
    from noloco.theory import paper

    fine = np.linspace(cv[0], cv[-1], 101)
    sigma = paper.lognormal_sigma(fine)
    a.plot(fine, paper.pair_max_mean(-sigma ** 2 / 2, sigma), color=style.BLACK, label="Eq 7 (closed form)")
    a.errorbar(cv, A.pair_mc, yerr=2 * np.array(A.pair_mc_se), fmt="o", color=style.VERMILION, mfc="white",
               label="Monte Carlo")
    a.plot(cv, A.pair_comm, "x", color=style.BLUE, ms=7, label="toolkit expected_max")
    a.set(xlabel="std(t) / E(t) of a message time", ylabel="E max(t1, t2) / E(t)", title="(a) Eq 7, one pair")
    a.legend(loc="lower right")
    for N in A.world_sizes:
        key, colour = str(N) if str(N) in A.tree else N, SIZE_COLOURS[N]  # str from JSON, N as computed
        b.errorbar(cv, A.tree[key], yerr=2 * np.array(A.tree_se[key]), fmt="o-", ms=3, color=colour)
        b.plot(cv, A.levels[key], "--", lw=1, color=colour)
        b.axhline(A.eq5[key], ls=":", lw=0.9, color=colour)
        b.annotate(f"N = {N}", (cv[-1], A.tree[key][-1]), xytext=(3, 0), textcoords="offset points",
                   fontsize=7.5, color=colour, va="center")
    b.plot([], [], "k-", label="critical path (simulated)")
    b.plot([], [], "k--", lw=1, label="slowest message per level")
    b.plot([], [], "k:", lw=0.9, label="Eq 5 with Eq 7: log2 N")
    b.set(xlabel="std(t) / E(t) of a message time", ylabel="tree all-reduce / pair averaging (x)",
          title="(b) Fig 5A", yscale="log", ylim=(1.6, 400), xlim=(-0.1, cv[-1] + 0.75))
    b.set_yticks([2, 5, 10, 20, 50, 100], labels=["2", "5", "10", "20", "50", "100"])
    b.legend(fontsize=7.5, loc="upper left")
    B = f.fig5b
    H = np.array(B.inner_steps, dtype=float)
    for N in B.world_sizes:
        key, colour = str(N) if str(N) in B.ratio else N, SIZE_COLOURS[N]
        c.errorbar(H, B.ratio[key], yerr=2 * np.array(B.ratio_se[key]), fmt="o-", ms=3, color=colour,
                   label=f"N = {N}")
    h, N, value = PAPER_5B
    c.plot([h], [value], "*", ms=11, color=style.BLACK, label=f"paper, N = {N}: ~{value:g}")
    c.set(xlabel="inner steps H per outer step", ylabel="total time DiLoCo / NoLoCo (x)",
          title=f"(c) Fig 5B, {B.outer_steps} outer steps")
    c.legend(fontsize=7.5, loc="center right")
    return fig
