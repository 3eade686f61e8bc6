"""quadratic/: the simulator (real inner steps, shared outer step) against the exact theory
on quadratics. Every comparison is a z-test at 4 standard errors across independent trials,
with fixed seeds."""

import dataclasses
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

from noloco.cli import main
from noloco.quadratic.agreement import config, draw_settings
from noloco.quadratic.compare import compare
from noloco.quadratic.inner import InnerOptimizer, phase_coefficients
from noloco.quadratic.sim_config import SimConfig
from noloco.quadratic.simulator import simulate
from noloco.infra import files
from noloco.theory import numeric
from noloco.infra.errors import ConfigError
from noloco.theory.config import InnerConfig, OuterConfig
from noloco.theory.schedules import learning_rates
from noloco.theory.stats import holds, z_score

SE = 4  # simulated values must lie within 4 standard errors of the theory (noloco.theory.stats.z_score)


SETTINGS = draw_settings()


def test_phase_coefficients_match_inner_sgd():
    lam = np.array([0.1, 1.0, 3.0])
    c, s2 = phase_coefficients(np.full(20, 0.05), lam, 0.7)
    c_ref, s2_ref = numeric.inner_sgd(0.05, lam, 20, 0.7)
    np.testing.assert_allclose(c, c_ref, rtol=1e-12)
    np.testing.assert_allclose(s2, s2_ref, rtol=1e-12)


def test_one_inner_sgd_step_by_hand():
    """Integer weights, lr 1/2, curvature 2: theta <- theta - 0.5 * 2 * theta = 0."""
    theta, grad = np.array([[[3.0, -4.0]]]), np.array([[[6.0, -8.0]]])
    InnerOptimizer("sgd", theta.shape).step(theta, grad, 0.5)
    np.testing.assert_array_equal(theta, 0.0)


def test_schedules_of_the_simulator():
    cfg = SimConfig(inner=InnerConfig(lr=1.0, steps=5), schedule="inverse", decay_time=2.0, outer_steps=2)
    np.testing.assert_allclose(cfg.learning_rates(), [[1 / (1 + k / 2) for k in range(5)],
                                                      [1 / (1 + k / 2) for k in range(5, 10)]])
    cosine = SimConfig(inner=InnerConfig(lr=1.0, steps=5), schedule="cosine", warmup=2, outer_steps=2)
    np.testing.assert_array_equal(cosine.learning_rates().ravel(), learning_rates("cosine", 1.0, 10, warmup=2))
    with pytest.raises(ConfigError, match="schedule='step'"):
        SimConfig(schedule="step")


@pytest.mark.parametrize("index", range(len(SETTINGS)))
def test_agreement_with_theory(index):
    """Stationary spread, mean trajectory and variance decay, simulated vs exact theory."""
    cfg = config(index)
    outer = cfg.outer
    result = compare(cfg)
    s = result["summary"]
    if outer.group_size == outer.replicas:
        assert s["stationary_variance_mc"] == 0.0 and s["stationary_variance_theory"] == 0.0
    else:
        assert holds(s["z_score"], SE), s
        # the window is past the transient, so the closed form is what the window measures
        assert s["stationary_variance_window_theory"] == pytest.approx(s["stationary_variance_theory"], rel=1e-4)
        d = result["decay"]
        assert holds(d["z_score"], SE), d
    mean = result["trajectories"]["mean_distance"]
    for t in (1, 3, 10):
        mc, se, theory = mean["mc"][t][0], mean["se"][t][0], mean["theory"][t][0]
        assert holds(z_score(mc, se, theory), SE), (t, mc, se, theory)


def test_rotated_spectrum_agrees():
    """A random rotation changes nothing: isotropic noise, the theory is per eigen-direction."""
    outer = OuterConfig(replicas=16, group_size=2, alpha=0.5, beta=0.7, gamma=0.7)
    cfg = SimConfig(outer=outer, inner=InnerConfig(lr=0.05, steps=10, noise=0.5),
                    curvatures=(0.3, 1.0, 4.0), rotate=True, trials=300, outer_steps=120)
    s = compare(cfg, decay=False)["summary"]
    assert holds(s["z_score"], SE), s


