"""The agreement table: stable settings drawn with a fixed seed, simulated against the
exact theory (used by the tests and by docs/quadratic.md).

    python -m noloco.quadratic.agreement      # prints the markdown table
"""

from __future__ import annotations

import numpy as np

from noloco.theory.conditions import analyse
from noloco.theory.config import InnerConfig, OuterConfig
from noloco.theory.spectrum import Spectrum
from noloco.theory.stats import burn_in

SEED = 20250611


def draw_settings(count: int = 12, diloco: int = 2, seed: int = SEED) -> list:
    """Stable settings, ``count`` with n < N and ``diloco`` with n = N: N in {4, 16, 64},
    n in {2, 4, N}, alpha in [0, 0.9], the momentum conventions in turn; kept when the
    spread's decay factor and the mean's spectral radius are below 0.95 (so a few hundred
    outer steps reach the stationary regime)."""
    rng = np.random.default_rng(seed)
    settings, full = [], 0
    while len(settings) < count + diloco:
        N = int(rng.choice([4, 16, 64]))
        n = int(rng.choice(sorted({2, 4, N})))
        if (n == N and full == diloco) or (n < N and len(settings) - full == count):
            continue
        outer = OuterConfig(replicas=N, group_size=n, alpha=float(rng.uniform(0, 0.9)),
                            beta=float(rng.uniform(0.3, 1.0)), gamma=float(rng.uniform(0.0, 1.0)),
                            momentum=("heavy-ball", "nesterov")[len(settings) % 2])
        inner = InnerConfig(lr=float(rng.uniform(0.01, 0.1)), steps=int(rng.choice([5, 10, 20])), noise=1.0)
        spectrum = Spectrum((float(rng.uniform(0.2, 2.0)),))
        analysis = analyse(outer, inner, spectrum)
        if analysis.stable and analysis.variance_decay_factor < 0.95 and analysis.mean_spectral_radius < 0.95:
            settings.append((outer, inner, spectrum))
            full += n == N
    return settings


def window_steps(outer, inner, spectrum) -> int:
    """Outer steps such that at the window start (half the run) the spread's transient is
    below 1e-6 of its stationary value: twice that burn-in, from 60 to 400 steps."""
    rate = analyse(outer, inner, spectrum).variance_decay_factor
    return 2 * burn_in(rate, tolerance=1e-6, minimum=30, cap=200)


def config(index: int, trials: int = 300):
    from noloco.quadratic.sim_config import SimConfig

    outer, inner, spectrum = draw_settings()[index]
    return SimConfig(outer=outer, inner=inner, curvatures=spectrum.curvatures, trials=trials,
                     outer_steps=window_steps(outer, inner, spectrum), seed=index)


def table(trials: int = 300) -> str:
    from noloco.quadratic.compare import DecayCheck, SimulateReport, compare

    rows = ["| # | N | n | alpha | beta | gamma | momentum | eta | H | lambda | spread MC +- se | theory | z "
            "| decay MC +- se | theory | z | mean y_10 MC +- se | theory |",
            "|" + "---|" * 18]
    fmt = lambda x: "-" if x is None else f"{x:.4g}"
    for i in range(len(draw_settings())):
        cfg = config(i, trials)
        r = SimulateReport.from_json(compare(cfg))
        o, inn, s, d = cfg.outer, cfg.inner, r.summary, r.decay or DecayCheck()
        m = r.trajectories.mean_distance
        rows.append(
            f"| {i} | {o.replicas} | {o.group_size} | {o.alpha:.3f} | {o.beta:.3f} | {o.gamma:.3f} | {o.momentum} "
            f"| {inn.lr:.4f} | {inn.steps} | {cfg.curvatures[0]:.3f} "
            f"| {fmt(s.stationary_variance_mc)} +- {fmt(s.stationary_variance_se)} "
            f"| {fmt(s.stationary_variance_theory)} | {fmt(s.z_score)} "
            f"| {fmt(d.ratio_mc)} +- {fmt(d.ratio_se)} | {fmt(d.ratio_theory)} "
            f"| {fmt(d.z_score)} | {m.mc[10][0]:.4g} +- {m.se[10][0]:.2g} | {m.theory[10][0]:.4g} |")
    return "\n".join(rows)


if __name__ == "__main__":
    from noloco.infra.entry import print_main

    raise SystemExit(print_main("python -m noloco.quadratic.agreement", __doc__, table))
