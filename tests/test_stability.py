"""The one stability classification (noloco.theory.stability) at the exact edges, and every stability verdict
the toolkit gives (the spread and the mean in `check`, `paper`'s Theorem 3, the maps) on seeded random
settings, edges and flat directions included, against an independent computation: the second moments of all
N replicas propagated by brute force over every partition (N = 4 and 6, no closure), their growth read over
2^16 outer steps. The comparison must fail when the tolerance is made strict again
(test_a_strict_tolerance_misjudges_the_edges)."""

import math

import numpy as np
import pytest

from noloco.claims import paper_directions as D
from noloco.cli import main
from noloco.theory import numeric, stability
from noloco.theory import paper as P
from noloco.theory.conditions import analyse
from noloco.theory.config import InnerConfig, OuterConfig, group_kappa
from noloco.theory.enumeration import all_partitions, averaging_matrix, full_maps
from noloco.theory.outer import outer_step
from noloco.theory.spectrum import Spectrum
from noloco.theory.stability import MARGINAL, STABLE, UNSTABLE, classify

ALPHAS = np.linspace(0, 0.99, 34)


# ------------------------------------------------------------------ the classifier at exact edges

@pytest.mark.parametrize("momentum", ["heavy-ball", "nesterov"])
@pytest.mark.parametrize("N, n", [(8, 2), (4, 2), (6, 3), (64, 4)])
def test_gamma_0_flat_direction_is_marginal_and_grows_linearly(N, n, momentum):
    """gamma = 0, c = 0: T has the eigenvalue 1 exactly, fed by the noise: the spread grows like t."""
    kappa = group_kappa(N, n)
    radius = numeric.variance_decay_factor(ALPHAS, 0.7, 0.0, 0.0, kappa, momentum)
    assert all(classify(r) == MARGINAL for r in radius)
    assert not numeric.spread_stable(ALPHAS, 0.7, 0.0, 0.0, kappa, momentum).any()
    _, T, f = numeric.transition(0.6, 0.7, 0.0, 0.0, kappa, momentum)
    assert stability.describe(float(numeric.variance_decay_factor(0.6, 0.7, 0.0, 0.0, kappa, momentum)), T,
                              1e-3 * f) == "marginal (grows like t)"
    assert stability.describe(1.0, T, None) == "marginal (bounded)"  # noise-free: E z^2 stays put


@pytest.mark.parametrize("momentum", ["heavy-ball", "nesterov"])
def test_the_mean_at_its_edges_is_marginal(momentum):
    """c = 0 (root 1) and, heavy-ball, beta c = 2 (1 + alpha) (root -1): marginal, never stable or unstable."""
    beta = np.linspace(0.1, 3, 30)[:, None]
    assert (numeric.mean_class(ALPHAS, beta, 0.3, 0.0, momentum) == 1).all()
    if momentum == "heavy-ball":
        c = 2 * (1 + ALPHAS) / beta
        assert (numeric.mean_class(ALPHAS, beta, 0.3, c, momentum) == 1).all()


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("power", [1, 2])
def test_eq_74_endpoints_are_outside_the_window(n, power):
    """At both endpoints |d_V| = 1 exactly: the paper's test says no, whatever the rounding."""
    for alpha in ALPHAS:
        low, high = (float(x) for x in P.spread_window(alpha, n, power))
        for gamma in (low, high):
            assert classify(abs(float(P.window_d(alpha, gamma, n, power)))) == MARGINAL
            assert not P.in_window(alpha, gamma, n, power)


def test_classification_and_display():
    tol = stability.TOLERANCE
    assert [classify(r) for r in (1 - 2 * tol, 1 - tol / 2, 1.0, 1 + tol / 2, 1 + 2 * tol, math.nan, math.inf)] == \
        [STABLE, MARGINAL, MARGINAL, MARGINAL, UNSTABLE, UNSTABLE, UNSTABLE]
    # a value that rounds to 1 at 6 digits is written so that it cannot contradict its class
    assert stability.format_radius(1 - 7e-9) == "1 - 7e-09" and stability.format_radius(1 + 3e-8) == "1 + 3e-08"
    assert stability.format_radius(1 - 1e-12) == "1" and stability.format_radius(0.5) == "0.5"