def test_diloco_keeps_zero_spread():
    for outer in (OuterConfig(replicas=8, group_size=2), OuterConfig(replicas=16, group_size=4, alpha=0.9,
                                                                     momentum="nesterov")):
        run = simulate(SimConfig(outer=outer, method="diloco", trials=20, outer_steps=50))
        assert all(np.all(v == 0.0) for v in run.spread_trials)
        assert run.diverged_at is None


def test_inverse_schedule_drives_spread_to_zero_at_predicted_rate():
    """Under lr_k = lr / (1 + k / tau) the inner noise s2 ~ eta^2 ~ t^-2, and the spread
    follows quasi-statically: the exact recursion with each phase's (c_t, s2_t) predicts the
    spread at every step, and its late log-log slope is -2."""
    outer = OuterConfig(replicas=16, group_size=2, alpha=0.5, beta=0.7, gamma=0.7)
    cfg = SimConfig(outer=outer, inner=InnerConfig(lr=0.1, steps=10, noise=1.0), schedule="inverse",
                    decay_time=10.0, trials=400, outer_steps=200)
    result = compare(cfg, decay=False)
    spread = result["trajectories"]["spread"]
    mc, se, theory = (np.array(spread[k]) for k in ("mc", "se", "theory"))
    for t in (10, 50, 100, 200):
        assert holds(z_score(mc[t], se[t], theory[t]), SE), (t, mc[t], se[t], theory[t])
    slope = math.log(theory[200] / theory[100]) / math.log(2.0)
    assert slope == pytest.approx(-2.0, abs=0.1)
    assert theory[200] < 1e-3 * theory[5]


def test_unstable_configuration_is_caught():
    """gamma = 2.5 overshoots the group mean: the replica mean is fine, the spread diverges."""
    outer = OuterConfig(replicas=8, group_size=2, alpha=0.5, beta=0.7, gamma=2.5)
    cfg = SimConfig(outer=outer, inner=InnerConfig(lr=0.05, steps=10, noise=1.0), trials=10, outer_steps=500)
    result = compare(cfg, decay=False)
    d = result["diverged"]
    assert d is not None and d["step"] < 500
    assert d["violated_conditions"] == ["replica spread decays: spectral radius of T"]
    assert result["summary"]["z_score"] is None
    # the unbounded closed form is strict JSON: null, with the reason beside it
    summary = files.loads(files.dumps(result))["summary"]
    assert summary["stationary_variance_theory"] is None
    assert summary["stationary_variance_theory_nonfinite"] == "inf"


def test_inner_lr_too_large_is_caught():
    cfg = SimConfig(inner=InnerConfig(lr=2.5, steps=5, noise=0.0), trials=4, outer_steps=50)
    d = compare(cfg, decay=False)["diverged"]
    assert d is not None and "inner SGD contracts: max |1 - eta*lambda|" in d["violated_conditions"]


def test_methods_are_configurations():
    """The methods of noloco.theory.methods: local is phi <- theta (no synchronisation at all)."""
    cfg = SimConfig(outer=OuterConfig(replicas=8, group_size=2, alpha=0.5), inner=InnerConfig(steps=50))
    o = dataclasses.replace(cfg, method="diloco").effective()[0]
    assert (o.group_size, o.alpha, o.gamma) == (8, 0.5, 0.0)
    o = dataclasses.replace(cfg, method="local").effective()[0]
    assert (o.group_size, o.alpha, o.beta, o.gamma) == (1, 0.0, 1.0, 0.0)
    o, i = dataclasses.replace(cfg, method="ddp").effective()
    assert (o.group_size, o.alpha, o.beta, o.gamma, i.steps) == (8, 0.0, 1.0, 0.0, 1)


