"""Inner optimizers that carry state across outer steps (momentum SGD, Adam) on a quadratic:
the simulator against the exact carried-state theory (:class:`noloco.theory.exchangeable.InnerPhase`),
its AR(1) reduction, the i.i.d. model and the SGD prediction (used by the tests and by
docs/theory.md).

    python -m noloco.quadratic.carried      # prints the markdown table
"""

from __future__ import annotations

from dataclasses import dataclass

#: optimizer, lr, H, sigma, curvature, gamma, momentum convention (N = 8, pairs, alpha 0.5, beta 0.7)
SETTINGS = [
    ("momentum", 0.01, 10, 1.0, 1.0, 0.7, "heavy-ball"),
    ("momentum", 0.02, 5, 0.5, 2.0, 0.3, "nesterov"),
    ("momentum", 0.005, 20, 1.0, 0.5, 0.0, "heavy-ball"),
    ("adam", 0.01, 10, 1.0, 1.0, 0.7, "heavy-ball"),
    ("adam", 0.002, 20, 0.5, 2.0, 0.7, "heavy-ball"),
    ("adam", 0.005, 10, 2.0, 0.5, 1.0, "nesterov"),
    ("adam", 0.001, 50, 1.0, 1.0, 0.7, "heavy-ball"),
    ("adam", 0.01, 5, 1.0, 3.0, 0.3, "heavy-ball"),
]
MOMENTUM = 0.9   # inner momentum of the momentum rows; Adam uses betas (0.9, 0.999)


@dataclass(frozen=True)
class CarriedCheck:
    """The simulated stationary spread (``simulated`` +- ``se``) and four models' predictions: the exact
    carried-state recursion, its AR(1) reduction (from ``ar1_inputs`` c, s2, rho), i.i.d. with the same c and s2,
    and SGD at the same learning rate."""

    simulated: float
    se: float
    exact: float
    ar1_inputs: tuple
    ar1: float
    iid: float
    sgd: float


@dataclass(frozen=True)
class HeterogeneousCheck:
    """The simulated stationary spread with offset optima against the drift theory and the theory without
    drift, and the replica mean's final distance (+- se)."""

    simulated: float
    se: float
    drift: float
    no_drift: float
    mean: float
    mean_se: float


def compare(optimizer, lr, H, sigma, curvature, gamma, convention, trials: int = 200, seed: int = 11) -> CarriedCheck:
    """Simulated stationary spread (mean +- se over trials) and the predictions of four models."""
    from noloco.quadratic.sim_config import SimConfig
    from noloco.quadratic.simulator import simulate
    from noloco.theory import exchangeable as X
    from noloco.theory import numeric, stats
    from noloco.theory.config import InnerConfig, OuterConfig

    outer = OuterConfig(replicas=8, group_size=2, alpha=0.5, beta=0.7, gamma=gamma, momentum=convention)
    phase = (X.InnerPhase.momentum(lr, curvature, H, sigma, MOMENTUM) if optimizer == "momentum"
             else X.InnerPhase.adam(lr, curvature, H, sigma))
    burn = stats.burn_in(X.decay_factor(outer, phase=phase), 1e-4, cap=400)
    cfg = SimConfig(outer=outer, inner=InnerConfig(lr=lr, steps=H, noise=sigma), curvatures=(curvature,),
                    optimizer=optimizer, inner_momentum=MOMENTUM, trials=trials, outer_steps=burn + 200,
                    burn_in=burn, start=0.0, seed=seed)
    mc, se = stats.mean_se(simulate(cfg).window_spread)
    c, s2, rho = phase.ar1_inputs()
    c_sgd, s2_sgd = numeric.inner_sgd(lr, curvature, H, sigma)
    return CarriedCheck(simulated=mc, se=se, exact=X.stationary_spread(outer, phase=phase), ar1_inputs=(c, s2, rho),
                        ar1=X.stationary_spread(outer, c, s2, rho), iid=X.stationary_spread(outer, c, s2),
                        sgd=X.stationary_spread(outer, float(c_sgd), float(s2_sgd)))