def test_a_strict_tolerance_misjudges_the_edges():
    """With tolerance 0 the edges fall on either side by rounding: the gamma = 0 flat line at N = 8 is
    called stable at some alphas and the lower Eq 74 endpoint inside the window at some; the stated
    tolerance calls every one marginal."""
    radius = numeric.variance_decay_factor(np.linspace(0, 0.99, 241), 0.7, 0.0, 0.0, group_kappa(8, 2))
    strict = [classify(r, 0.0) for r in radius]
    assert strict.count(STABLE) > 0 and strict.count(UNSTABLE) > 0
    d_v = [abs(float(P.window_d(a, float(P.spread_window(a, 2)[0]), 2))) for a in np.linspace(0.01, 0.99, 99)]
    assert any(classify(d, 0.0) == STABLE for d in d_v) and all(classify(d) == MARGINAL for d in d_v)


# ------------------------------------------------------------------ brute force over every partition

STEPS = 1 << 16


def _operators(outer: OuterConfig, c: float) -> dict:
    """Per subspace ("spread": deviations from the mean, "mean"), (L, b): the map of the covariance of the
    replicas' (y, delta) in that subspace averaged over every partition (row-major vec: vec(K C K^T) =
    (K kron K) vec C) and its forcing by unit progress noise. Both subspaces are invariant under every
    partition's step (a group average keeps the mean), so K restricts to B^T K B with B an orthonormal basis."""
    N = outer.replicas

    def step(w, A, xi):
        y, delta = w
        return np.stack(outer_step(y, delta, A @ y, A @ (-c * y + xi), **outer.rule()))

    maps = [full_maps(step, 2, N, averaging_matrix(g, N)) for g in all_partitions(N, outer.group_size)]
    centred = np.linalg.svd(np.eye(N) - np.ones((N, N)) / N)[0][:, :N - 1]
    out = {}
    for key, basis in (("spread", centred), ("mean", np.ones((N, 1)) / math.sqrt(N))):
        B = np.kron(np.eye(2), basis)
        restricted = [(B.T @ K @ B, B.T @ G) for K, G in maps]
        out[key] = (sum(np.kron(K, K) for K, _ in restricted) / len(maps),
                    sum((G @ G.T).ravel() for _, G in restricted) / len(maps), basis.shape[1])
    return out


def _growth(L, b, starts, steps=STEPS):
    """log2 of |x_2K| / |x_K| from each start (columns), worst start; with the forcing b if given."""
    k = L.shape[0]
    P_ = np.zeros((k + 1, k + 1))
    P_[:k, :k], P_[k, k] = L, 1.0
    if b is not None:
        P_[:k, k] = b
    x0 = np.vstack([starts, np.full((1, starts.shape[1]), 1.0 if b is not None else 0.0)])
    with np.errstate(over="ignore", invalid="ignore"):
        power = np.linalg.matrix_power(P_, steps)
        once = power @ x0
        twice = power @ once
        a, z = np.linalg.norm(once[:k], axis=0), np.linalg.norm(twice[:k], axis=0)
    if not (np.isfinite(a).all() and np.isfinite(z).all()):
        return math.inf
    # decayed to exactly 0 (underflow) counts as decay
    return max(math.log2(zi / ai) if ai > 0 and zi > 0 else -math.inf for ai, zi in zip(a, z))


def _verdict(L, b, starts) -> str | None:
    """The brute force's own verdict: geometric decay or growth over 2^16 steps, or a marginal recursion
    (bounded or growing like a power of t, read with the noise forcing); None where 2^16 steps cannot tell
    (a radius within about 3e-4 of 1 that is not 1)."""
    free = _growth(L, None, starts)
    if free < -20:
        return STABLE
    if free > 20:
        return UNSTABLE
    if abs(free) > 2.5:
        return None
    forced = _growth(L, b, starts)
    return f"{MARGINAL} ({stability.growth_label(forced)})"


def brute_force(outer: OuterConfig, c: float, s2: float = 1.0) -> dict:
    """The verdicts on the deviations and on the mean, from the partition-averaged covariance maps, started
    from exchangeable covariances (S kron I in the subspace, S each of the three symmetric 2 x 2 units)."""
    out = {}
    for key, (L, b, m) in _operators(outer, c).items():
        starts = np.stack([np.kron(S, np.eye(m)).ravel() for S in (np.diag([1.0, 0]), np.array([[0, 1.0], [1, 0]]),
                                                                  np.diag([0, 1.0]))], axis=1)
        out[key] = _verdict(L, s2 * b, starts)
    return out


