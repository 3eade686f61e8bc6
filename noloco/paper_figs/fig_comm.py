"""Claim: one NoLoCo group exchange costs the same whatever N, while an all-reduce grows
with N (tree all-reduce: latency ~ log2 N), so the synchronisation speed-up grows with N
for latency-bound payloads (2 MB); for bandwidth-bound ones (200 MB and 2 GB at 1 Gbit/s)
the reference 'root' pair exchange is slower than the fastest all-reduce. Without a global
barrier replicas sit idle less, because each waits only for its group, although delays
do propagate from group to group.

Latency-bandwidth model of noloco.theory.comm (50 ms one-way latency, 1 Gbit/s per replica,
pairs, 'root' exchange). Idle fraction: event simulation with lognormal compute-time
jitter (cv 0.1, no communication time, to isolate stragglers), mean over runs with 2
standard errors, next to the closed form for the barrier."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from noloco.infra.record import JsonRecord
from noloco.paper_figs import style

NAME = "comm"
PAYLOADS = {"2 MB (1M params, bf16)": 2e6, "200 MB (100M params)": 2e8, "2 GB (1B params)": 2e9}


def params(quick: bool) -> dict:
    return {"max_log2": 12, "idle_max_log2": 8 if quick else 10, "steps": 60 if quick else 300,
            "trials": 4 if quick else 16}


@dataclass(frozen=True)
class Speedup(JsonRecord):
    """One payload's speed-up of the pair exchange over the tree, ring and fastest all-reduce, per N."""

    tree: list
    ring: list
    best: list


@dataclass(frozen=True)
class IdleSeries(JsonRecord):
    """Idle fractions per N: the barrier's and NoLoCo's simulated (with SE), the barrier's closed form."""

    N: Any
    barrier: list
    barrier_se: list
    noloco: list
    noloco_se: list
    closed: list


@dataclass(frozen=True)
class CommFigure(JsonRecord):
    NESTED = {"speedup": (dict, Speedup), "idle": IdleSeries}

    N: Any
    speedup: dict
    idle: IdleSeries


def compute(max_log2: int, idle_max_log2: int, steps: int, trials: int) -> dict:
    from noloco.quadratic.idle import simulate_idle
    from noloco.theory import comm
    from noloco.theory.jitter import Jitter, barrier_idle_fraction

    net = comm.Network.from_bandwidth(0.05, 1e9)
    Ns = 2 ** np.arange(2, max_log2 + 1)
    speed = {}
    for label, payload in PAYLOADS.items():
        costs = [comm.sync_cost(net, payload, int(N), 2) for N in Ns]
        speed[label] = Speedup(tree=[c.speedup_vs_tree for c in costs], ring=[c.speedup_vs_ring for c in costs],
                               best=[c.speedup_vs_best for c in costs])
    jitter = Jitter("lognormal", 0.1)
    Ni = 2 ** np.arange(1, idle_max_log2 + 1)
    runs = [simulate_idle(int(N), 2, jitter, steps=steps, trials=trials, seed=int(N)) for N in Ni]
    idle = IdleSeries(N=Ni, barrier=[r.barrier_idle_fraction for r in runs], barrier_se=[r.barrier_idle_se for r in runs],
                      noloco=[r.noloco_idle_fraction for r in runs], noloco_se=[r.noloco_idle_se for r in runs],
                      closed=[barrier_idle_fraction(jitter, int(N)) for N in Ni])
    return CommFigure(N=Ns, speedup=speed, idle=idle).to_json()


def draw(data: dict):
    from matplotlib.lines import Line2D

    fig, axs = style.figure(2)
    a, b = axs[0]
    f = CommFigure.from_json(data)
    N = np.array(f.N, dtype=float)
    for (label, s), colour in zip(f.speedup.items(), style.PALETTE):  # colour: payload; dash: baseline
        a.plot(N, s.tree, color=colour, label=label)
        a.plot(N, s.best, "--", color=colour)
    a.axhline(1, color="grey", lw=0.8, ls=":")
    a.set(xscale="log", yscale="log", xlabel="replicas N (count)", ylabel="speed-up of one synchronisation (x)",
          title="all-reduce time / NoLoCo pair exchange")
    a.set_ylim(top=4 * max(max(s.tree) for s in f.speedup.values()))  # room for the legend
    a.set_xticks([4, 16, 64, 256, 1024, 4096], labels=["4", "16", "64", "256", "1024", "4096"])
    a.legend(handles=a.get_legend_handles_labels()[0] + [
        Line2D([], [], color="grey", label="vs tree all-reduce"),
        Line2D([], [], color="grey", ls="--", label="vs fastest all-reduce")], loc="upper left")
    d = f.idle
    Ni = np.array(d.N, dtype=float)
    b.errorbar(Ni, d.barrier, yerr=2 * np.array(d.barrier_se), fmt="o", color=style.VERMILION, mfc="white",
               label="global barrier (DiLoCo), simulated")
    b.plot(Ni, d.closed, color=style.VERMILION, lw=1, label="global barrier, closed form")
    b.errorbar(Ni, d.noloco, yerr=2 * np.array(d.noloco_se), fmt="s-", color=style.BLUE, mfc="white",
               label="random pairs (NoLoCo), simulated")
    b.set(xscale="log", xlabel="replicas N (count)", ylabel="idle fraction of wall time (fraction)",
          title="waiting for stragglers (lognormal cv 0.1)", ylim=(0, None))
    b.set_xticks([2, 8, 32, 128, 512], labels=["2", "8", "32", "128", "512"])
    b.legend(loc="lower right")
    return fig