def table() -> str:
    from noloco.theory.stats import z_score

    rows = ["| inner | lr | H | σ | λ | γ | outer | simulated ± se | exact carried state (z) "
            "| AR(1) reduction c, s2, ρ (z) | i.i.d. with same c, s2 (z) | SGD at the same lr |",
            "|" + "---|" * 12]
    for setting in SETTINGS:
        r = compare(*setting)
        z = lambda theory: z_score(r.simulated, r.se, theory)  # noqa: E731
        c, s2, rho = r.ar1_inputs
        opt, lr, H, sigma, lam, gamma, conv = setting
        rows.append(f"| {opt} | {lr:g} | {H} | {sigma:g} | {lam:g} | {gamma:g} | {conv} | {r.simulated:.4g} ± "
                    f"{r.se:.2g} | {r.exact:.4g} ({z(r.exact):+.2f}) | {c:.3g}, {s2:.3g}, {rho:.3g}: "
                    f"{r.ar1:.4g} ({z(r.ar1):+.1f}) | {r.iid:.4g} ({z(r.iid):+.0f}) | {r.sgd:.4g} "
                    f"({r.simulated / r.sgd:.2g}x) |")
    return "\n".join(rows)




#: heterogeneous optima (SimConfig.zeta): gamma, zeta, curvature, alpha, n, momentum (N = 8, beta 0.7,
#: inner SGD lr 0.01, H 20, sigma 1)
HETEROGENEOUS = [(0.7, 0.3, 1.0, 0.5, 2, "heavy-ball"), (0.0, 0.3, 1.0, 0.5, 2, "heavy-ball"),
                 (0.3, 1.0, 0.5, 0.8, 4, "nesterov"), (1.0, 0.1, 2.0, 0.0, 2, "heavy-ball")]


def compare_heterogeneous(gamma, zeta, curvature, alpha, group_size, convention, trials: int = 200,
                          seed: int = 5) -> HeterogeneousCheck:
    """Replica optima offset by zeta (fixed per trial, zero mean over replicas): for inner SGD the
    progress gains the drift d_i = c b_i, so the drift variance is c^2 zeta^2. Simulated stationary
    spread and final mean distance next to the drift theory and the theory without drift."""
    from noloco.quadratic.sim_config import SimConfig
    from noloco.quadratic.simulator import simulate
    from noloco.theory import exchangeable as X
    from noloco.theory import numeric, stats
    from noloco.theory.config import InnerConfig, OuterConfig

    outer = OuterConfig(replicas=8, group_size=group_size, alpha=alpha, beta=0.7, gamma=gamma, momentum=convention)
    lr, H, sigma = 0.01, 20, 1.0
    c, s2 = map(float, numeric.inner_sgd(lr, curvature, H, sigma))
    burn = stats.burn_in(X.decay_factor(outer, c, with_drift=True), 1e-4, cap=600)
    cfg = SimConfig(outer=outer, inner=InnerConfig(lr=lr, steps=H, noise=sigma), curvatures=(curvature,),
                    zeta=zeta, trials=trials, outer_steps=burn + 200, burn_in=burn, start=0.0, seed=seed)
    run = simulate(cfg)
    mc, se = stats.mean_se(run.window_spread)
    return HeterogeneousCheck(simulated=mc, se=se,
                              drift=X.stationary_spread(outer, c, s2, drift_var=c * c * zeta * zeta),
                              no_drift=X.stationary_spread(outer, c, s2), mean=float(run.mean_distance.mean[-1][0]),
                              mean_se=float(run.mean_distance.se[-1][0]))


if __name__ == "__main__":
    from noloco.infra.entry import print_main

    raise SystemExit(print_main("python -m noloco.quadratic.carried", __doc__, table))
