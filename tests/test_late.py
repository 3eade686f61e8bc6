"""The one-phase-late outer step (the exchange overlapped with the next inner phase): its rule, its exact theory
on a quadratic, and the simulator against that theory."""

from __future__ import annotations

import numpy as np
import pytest

import noloco
from noloco.infra.errors import ConfigError
from noloco.quadratic.sim_config import SimConfig
from noloco.quadratic.simulator import simulate
from noloco.theory import exchangeable as X
from noloco.theory.late import delay_cost, late_phase, table
from noloco.theory.outer import late_outer_step, outer_step

#: agreement rule, fixed before the comparison: the simulated stationary spread within 4 standard errors of the
#: exact value (and the mean within 4 standard errors of its exact trajectory)
Z = 4.0


def test_the_late_step_is_the_outer_step_with_the_progress_carried():
    rng = np.random.default_rng(0)
    phi, delta, weights, anchor, mphi, mprog = rng.standard_normal((6, 5))
    new_phi, new_delta, new_weights = late_outer_step(phi, delta, weights, anchor, mphi, mprog, 0.5, 0.7, 0.3,
                                                      "nesterov")
    want = outer_step(phi, delta, mphi, mprog, 0.5, 0.7, 0.3, "nesterov")
    assert np.array_equal(new_phi, want[0]) and np.array_equal(new_delta, want[1])
    assert np.allclose(new_weights - new_phi, weights - anchor, rtol=0, atol=1e-15)


@pytest.mark.parametrize("model", [X.InnerModel(), X.InnerModel(optimizer="momentum", momentum=0.8)])
def test_the_late_phase_is_the_recursion_written_out(model):
    """One step of the exchangeable maps of the late phase equals the late recursion written by hand (the inner
    phase's own carried state, a momentum buffer, included)."""
    _, outer, inner = noloco.resolve("paper", alpha=0.6, beta=0.8, gamma=0.4, momentum="nesterov")
    phase = model.phase(inner.lr, 0.7, 10, inner.noise)
    F0, F1, g0, g1 = X.step_maps(outer, phase=late_phase(phase))
    rng = np.random.default_rng(1)
    own, mean = rng.standard_normal((2, F0.shape[0]))
    own[-1] = mean[-1] = 0.0  # no drift
    xi = rng.standard_normal(g0.shape[1])
    got = F0 @ own + F1 @ mean + g0 @ xi + g1 @ xi
    y, delta = outer_step(own[0], own[1], mean[0], mean[2], **outer.rule())
    pending = -phase.c * (own[0] + own[2]) + phase.k @ own[3:-1] + phase.L[0] @ xi
    state = phase.b * (own[0] + own[2]) + phase.Q @ own[3:-1] + phase.L[1:] @ xi
    assert np.allclose(got[:-1], [y, delta, pending, *state], rtol=0, atol=1e-14)
    assert not np.any(g1)  # what is pending is a replica's own progress: no group-mean noise enters


@pytest.mark.parametrize("curvatures, momentum, alpha", [((1.0,), "heavy-ball", 0.5), ((0.3, 3.0), "nesterov", 0.7)])
def test_the_simulated_late_spread_is_the_exact_one(curvatures, momentum, alpha):
    _, outer, inner = noloco.resolve("paper", momentum=momentum, alpha=alpha)
    cfg = SimConfig(outer=outer, inner=inner, curvatures=curvatures, trials=400, outer_steps=120, seed=3)
    run = simulate(cfg, late=True)
    w = run.window_spread
    se = w.std(ddof=1) / np.sqrt(w.size)
    cost = delay_cost(outer, inner, curvatures)
    assert abs(w.mean() - cost.late.stationary_variance) < Z * se
    # and the delay is seen: the prompt value is outside the same band (the late spread is about 15 % above it)
    assert abs(w.mean() - cost.prompt.stationary_variance) > Z * se


def test_the_simulated_late_mean_follows_the_exact_trajectory():
    _, outer, inner = noloco.resolve("paper")
    lam, steps = 1.0, 12
    cfg = SimConfig(outer=outer, inner=inner, curvatures=(lam,), trials=300, outer_steps=steps, seed=5)
    run = simulate(cfg, late=True)
    phase = X.InnerModel().phase(inner.lr, lam, inner.steps, inner.noise)
    F0, F1, _, _ = X.step_maps(outer, phase=late_phase(phase))
    x = np.zeros(F0.shape[0])
    x[0], x[2] = cfg.start, -phase.c * cfg.start  # the first phase ran from phi_0; its progress is pending
    exact = [x[0]]
    for _ in range(steps):
        x = (F0 + F1) @ x
        exact.append(x[0])
    mc, se = run.mean_distance.mean[:, 0], run.mean_distance.se[:, 0]
    assert np.all(np.abs(mc[1:] - exact[1:]) < Z * se[1:] + 1e-12)


def test_the_delay_cost_at_the_paper_preset():
    """The numbers docs/performance.md quotes (curvature 1, the paper preset)."""
    _, outer, inner = noloco.resolve("paper")
    cost = delay_cost(outer, inner, [1.0])
    assert round(cost.prompt.stationary_variance, 8) == 0.00152063  # noloco check --preset paper
    assert round(cost.ratio.stationary_variance, 3) == 1.144
    assert round(cost.prompt.mean_spectral_radius, 3) == 0.707
    assert round(cost.late.mean_spectral_radius, 3) == 0.793
    assert "| 0.00152063 | 0.00174026 | 1.1444 |" in table()  # python -m noloco.theory.late


def test_the_late_option_is_refused_where_it_is_not_simulated():
    _, outer, inner = noloco.resolve("paper")
    with pytest.raises(ConfigError, match="late=True"):
        simulate(SimConfig(outer=outer, inner=inner, optimizer="adam", trials=2, outer_steps=2), late=True)
    with pytest.raises(ConfigError, match="zeta"):
        delay_cost(outer, inner, [1.0], X.InnerModel(zeta=0.1))