def test_local_replicas_train_alone():
    """local: every replica's outer weights follow its own inner phase exactly (phi <- theta),
    so with the same noise the replicas of one trial are those of N = 1 runs side by side."""
    cfg = SimConfig(outer=OuterConfig(replicas=4, group_size=2), inner=InnerConfig(lr=0.1, steps=5, noise=0.0),
                    method="local", trials=2, outer_steps=3, start=1.0)
    run = simulate(cfg)
    assert run.mean_distance.mean[-1][0] == pytest.approx((1 - 0.1) ** 15, rel=1e-12)


def test_other_inner_optimizers_run_and_are_flagged():
    """On the quadratic the carried-state model predicts them (tests/test_exchangeable.py checks how
    well); on a data objective they are outside it and flagged as such."""
    for optimizer in ("momentum", "adam"):
        cfg = SimConfig(optimizer=optimizer, trials=10, outer_steps=20, inner=InnerConfig(lr=0.01, steps=10))
        result = compare(cfg, decay=False)
        assert result["diverged"] is None
        assert any("carried inner state" in note for note in result["scope"])
        assert result["summary"]["stationary_variance_theory"] > 0
        assert result["summary"]["final_loss_at_mean"] < 0.5  # from 0.5 * 1^2
        data = dataclasses.replace(cfg, objective="diabetes", curvatures=None)
        assert any("outside the carried-state model" in note for note in compare(data, decay=False)["scope"])


def test_heterogeneity_widens_the_spread():
    base = SimConfig(trials=50, outer_steps=60, inner=InnerConfig(lr=0.05, steps=10, noise=0.1))
    plain = compare(base, decay=False)["summary"]
    shifted = compare(dataclasses.replace(base, zeta=1.0), decay=False)
    assert shifted["summary"]["stationary_variance_mc"] > 10 * plain["stationary_variance_mc"]
    assert any("drift c zeta per replica" in note for note in shifted["scope"])


@pytest.mark.parametrize("field,value,message", [
    ("method", "gossip", "method='gossip' is not allowed; allowed: noloco, diloco, local, ddp"),
    ("trials", 1, "trials=1 is out of range; allowed: an integer >= 2"),
    ("trials", 2.0, "trials=2.0 is not an integer; allowed: an integer >= 2"),
    ("start", float("nan"), "start=nan is out of range; allowed: a finite number"),
    ("start", float("inf"), "start=inf is out of range; allowed: a finite number"),
    ("zeta", float("inf"), "zeta=inf is out of range; allowed: 0 <= zeta <= 1e150"),
    ("l2", float("nan"), "l2=nan is out of range; allowed: 0 <= value < inf"),
    ("inner_momentum", 1.0, "inner_momentum=1.0 is out of range; allowed: 0 <= inner_momentum < 1"),
    ("curvatures", (1.0, -2.0), "curvature=-2.0 is out of range; allowed: 0 < curvature < inf"),
    ("burn_in", 200, "burn_in=200 is out of range; allowed: 0 <= burn_in < outer_steps=200"),
    ("warmup", 10_000, "warmup=10000 is out of range; allowed: 0 <= warmup < total inner steps"),
])
def test_bad_input_names_field_value_and_range(field, value, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        SimConfig(**{field: value})


def test_settings_that_do_not_fit_the_objective_are_refused():
    with pytest.raises(ConfigError, match="curvatures=.*takes its Hessian from the data"):
        SimConfig(objective="diabetes", curvatures=(2.0,))
    with pytest.raises(ConfigError, match="zeta=1.0 applies to the quadratic"):
        SimConfig(objective="diabetes", zeta=1.0)
    with pytest.raises(ConfigError, match="split='label' needs a data objective"):
        SimConfig(split="label")
    assert SimConfig().curvatures == (1.0,) and SimConfig(objective="diabetes").curvatures is None


def _cli(capsys, *argv):
    code = main(["simulate", *argv])
    return code, capsys.readouterr()


def test_cli_json_summary_and_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path))
    argv = ("--preset", "paper", "--curvature", "2", "--trials", "50", "--outer-steps", "60", "--json")
    code, out = _cli(capsys, *argv)
    assert code == 0
    result = files.loads(out.out)
    for key in ("stationary_variance_mc", "stationary_variance_se", "stationary_variance_theory", "z_score"):
        assert isinstance(result["summary"][key], float), key
    assert len(result["trajectories"]["spread"]["mc"]) == 61
    entries = list((tmp_path / "simulate").glob("*.json"))
    assert len(entries) == 1
    # the same flags hit the cache; a different seed does not
    code, again = _cli(capsys, *argv)
    assert files.loads(again.out) == result
    _cli(capsys, *argv, "--seed", "1")
    assert len(list((tmp_path / "simulate").glob("*.json"))) == 2


