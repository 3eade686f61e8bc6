"""The simulator: replica-coordinate updates per second (one inner SGD step of one coordinate of
one replica, outer steps and recording included) for

* the vectorised simulator (:func:`quadratic.simulator.simulate`),
* a straightforward per-replica Python loop doing the same arithmetic on one replica's
  d-vector at a time (numpy for the d coordinates),
* the floor: per inner step only what any numpy implementation must do over the same
  (trials, N, d) arrays, namely draw the noise into a preallocated buffer and make one
  in-place pass over the weights; with ``--noise 0`` only the pass.

    python -m benchmarks simulator [--trials 200 --replicas 8 --dim 1 --inner-steps 50 --outer-steps 20]

The default size is ``noloco simulate``'s default run (200 trials, N = 8, pairs, a
one-direction quadratic, H = 50), over 20 outer steps.
"""

from __future__ import annotations

import numpy as np

from benchmarks.timer import best_of
from quadratic.simulator import SimConfig, simulate
from theory.config import InnerConfig, OuterConfig
from theory.outer import outer_step
from theory.partitions import partition


def loop(cfg: SimConfig, lam: np.ndarray) -> None:
    """The same run written replica by replica."""
    rng = np.random.default_rng(cfg.seed)
    o, i = cfg.outer, cfg.inner
    for trial in range(cfg.trials):
        phi = [np.full(lam.size, cfg.start) for _ in range(o.replicas)]
        delta = [np.zeros(lam.size) for _ in range(o.replicas)]
        for t in range(cfg.outer_steps):
            progress = []
            for r in range(o.replicas):
                theta = phi[r].copy()
                for _ in range(i.steps):
                    theta -= i.lr * (lam * theta + i.noise * rng.standard_normal(lam.size))
                progress.append(theta - phi[r])
            new_phi, new_delta = list(phi), list(delta)
            for group in partition(cfg.seed + trial, t, o.replicas, o.group_size):
                mean_phi = sum(phi[r] for r in group) / len(group)
                mean_progress = sum(progress[r] for r in group) / len(group)
                for r in group:
                    new_phi[r], new_delta[r] = outer_step(phi[r], delta[r], mean_phi, mean_progress, **o.rule())
            phi, delta = new_phi, new_delta


def floor(cfg: SimConfig, dim: int) -> None:
    rng = np.random.default_rng(cfg.seed)
    theta = np.zeros((cfg.trials, cfg.outer.replicas, dim))
    noise = np.zeros_like(theta)
    for _ in range(cfg.outer_steps * cfg.inner.steps):
        if cfg.inner.noise:
            rng.standard_normal(out=noise)
        theta += noise


NAME = "simulator"


def add_arguments(parser) -> None:
    parser.add_argument("--trials", type=int, default=200, help="independent trials")
    parser.add_argument("--replicas", type=int, default=8, help="replicas N (pairs)")
    parser.add_argument("--dim", type=int, default=1, help="directions of the quadratic")
    parser.add_argument("--inner-steps", type=int, default=50, help="inner steps H")
    parser.add_argument("--outer-steps", type=int, default=20, help="outer steps")
    parser.add_argument("--noise", type=float, default=1.0, help="gradient noise std (0: no noise draws)")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")


def measure(trials=200, replicas=8, dim=1, inner_steps=50, outer_steps=20, noise=1.0, repeat=3,
            loop_trials=8) -> dict:
    lam = np.linspace(0.5, 2.0, dim)
    outer = OuterConfig(replicas=replicas, group_size=2)
    cfg = SimConfig(outer=outer, inner=InnerConfig(lr=0.05, steps=inner_steps, noise=noise),
                    curvatures=tuple(lam), trials=trials, outer_steps=outer_steps)
    updates = trials * replicas * dim * inner_steps * outer_steps
    small = SimConfig(outer=outer, inner=cfg.inner, curvatures=tuple(lam), trials=loop_trials,
                      outer_steps=outer_steps)  # the loop is slow: time fewer trials, scale per update
    rates = {
        "vectorised": updates / best_of(lambda: simulate(cfg), repeat),
        "python_loop": updates * loop_trials / trials / best_of(lambda: loop(small, lam), 1),
        "numpy_floor": updates / best_of(lambda: floor(cfg, dim), repeat),
    }
    return {"updates_per_second": rates, "speedup_over_loop": rates["vectorised"] / rates["python_loop"],
            "slowdown_vs_floor": rates["numpy_floor"] / rates["vectorised"]}


def format_result(result: dict) -> str:
    r = result["results"]
    lines = [f"{name:<12} {rate:12.4g} replica-coordinate updates / s" for name, rate in r["updates_per_second"].items()]
    lines.append(f"vectorised / loop  = {r['speedup_over_loop']:.1f}x")
    lines.append(f"floor / vectorised = {r['slowdown_vs_floor']:.2f}x")
    return "\n".join(lines)
