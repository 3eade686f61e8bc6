"""The closed 3-moment recursion against the exact expectation over all partitions."""

import numpy as np
import pytest
import sympy as sp

from noloco.theory import numeric, symbolic as S
from noloco.theory.config import OuterConfig, group_kappa
from noloco.theory.enumeration import all_partitions, exact_enumeration

CASES = [(N, n) for N in (4, 6, 8) for n in sorted({1, 2, 4, N}) if N % n == 0]


def closed_recursion(outer, c, s2, v0, steps, kappa=None):
    kappa = group_kappa(outer.replicas, outer.group_size) if kappa is None else kappa
    _, T, f = numeric.transition(outer.alpha, outer.beta, outer.gamma, c, kappa, outer.momentum)
    v, out = np.array(v0, float), []
    for _ in range(steps + 1):
        out.append(v.copy())
        v = numeric.second_moment_step(T, v, s2, outer.replicas, outer.group_size, f)
    return np.array(out)


def exchangeable_start(N):
    """Replicas iid around a shared random offset: Sigma0 (x) I + Sigma1 (x) 11^T."""
    S0 = np.array([[1.0, 0.3], [0.3, 0.5]])
    S1 = np.array([[2.0, -0.4], [-0.4, 0.7]])
    C0 = np.kron(S0, np.eye(N)) + np.kron(S1, np.ones((N, N)))
    return C0, np.array([S0[0, 0], S0[0, 1], S0[1, 1]]) * (1 - 1 / N)


@pytest.mark.parametrize("momentum", ["heavy-ball", "nesterov"])
@pytest.mark.parametrize("N,n", CASES)
def test_closed_recursion_equals_enumeration(N, n, momentum):
    outer = OuterConfig(replicas=N, group_size=n, alpha=0.6, beta=0.8, gamma=0.9, momentum=momentum)
    C0, v0 = exchangeable_start(N)
    exact = exact_enumeration(outer, c=0.35, s2=0.2, C0=C0, steps=12)
    closed = closed_recursion(outer, 0.35, 0.2, v0, 12)
    assert np.max(np.abs(exact - closed)) <= 1e-12 * max(1.0, np.max(np.abs(exact)))


def test_enumeration_detects_a_wrong_kappa():
    """The comparison above has power: kappa replaced by the plausible 1/n - 1/N fails."""
    outer = OuterConfig(replicas=6, group_size=2, alpha=0.6, beta=0.8, gamma=0.9)
    C0, v0 = exchangeable_start(6)
    exact = exact_enumeration(outer, 0.35, 0.2, C0, 12)
    wrong = closed_recursion(outer, 0.35, 0.2, v0, 12, kappa=1 / 2 - 1 / 6)
    assert np.max(np.abs(exact - wrong)) > 1e-3


def test_partition_counts():
    assert len(all_partitions(6, 2)) == 15
    assert len(all_partitions(8, 2)) == 105
    assert len(all_partitions(8, 4)) == 35
    assert len(all_partitions(6, 3)) == 10


@pytest.mark.parametrize("momentum", ["heavy-ball", "nesterov"])
def test_mean_is_diloco(momentum):
    """The pull term cancels in the mean: M depends on (alpha, beta*c) only, and is the
    outer step of a single replica that sees its own progress (n = N = 1)."""
    th = S.derive(momentum)
    assert not th.M.has(S.gamma) and not th.M.has(S.kappa)
    if momentum == "heavy-ball":
        a1, a0 = th.mean_charpoly
        assert sp.expand(a1 - (S.beta * S.c - 1 - S.alpha)) == 0 and sp.expand(a0 - S.alpha) == 0


@pytest.mark.parametrize("N", [4, 8, 16, 64, 1024])
def test_pure_random_pairing_decay(N):
    """alpha = beta = 0, gamma = 1: phi <- group mean, so E z^2 shrinks by kappa exactly."""
    value = numeric.variance_decay_factor(0.0, 0.0, 1.0, 0.5, group_kappa(N, 2))
    assert abs(value - (N - 2) / (2 * (N - 1))) < 1e-12