def test_cli_interrupted_run_leaves_no_cache_entry(tmp_path):
    """A real Ctrl-C (SIGINT) in the middle of a long run: exit 130 and no cache entry."""
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "NOLOCO_CACHE": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    # Ctrl-C as a terminal delivers it: a suite started in the background of a non-interactive shell hands
    # its children SIGINT ignored, which the command rightly leaves alone (nohup's)
    proc = subprocess.Popen([sys.executable, "-m", "noloco", "simulate", "--trials", "50",
                             "--outer-steps", "1000000"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(5)  # start-up takes about 1 s; the simulation (run before any theory) takes hours
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    # 130, or ended by SIGINT itself after saying so (what a shell also reads as 130): one clean-clone CI run
    # saw the second once, after the message, not reproduced here in 100 tries
    assert proc.returncode in (130, -signal.SIGINT), err[-2000:]
    assert "interrupted" in err
    assert not list(tmp_path.glob("simulate/*"))


def test_cli_table_and_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path))
    code, out = _cli(capsys, "--trials", "20", "--outer-steps", "30", "--no-cache")
    assert code == 0 and "stationary spread" in out.out
    code, out = _cli(capsys, "--gamma", "2.5", "--trials", "5", "--outer-steps", "400", "--no-cache")
    assert code == 1 and "DIVERGED" in out.out and "replica spread decays" in out.out
    code, out = _cli(capsys, "--trials", "1")
    assert code == 2 and "trials" in out.err
    code, out = _cli(capsys, "--objective", "diabetes", "--curvature", "2")
    assert code == 2 and "curvature" in out.err


@pytest.mark.parametrize("index", [0, 1, 5, 10])
def test_agreement_with_theory_through_real_inner_steps(index):
    """The agreement settings simulated with every inner step (inner_mode='explicit'): the
    default exact inner phase uses the theory's own (c, s2), so these runs are what checks
    phase_coefficients and the noise against real SGD."""
    cfg = dataclasses.replace(config(index), inner_mode="explicit")
    result = compare(cfg, decay=False)
    assert result["effective"]["inner_mode"] == "explicit"
    s = result["summary"]
    pairs = cfg.outer.group_size < cfg.outer.replicas
    assert holds(s["z_score"], SE) if pairs else s["stationary_variance_mc"] == 0.0, s
    mean = {key: np.array(result["trajectories"]["mean_distance"][key])[[1, 3, 10], 0] for key in ("mc", "se", "theory")}
    zs = [z_score(*values) for values in zip(mean["mc"], mean["se"], mean["theory"])]
    assert all(holds(z, SE) for z in zs), (zs, mean)


def test_exact_and_explicit_noise_free_runs_coincide():
    """Without noise both inner phases are the same deterministic map (to rounding)."""
    cfg = SimConfig(inner=InnerConfig(lr=0.05, steps=10, noise=0.0), curvatures=(0.5, 2.0), trials=4,
                    outer_steps=20, init_spread=0.3)
    exact = simulate(dataclasses.replace(cfg, inner_mode="exact"))
    explicit = simulate(dataclasses.replace(cfg, inner_mode="explicit"))
    np.testing.assert_allclose(exact.spread.mean, explicit.spread.mean, rtol=1e-10)
    np.testing.assert_allclose(exact.mean_distance.mean, explicit.mean_distance.mean, rtol=1e-10, atol=1e-14)