def toolkit(outer: OuterConfig, c: float, s2: float = 1.0, tolerance=None) -> dict:
    """The toolkit's verdicts: the closed-form radii classified, the growth of a marginal one from the 3 x 3
    recursions (what `check` and `paper` print)."""
    rule = (outer.alpha, outer.beta, outer.gamma, c)
    _, T, f = numeric.transition(*rule, outer.kappa, outer.momentum)
    _, Tm, fm = numeric.transition(outer.alpha, outer.beta, 0.0, c, 1.0, outer.momentum)
    out = {}
    for key, radius, A, forcing in (
            ("spread", numeric.variance_decay_factor(*rule, outer.kappa, outer.momentum), T,
             s2 * float(numeric.noise_share(outer.replicas, outer.group_size)) * f),
            ("mean", numeric.mean_spectral_radius(*rule, outer.momentum), Tm, s2 / outer.replicas * fm)):
        label = classify(float(radius), tolerance)
        if label == MARGINAL:
            label = f"{MARGINAL} ({stability.growth_label(stability.growth_order(A, forcing))})"
        out[key] = label
    return out


def draws(count: int, seed: int) -> list:
    """Seeded settings: a third at exact edges (gamma = 0 in the flat direction, beta c = 2 (1 + alpha), the
    flat direction c = 0 at any gamma), the rest anywhere, N = 4 or 6, both momentum conventions."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        N = int(rng.choice([4, 6]))
        n = int(rng.choice([2, 3])) if N == 6 else 2
        alpha = float(rng.choice([0.0, rng.uniform(0, 0.95)]))
        beta, gamma, c = float(rng.uniform(0.05, 3)), float(rng.uniform(0, 3)), float(rng.uniform(0, 2))
        momentum = str(rng.choice(["heavy-ball", "nesterov"]))
        kind = ("gamma0-flat", "beta-c-edge", "flat", "anywhere", "anywhere", "anywhere")[k % 6]
        if kind == "gamma0-flat":
            gamma, c = 0.0, 0.0
        elif kind == "beta-c-edge":
            momentum, beta = "heavy-ball", float(rng.uniform(1 + alpha, 4))
            c = 2 * (1 + alpha) / beta
        elif kind == "flat":
            c = 0.0
        out.append((kind, OuterConfig(replicas=N, group_size=n, alpha=alpha, beta=beta, gamma=gamma,
                                      momentum=momentum), c))
    return out


def judged(settings) -> list:
    """(kind, outer, c, the brute force's verdicts) per setting."""
    return [(kind, outer, c, brute_force(outer, c)) for kind, outer, c in settings]


def disagreements(records, tolerance=None) -> list:
    """Where the toolkit's verdicts differ from the brute force's (undecidable settings skipped)."""
    out = []
    for kind, outer, c, bf in records:
        ours = toolkit(outer, c, tolerance=tolerance)
        for key in ("spread", "mean"):
            if bf[key] is not None and bf[key] != ours[key]:
                out.append((kind, outer, c, key, bf[key], ours[key]))
    return out


@pytest.fixture(scope="module")
def records():
    return judged(draws(72, seed=2024))


def test_random_settings_agree_with_brute_force_over_partitions(records):
    assert disagreements(records) == []
    # the draws reach every class, the edges included, and 2^16 steps decide nearly all of them
    labels = {v.split(" (")[0] for *_, bf in records for v in bf.values() if v is not None}
    assert labels == {STABLE, MARGINAL, UNSTABLE}
    assert sum(v is None for *_, bf in records for v in bf.values()) <= 3
    assert all(bf["spread"] == "marginal (grows like t)" for kind, *_, bf in records if kind == "gamma0-flat")


def test_a_strict_tolerance_fails_the_comparison(records):
    """The comparison above has teeth: with tolerance 0 the closed-form radii at the edges fall on either side
    of 1 by rounding, and the toolkit's verdicts disagree with the brute force."""
    wrong = disagreements(records, tolerance=0.0)
    assert len(wrong) >= 5 and {w[0] for w in wrong} <= {"gamma0-flat", "beta-c-edge", "flat"}


def test_audit_and_check_agree_with_brute_force(records):
    """Theorem 3's per-direction verdict (bounded: stable, or marginal without growth) and `check`'s verdict,
    against the brute force."""
    for kind, outer, c, bf in records:
        if bf["spread"] is not None:
            _, state, bounded = D.spread_state(outer, D.Direction(1.0 if c else 0.0, c, 1.0))
            assert state == bf["spread"] and bounded == (bf["spread"] in (STABLE, "marginal (bounded)")), (kind, c)
    # check: H = 1 and eta = 1 make c equal to the curvature; beta c = 2 (1 + alpha) exactly (n = N: DiLoCo,
    # no spread, so the mean decides)
    outer = OuterConfig(replicas=4, group_size=4, alpha=0.5, beta=1.5, gamma=0.7)
    result = analyse(outer, InnerConfig(lr=1.0, steps=1, noise=1.0), Spectrum((2.0,)))
    assert brute_force(outer, 2.0)["mean"].startswith(MARGINAL) and result.verdict == "marginal"


def test_check_exit_codes_at_the_edge(capsys):
    """A marginal setting is not a stable one: `check` exits 1 and names the growth."""
    code = main(["check", "--replicas", "4", "--group-size", "4", "--alpha", "0.5", "--beta", "1.5", "--gamma", "0.7",
                 "--inner-lr", "1", "--inner-steps", "1", "--curvature", "2"])
    out = capsys.readouterr().out
    assert code == 1 and "verdict: MARGINAL" in out and "marginal (" in out


def test_simulation_grows_as_the_verdicts_say():
    """Monte Carlo of the scalar model with random groups (noloco.quadratic.scalar; under a second), tolerance
    4 standard errors: at gamma = 0 in the flat direction E z^2 grows linearly (doubling from t = 200 to 400,
    as the exact recursion says); at alpha 0.8, gamma 1.2, c = 0.005 (curvature 0.01) it grows by T's radius
    per step."""
    from noloco.quadratic.scalar import simulate_scalar

    rng = np.random.default_rng(11)
    outer = OuterConfig(alpha=0.7, beta=0.7, gamma=0.0)
    v = simulate_scalar(outer, 0.0, 1e-3, 400, 400, rng)
    exact = numeric.spread_trajectory(outer, 0.0, 1e-3, 400)
    for t in (200, 400):
        mean, se = v[:, t].mean(), v[:, t].std(ddof=1) / math.sqrt(len(v))
        assert abs(mean - exact[t]) <= 4 * se
    assert exact[400] / exact[200] == pytest.approx(2, rel=0.05)
    outer = OuterConfig(alpha=0.8, beta=0.7, gamma=1.2)
    c = float(numeric.inner_sgd(0.01, 0.01, 50, 0.0)[0])
    radius = float(numeric.variance_decay_factor(0.8, 0.7, 1.2, c, outer.kappa))
    v = simulate_scalar(outer, c, 1e-3, 120, 2000, np.random.default_rng(12))
    late = np.log(v[:, 120].mean() / v[:, 80].mean()) / 40
    blocks = [np.log(b[:, 120].mean() / b[:, 80].mean()) / 40 for b in np.array_split(v, 20)]
    se = np.std(blocks, ddof=1) / math.sqrt(len(blocks))
    assert abs(late - math.log(radius)) <= 4 * se and radius > 1.1


def test_check_never_shows_a_rounded_radius_against_its_verdict(capsys):
    """Curvature 1e-7: the mean's radius is 1 - 7e-8, stable; printed at 6 digits it would be 1 beside 'yes, < 1'."""
    code = main(["check", "--curvature", "1e-7"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("replica mean converges"))
    assert code == 0 and "1 - 7e-08" in row and " yes " in row


def test_a_growth_that_overflows_has_words_not_an_error():
    """A marginal recursion whose powers overflow float64 (a step of 1e308) is said to grow without bound:
    `noloco paper --beta=1e308` was an internal error (round(inf))."""
    from noloco.theory import stability

    assert stability.growth_order([[1e308, 1e308], [0.0, 1.0]]) == math.inf
    assert stability.growth_label(math.inf) == "grows without bound (overflows float64)"
    assert stability.growth_label(1.02) == "grows like t" and stability.growth_label(0.1) == "bounded"
