"""Correlated progress noise and per-replica drift: the extended recursion against the i.i.d.
closed forms, the sympy maps, exact enumeration over all partitions, and Monte Carlo."""

import numpy as np
import pytest

from noloco.theory import exchangeable as X
from noloco.theory import numeric, stats
from noloco.theory.config import OuterConfig
from noloco.theory.enumeration import enumerate_moments
from noloco.theory.outer import outer_step
from noloco.quadratic import carried

SETTINGS = [(8, 2, 0.5, 0.7, 0.7, 0.4), (16, 4, 0.3, 0.9, 0.2, 0.1), (4, 2, 0.8, 0.5, 1.0, 0.05),
            (6, 3, 0.0, 1.0, 0.5, 0.3)]


@pytest.mark.parametrize("momentum", ["heavy-ball", "nesterov"])
@pytest.mark.parametrize("N,n,alpha,beta,gamma,c", SETTINGS)
def test_reduces_to_the_iid_closed_forms(N, n, alpha, beta, gamma, c, momentum):
    o = OuterConfig(replicas=N, group_size=n, alpha=alpha, beta=beta, gamma=gamma, momentum=momentum)
    v0 = float(numeric.stationary_variance(alpha, beta, gamma, c, 0.3, N, n, momentum))
    assert X.stationary_spread(o, c, 0.3) == pytest.approx(v0, rel=1e-12)
    assert X.decay_factor(o, c) == pytest.approx(float(numeric.variance_decay_factor(
        alpha, beta, gamma, c, o.kappa, momentum)), abs=1e-12)
    exact = numeric.spread_trajectory(o, c, 0.3, 15, initial=(0.2 * (1 - 1 / N), 0, 0))
    assert np.allclose(X.spread_trajectory(o, c, 0.3, 15, spread0=0.2), exact, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("momentum", ["heavy-ball", "nesterov"])
def test_numeric_maps_equal_the_sympy_derivation(momentum):
    F = X.symbolic_maps(momentum)
    values = {"alpha": 0.45, "beta": 0.8, "gamma": 0.6, "c": 0.3, "rho": 0.7, "s2": 0.25}
    subs = {sym: values[sym.name] for m in F for sym in m.free_symbols}
    numeric_maps = X.step_maps(OuterConfig(alpha=0.45, beta=0.8, gamma=0.6, momentum=momentum), 0.3, 0.7, 0.25)
    for symbolic_map, numeric_map in zip(F, numeric_maps):
        assert np.allclose(np.array(symbolic_map.subs(subs), dtype=float).reshape(numeric_map.shape),
                           numeric_map, atol=1e-14)


def _step(outer, c, rho, s2):
    """The model stepped directly with a partition's averaging matrix A (no own/mean split)."""
    scale = np.sqrt((1 - rho ** 2) * s2)

    def step(w, A, xi):
        y, delta, eps_prev, drift = w
        eps = rho * eps_prev + scale * xi
        y, delta = outer_step(y, delta, A @ y, A @ (-c * y + drift + eps), **outer.rule())
        return np.stack([y, delta, eps, drift])

    return step


@pytest.mark.parametrize("momentum", ["heavy-ball", "nesterov"])
@pytest.mark.parametrize("N,n", [(4, 1), (4, 2), (6, 2), (6, 3), (4, 4)])
def test_recursion_equals_exact_enumeration(N, n, momentum):
    o = OuterConfig(replicas=N, group_size=n, alpha=0.6, beta=0.8, gamma=0.5, momentum=momentum)
    c, rho, s2, drift_var, spread0 = 0.3, 0.6, 0.2, 0.15, 0.4
    P = np.eye(N) - np.ones((N, N)) / N
    S0 = X.initial(s2, rho, drift_var, spread0)
    # exchangeable start: deviations S0 (x) P plus a common random offset of y (any value)
    C0 = np.kron(S0, P) + np.kron(np.diag([2.0, 0.0, 0.0, 0.0]), np.ones((N, N)))
    exact = enumerate_moments(_step(o, c, rho, s2), 4, N, n, C0, 10)
    rec = X.recursion(o, c, s2, rho)
    S = S0
    for t in range(11):
        assert np.allclose(exact[t], (1 - 1 / N) * S, rtol=1e-11, atol=1e-13), t
        S = rec.step(S)


def _monte_carlo(o, c, s2, rho, drift_var, steps, trials, seed, burn):
    """Replica variance of the model stepped with real random partitions (noloco.theory.partitions)."""
    from noloco.theory.partitions import group_mean, random_permutations

    rng = np.random.default_rng(seed)
    N, n = o.replicas, o.group_size
    drift = np.sqrt(drift_var) * rng.standard_normal((trials, N))
    drift -= drift.mean(1, keepdims=True)  # E over replicas of (d_i - mean d)^2 = (1 - 1/N) drift_var
    y, delta = np.zeros((trials, N)), np.zeros((trials, N))
    eps = np.sqrt(s2) * rng.standard_normal((trials, N)) if rho else np.zeros((trials, N))
    window = []
    for t in range(steps):
        eps = rho * eps + np.sqrt((1 - rho ** 2) * s2) * rng.standard_normal((trials, N))
        perm = random_permutations(rng, (trials,), N)
        y, delta = outer_step(y, delta, group_mean(y, perm, n), group_mean(-c * y + drift + eps, perm, n),
                              **o.rule())
        if t + 1 > burn:
            window.append(y.var(1))
    return stats.mean_se(np.mean(window, axis=0))


MC = [  # N, n, alpha, beta, gamma, momentum, c, rho, drift_var
    (8, 2, 0.5, 0.7, 0.7, "heavy-ball", 0.4, 0.0, 0.0),
    (8, 2, 0.5, 0.7, 0.7, "heavy-ball", 0.4, 0.8, 0.0),
    (8, 2, 0.5, 0.7, 0.7, "heavy-ball", 0.4, -0.5, 0.0),
    (8, 2, 0.5, 0.7, 0.7, "heavy-ball", 0.4, 0.0, 0.05),
    (16, 4, 0.3, 0.9, 0.2, "nesterov", 0.2, 0.6, 0.02),
    (4, 2, 0.0, 1.0, 0.8, "heavy-ball", 0.0, 0.9, 0.0),
    (8, 2, 0.5, 0.7, 0.7, "heavy-ball", 0.0, 0.5, 0.01),
    (8, 4, 0.7, 0.5, 0.3, "nesterov", 0.1, 0.3, 0.03),
]


@pytest.mark.parametrize("N,n,alpha,beta,gamma,momentum,c,rho,drift_var", MC)
def test_stationary_spread_matches_monte_carlo(N, n, alpha, beta, gamma, momentum, c, rho, drift_var):
    """Within 4 SE over 400 independent trials (window mean per trial after a burn-in)."""
    o = OuterConfig(replicas=N, group_size=n, alpha=alpha, beta=beta, gamma=gamma, momentum=momentum)
    s2 = 0.1
    predicted = X.stationary_spread(o, c, s2, rho, drift_var)
    burn = stats.burn_in(X.decay_factor(o, c, rho, with_drift=drift_var > 0), 1e-4, cap=600)
    mc, se = _monte_carlo(o, c, s2, rho, drift_var, burn + 200, 400, seed=N * 100 + n, burn=burn)
    assert abs(stats.z_score(mc, se, predicted)) < 4, (mc, se, predicted)


def test_flat_direction_without_pull_grows_ballistically_with_drift():
    """c = 0, gamma = 0: a persistent drift makes the spread's std grow linearly in t (variance ~ t^2,
    log-log slope 2t/(t - t0) with the momentum's delay t0 ~ 1/(1 - alpha), so measured late);
    without drift it grows like sqrt(t)."""
    o = OuterConfig(replicas=8, group_size=2, alpha=0.9, beta=0.7, gamma=0.0)
    assert X.decay_factor(o, 0.0, with_drift=True) >= 1 and X.stationary_spread(o, 0.0, 1e-4, 0.0, 1e-4) == np.inf
    drift = X.spread_trajectory(o, 0.0, 0.0, 2000, drift_var=1e-4)
    noise = X.spread_trajectory(o, 0.0, 1e-4, 2000)
    slope = lambda v: np.polyfit(np.log([1000, 2000]), np.log(v[[1000, 2000]]), 1)[0]
    assert slope(drift) == pytest.approx(2.0, abs=0.05)
    assert slope(noise) == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("mu,H", [(0.5, 5), (0.9, 10), (0.9, 50)])
def test_momentum_buffer_carried_over_phases_gives_the_predicted_rho(mu, H):
    """SGD with heavy-ball momentum in a flat direction, buffer carried across phases: the lag-1
    correlation of consecutive phases' progress, over 4000 independent runs, within 4 SE."""
    rng = np.random.default_rng(7)
    runs, phases = 4000, 10
    buffer, progress = np.zeros(runs), []
    for _ in range(phases):
        total = np.zeros(runs)
        for _ in range(H):
            buffer = mu * buffer + rng.standard_normal(runs)
            total -= buffer
        progress.append(total)
    a, b = progress[-2], progress[-1]
    r = np.corrcoef(a, b)[0, 1]
    se = (1 - r ** 2) / np.sqrt(runs)
    assert abs(r - X.InnerPhase.momentum(0.01, 0.0, H, 1.0, mu).ar1_inputs()[2]) < 4 * se


# ---------------------------------------------------------------- carried inner state


def _momentum_step(outer, lr, lam, H, sigma, mu, weight):
    """H real inner steps of m <- mu m + w g, theta <- theta - lr m (buffer carried), then the outer
    step with the partition's averaging matrix A; H innovations per replica."""
    def step(w, A, xi):
        y, delta, m, drift = w
        theta, m = y.copy(), m.copy()
        for h in range(H):
            m = mu * m + weight * (lam * theta + sigma * xi[h])
            theta = theta - lr * m
        y_new, delta_new = outer_step(y, delta, A @ y, A @ (theta - y + drift), **outer.rule())
        return np.stack([y_new, delta_new, m, drift])

    return step


@pytest.mark.parametrize("momentum", ["heavy-ball", "nesterov"])
@pytest.mark.parametrize("N,n", [(4, 2), (6, 3), (4, 1)])
def test_carried_momentum_phase_equals_enumeration_of_real_inner_steps(N, n, momentum):
    """The InnerPhase of H momentum steps (its matrices and noise factor) inside the recursion
    equals the exact enumeration of the full covariance with the inner steps run one by one."""
    o = OuterConfig(replicas=N, group_size=n, alpha=0.4, beta=0.9, gamma=0.6, momentum=momentum)
    lr, lam, H, sigma, mu = 0.1, 0.8, 4, 0.5, 0.7
    phase = X.InnerPhase.momentum(lr, lam, H, sigma, mu)
    P = np.eye(N) - np.ones((N, N)) / N
    S0 = np.diag([0.3, 0.0, 0.2, 0.05])
    S0[0, 2] = S0[2, 0] = 0.1
    exact = enumerate_moments(_momentum_step(o, lr, lam, H, sigma, mu, 1.0), 4, N, n, np.kron(S0, P), 8,
                              innovations=H)
    rec, S = X.recursion(o, phase=phase), S0
    for t in range(9):
        assert np.allclose(exact[t], (1 - 1 / N) * S, rtol=1e-10, atol=1e-13), t
        S = rec.step(S)


@pytest.mark.parametrize("setting", carried.SETTINGS)
def test_carried_state_theory_matches_the_simulator_with_inner_momentum_and_adam(setting):
    """noloco.quadratic.simulator with real inner momentum SGD / Adam (state carried across outer steps)
    against the exact carried-state recursion: stationary spread within 4 SE (200 trials)."""
    r = carried.compare(*setting)
    assert abs(stats.z_score(r.simulated, r.se, r.exact)) < 4, r


@pytest.mark.parametrize("setting", carried.HETEROGENEOUS)
def test_heterogeneous_optima_floor_and_mean_match_the_simulator(setting):
    """Offsets zeta of the replicas' optima (noloco.quadratic.simulator's --zeta): the drift theory's floor
    within 4 SE, the no-drift theory rejected, and the replica mean at the average optimum (4 SE)."""
    r = carried.compare_heterogeneous(*setting)
    assert abs(stats.z_score(r.simulated, r.se, r.drift)) < 4, r
    assert abs(stats.z_score(r.simulated, r.se, r.no_drift)) > 10, r
    assert abs(r.mean) < 4 * r.mean_se, r


@pytest.mark.parametrize("momentum", ["heavy-ball", "nesterov"])
@pytest.mark.parametrize("mu,weight,lr", [(0.9, 1.0, 0.01), (0.9, 0.1, 0.2), (0.5, 1.0, 0.05)])
def test_mean_radius_with_a_carried_buffer_is_the_rate_of_real_inner_steps(momentum, mu, weight, lr):
    """The mean (noise-free identical replicas) run with real inner steps is a linear map of
    (y, delta, m); its spectral radius, read off by stepping unit vectors, is the mean's rate."""
    o = OuterConfig(replicas=4, group_size=2, alpha=0.5, beta=0.7, gamma=0.7, momentum=momentum)
    lam, H = 1.5, 5
    step = _momentum_step(o, lr, lam, H, 0.0, mu, weight)
    columns = [step(np.eye(4)[k][:, None], np.ones((1, 1)), np.zeros((H, 1)))[:3, 0] for k in range(3)]
    measured = np.max(np.abs(np.linalg.eigvals(np.column_stack(columns))))
    phase = X.InnerPhase.momentum(lr, lam, H, 0.0, mu, weight)
    assert X.mean_radius(o, phase) == pytest.approx(measured, rel=1e-12)


# ---------------------------------------------------------------- the commands


def _check_json(capsys, *argv):
    import json

    from noloco.cli import main

    code = main(["check", "--preset", "paper", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("flags,phase", [
    (["--inner-optimizer", "adam", "--inner-lr", "0.002"], lambda: X.InnerPhase.adam(0.002, 1.0, 50, 1.0)),
    (["--inner-optimizer", "momentum", "--inner-momentum", "0.5"], lambda: X.InnerPhase.momentum(0.01, 1.0, 50, 1.0, 0.5)),
    (["--noise-correlation", "0.6"], lambda: X.InnerPhase.ar1(*numeric.inner_sgd(0.01, 1.0, 50, 1.0), 0.6)),
])
def test_check_reports_the_extended_model(capsys, flags, phase):
    code, out = _check_json(capsys, *flags)
    o = OuterConfig()
    assert code == 0 and out["stable"]
    assert out["stationary_variance"] == pytest.approx(X.stationary_spread(o, phase=phase()), rel=1e-12)
    assert out["variance_decay_factor"] == pytest.approx(X.decay_factor(o, phase=phase()), rel=1e-12)
    assert out["inner_model"]["optimizer"] == (flags[1] if flags[0] == "--inner-optimizer" else "sgd")


def test_check_heterogeneity_and_conflicts(capsys):
    code, out = _check_json(capsys, "--zeta", "0.3")
    c, s2 = (float(x) for x in numeric.inner_sgd(0.01, 1.0, 50, 1.0))
    assert code == 0 and out["stationary_variance"] == pytest.approx(
        X.stationary_spread(OuterConfig(), c, s2, drift_var=(c * 0.3) ** 2), rel=1e-12)
    from noloco.cli import main

    for argv, words in [(["--inner-optimizer", "adam", "--noise-correlation", "0.3"], "model inner SGD"),
                        (["--noise-correlation", "1"], "noise_correlation=1.0"),
                        (["--inner-momentum", "0.5"], "--inner-momentum 0.5 applies to --inner-optimizer momentum")]:
        assert main(["check", *argv]) == 2
        assert words in capsys.readouterr().err


@pytest.mark.parametrize("optimizer,zeta", [("adam", 0.0), ("momentum", 0.0), ("sgd", 0.3)])
def test_simulate_predicts_carried_state_and_drift(optimizer, zeta):
    """`noloco simulate` puts the extended model next to the run: the windowed spread within 4 SE."""
    from noloco.quadratic.compare import compare
    from noloco.quadratic.sim_config import SimConfig
    from noloco.theory.config import InnerConfig

    cfg = SimConfig(outer=OuterConfig(), inner=InnerConfig(lr=0.01, steps=10, noise=1.0), curvatures=(1.0,),
                    optimizer=optimizer, zeta=zeta, trials=200, outer_steps=300, start=0.0, seed=2)
    s = compare(cfg, decay=False)["summary"]
    assert abs(s["z_score"]) < 4, s
    assert s["stationary_variance_theory"] == pytest.approx(s["stationary_variance_window_theory"], rel=0.02)


@pytest.mark.parametrize("outer", [OuterConfig(), OuterConfig(replicas=16, group_size=4, alpha=0.8, gamma=0.2,
                                                               momentum="nesterov"), OuterConfig(group_size=8, gamma=0.0)])
def test_the_stepper_is_the_recursions_step(outer):
    """X.Stepper builds the maps once (affine in c and rho): the same step as X.recursion(...).step, drift included."""
    step, rng = X.Stepper(outer), np.random.default_rng(0)
    for _ in range(20):
        c, rho, s2 = rng.uniform(-0.5, 1), rng.uniform(-0.9, 0.9), rng.uniform(0.1, 2)
        A = rng.normal(size=(4, 4))
        S = A @ A.T
        np.testing.assert_allclose(step(S, c, s2, rho), X.recursion(outer, c, s2, rho).step(S), rtol=1e-12, atol=1e-12)
