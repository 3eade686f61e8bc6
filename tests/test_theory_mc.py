"""The closed forms against Monte Carlo of the scalar model, within 4 standard errors.

Settings are drawn with a fixed seed from the stable region. Trials are independent;
means, standard errors, z-scores, decay ratios and burn-in come from :mod:`noloco.theory.stats`.
"""

import numpy as np
import pytest

from noloco.quadratic.scalar import simulate_scalar
from noloco.theory import numeric, stats
from noloco.theory.config import OuterConfig

Z_MAX = 4.0


def draw_settings(count=10, seed=2026):
    rng = np.random.default_rng(seed)
    settings = []
    while len(settings) < count:
        N = int(rng.choice([4, 8, 16]))
        n = int(rng.choice([d for d in (1, 2, 4) if N % d == 0 and d < N]))
        momentum = ("heavy-ball", "nesterov")[len(settings) % 2]
        outer = OuterConfig(replicas=N, group_size=n, alpha=float(rng.uniform(0, 0.9)),
                            beta=float(rng.uniform(0.2, 1.2)), gamma=float(rng.uniform(0.05, 1.5)),
                            momentum=momentum)
        c = float(rng.uniform(0.05, 0.95))
        rule = (outer.alpha, outer.beta, outer.gamma, c)
        decay = float(numeric.variance_decay_factor(*rule, outer.kappa, momentum))
        if decay < 0.9 and numeric.mean_spectral_radius(*rule, momentum) < 1:
            settings.append((outer, c, decay))
    return settings


SETTINGS = draw_settings(count=14)


def has_spectral_gap(outer, c, ratio=0.9):
    """The step-ratio estimator of rho needs the next eigenvalue of T clearly smaller.
    Without a gap (e.g. n = 1 with underdamped momentum, where T = M (x) M has
    |mu|^2 and mu^2, conj(mu)^2 on one circle) the variance oscillates inside the
    envelope rho^t: those settings are covered by the trajectory test below."""
    _, T, _ = numeric.transition(outer.alpha, outer.beta, outer.gamma, c, outer.kappa, outer.momentum)
    moduli = np.sort(np.abs(np.linalg.eigvals(T)))
    return moduli[-2] < ratio * moduli[-1]


GAPPED = [s for s in SETTINGS if has_spectral_gap(s[0], s[1])]


def test_settings_cover_momentum_and_both_conventions():
    assert sum(o.alpha > 0.5 for o, _, _ in SETTINGS) >= 2
    assert {o.momentum for o, _, _ in SETTINGS} == {"heavy-ball", "nesterov"}
    assert len(SETTINGS) >= 8 and len(GAPPED) >= 8


def stationary_estimate(outer, c, decay, seed, trials=2000, record=150):
    burn = stats.burn_in(decay, tolerance=1e-8, minimum=1, cap=10_000)
    spread = simulate_scalar(outer, c, 1.0, burn + record, trials, np.random.default_rng(seed), record_from=burn)
    return stats.mean_se(spread.mean(axis=1))


@pytest.mark.parametrize("index", range(len(SETTINGS)))
def test_stationary_variance(index):
    outer, c, decay = SETTINGS[index]
    theory = float(numeric.stationary_variance(outer.alpha, outer.beta, outer.gamma, c, 1.0,
                                               outer.replicas, outer.group_size, outer.momentum))
    mc, se = stationary_estimate(outer, c, decay, seed=index)
    assert stats.holds(stats.z_score(mc, se, theory), Z_MAX), \
        f"{outer} c={c:.3f}: MC {mc:.5g} +- {se:.2g} vs theory {theory:.5g}"


def decay_estimate(outer, c, seed, trials=4000, window=8):
    """rho_hat = (mean Z_t2 / mean Z_t1)^(1 / (t2 - t1)), noise-free, iid start; SE by the delta method.
    t1 is the first step where the exact transient ratio is within 1e-3 of the spectral radius."""
    rho = float(numeric.variance_decay_factor(outer.alpha, outer.beta, outer.gamma, c, outer.kappa, outer.momentum))
    exact = numeric.spread_trajectory(outer, c, 0.0, 80, initial=(1 - 1 / outer.replicas, 0, 0))
    ratios = (exact[window:] / exact[:-window]) ** (1 / window)
    t1 = int(np.argmax(np.abs(ratios / rho - 1) < 1e-3))
    t2 = t1 + window
    rng = np.random.default_rng(seed)
    y0 = rng.standard_normal((trials, outer.replicas))
    Z = simulate_scalar(outer, c, 0.0, t2, trials, rng, y0=y0)
    rho_hat, se = stats.decay_ratio(Z[:, t1], Z[:, t2], window)
    return rho, rho_hat, se, ratios[t1]


@pytest.mark.parametrize("index", range(len(GAPPED)))
def test_variance_decay_factor(index):
    outer, c, _ = GAPPED[index]
    rho, rho_hat, se, exact_ratio = decay_estimate(outer, c, seed=100 + index)
    assert abs(exact_ratio / rho - 1) < 1e-3
    assert stats.holds(stats.z_score(rho_hat, se, rho), Z_MAX), \
        f"{outer} c={c:.3f}: MC {rho_hat:.5f} +- {se:.2g} vs theory {rho:.5f}"


@pytest.mark.parametrize("index", range(len(SETTINGS)))
def test_noise_free_transient(index, steps=15, trials=4000):
    """E z_t^2 at every step t <= 15 from an iid start, MC against the closed recursion."""
    outer, c, _ = SETTINGS[index]
    rng = np.random.default_rng(200 + index)
    Z = simulate_scalar(outer, c, 0.0, steps, trials, rng, y0=rng.standard_normal((trials, outer.replicas)))
    exact = numeric.spread_trajectory(outer, c, 0.0, steps, initial=(1 - 1 / outer.replicas, 0, 0))
    mean, se = stats.mean_se(Z)
    z = [stats.z_score(m, s, e) for m, s, e in zip(mean[1:], se[1:], exact[1:])]
    assert all(stats.holds(v, Z_MAX) for v in z), f"{outer} c={c:.3f}: max |z| = {np.max(np.abs(z)):.2f}"


def test_monte_carlo_rejects_a_wrong_formula():
    """Power check: the plausible but wrong forcing 1/n (instead of 1/n - 1/N) is rejected."""
    rejected = 0
    for index, (outer, c, decay) in enumerate(SETTINGS[:4]):
        right = float(numeric.stationary_variance(outer.alpha, outer.beta, outer.gamma, c, 1.0,
                                                  outer.replicas, outer.group_size, outer.momentum))
        wrong = right * (1 / outer.group_size) / (1 / outer.group_size - 1 / outer.replicas)
        mc, se = stationary_estimate(outer, c, decay, seed=index)
        rejected += not stats.holds(stats.z_score(mc, se, wrong), Z_MAX)
    assert rejected >= 3