def test_limits():
    lim = S.limits("heavy-ball")
    assert lim["diloco"] == 0
    # n = 1: independent heavy-ball replicas, AR variance beta s2 (1+alpha) / (c (1-alpha)(2 + 2alpha - beta c)) (1 - 1/N)
    expected = S.beta * S.s2 * (1 + S.alpha) / (S.c * (1 - S.alpha) * (2 + 2 * S.alpha - S.beta * S.c)) * (S.N - 1) / S.N
    assert sp.simplify(lim["no_sync"] - expected) == 0
    # the spread vanishes as the learning rate decays: O(eta^2) with the pull, O(eta) without
    assert not sp.simplify(lim["small_lr"] / S.eta ** 2).has(S.eta)
    assert sp.degree(sp.numer(sp.together(lim["small_lr_gamma0"])), S.eta) == 1
    # flat direction: finite spread although the mean does not contract
    assert not lim["flat"].has(S.c)


def test_heavy_ball_compact_form():
    """The form quoted in docs/theory.md: R = beta^2 (1+alpha) / D with
    D = (1-kappa) gamma (1-alpha)(2(1+alpha)-gamma) + kappa beta c (1-alpha)(2(1+alpha)-beta c)
        - 2 alpha kappa (1-kappa) (beta c - gamma)^2."""
    a, b, g, c, k = S.alpha, S.beta, S.gamma, S.c, S.kappa
    D = ((1 - k) * g * (1 - a) * (2 * (1 + a) - g) + k * b * c * (1 - a) * (2 * (1 + a) - b * c)
         - 2 * a * k * (1 - k) * (b * c - g) ** 2)
    assert sp.simplify(S.derive("heavy-ball").spread_ratio - b ** 2 * (1 + a) / D) == 0


def test_limit_forms_quoted_in_docs():
    a, b, g, c, k, s2, N = S.alpha, S.beta, S.gamma, S.c, S.kappa, S.s2, S.N
    lim = S.limits("heavy-ball")
    share = k * (N - 1) / N
    flat = s2 * share * b ** 2 * (1 + a) / (g * (1 - k) * ((1 - a) * (2 * (1 + a) - g) - 2 * a * k * g))
    assert sp.simplify(lim["flat"] - flat) == 0
    gamma0 = (N - 1) / N * b * s2 * (1 + a) / (c * (2 * (1 - a ** 2) - b * c * (1 + a - 2 * a * k)))
    assert sp.simplify(lim["gamma0"] - gamma0) == 0
    small = (N - 1) / N * b * S.eta * S.sigma ** 2 / (2 * S.lam * (1 - a))
    assert sp.simplify(lim["small_lr_gamma0"] - small) == 0


@pytest.mark.parametrize("momentum", ["heavy-ball", "nesterov"])
def test_jury_matches_spectral_radius(momentum):
    rng = np.random.default_rng(5)
    a, b, g, c, k = rng.random((5, 20000)) * np.array([[1], [3], [3], [1.5], [1]])
    radius = numeric.variance_decay_factor(a, b, g, c, k, momentum)
    stable = numeric.spread_stable(a, b, g, c, k, momentum)
    clear = np.abs(radius - 1) > 1e-9
    assert np.array_equal(stable[clear], radius[clear] < 1)
    _, T, _ = numeric.transition(a[:500], b[:500], g[:500], c[:500], k[:500], momentum)
    assert np.allclose(np.abs(np.linalg.eigvals(T)).max(-1), radius[:500], atol=1e-10)


@pytest.mark.parametrize("lr,curvature,steps", [(0.01, 1.0, 50), (0.3, 2.0, 7), (0.05, 0.0, 10), (1.5, 1.0, 4)])
def test_inner_map(lr, curvature, steps, noise=0.7):
    """(c, s2) against H explicit SGD steps y <- y - lr (curvature y + noise xi) and the sympy form."""
    y, coeffs = 1.0, []
    for _ in range(steps):
        y -= lr * curvature * y
        coeffs = [(1 - lr * curvature) * k for k in coeffs] + [-lr * noise]  # weights of past xi
    c, s2 = numeric.inner_sgd(lr, curvature, steps, noise)
    assert c == pytest.approx(1 - y, abs=1e-14)
    assert s2 == pytest.approx(sum(k * k for k in coeffs), rel=1e-12)
    c_sym, s2_sym = S.inner_map()
    values = {S.eta: lr, S.lam: curvature, S.H: steps, S.sigma: noise}
    if curvature > 0:
        assert float(c_sym.subs(values)) == pytest.approx(c, abs=1e-14)
        assert float(s2_sym.subs(values).doit()) == pytest.approx(s2, rel=1e-12)
