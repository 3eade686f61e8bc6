"""The shared estimators: each checked against an independent computation or a known law."""

import math

import numpy as np
import pytest

from noloco.theory import stats


def test_mean_se_matches_textbook_formula():
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(50, 3))
    mean, se = stats.mean_se(x)
    assert np.allclose(mean, x.mean(0))
    assert np.allclose(se, np.sqrt(((x - x.mean(0)) ** 2).sum(0) / 49 / 50))
    m, s = stats.mean_se(x[:, 0])
    assert isinstance(m, float) and isinstance(s, float)


def test_se_covers_the_true_mean_at_the_nominal_rate():
    """95 % t intervals (39 degrees of freedom: 2.023) from mean_se cover the true mean about 95 %
    of the time (binomial SE 0.34 % over 4000 intervals)."""
    rng = np.random.default_rng(1)
    samples = rng.normal(1.0, 3.0, size=(4000, 40))
    mean, se = stats.mean_se(samples, axis=1)
    coverage = np.mean(np.abs(mean - 1.0) <= 2.023 * se)
    assert abs(coverage - 0.95) < 0.02


def test_z_score_policy():
    assert stats.z_score(1.1, 0.05, 1.0) == pytest.approx(2.0)
    assert stats.z_score(1.0, 0.0, 1.0) == 0.0               # deterministic and right
    assert stats.z_score(1.0 + 1e-12, 0.0, 1.0) == 0.0       # ... to rounding
    assert stats.z_score(1.01, 0.0, 1.0) == math.inf          # deterministic and wrong never passes
    assert stats.z_score(0.99, 0.0, 1.0) == -math.inf
    assert stats.z_score(0.0, 0.0, 0.0) == 0.0
    assert stats.z_score(1.0, 0.1, None) is None
    assert stats.z_score(1.0, 0.1, math.inf) is None
    assert stats.holds(stats.z_score(1.3, 0.1, 1.0), 4) is True
    assert stats.holds(stats.z_score(1.5, 0.1, 1.0), 4) is False
    assert stats.holds(None, 4) is False


def test_decay_ratio_recovers_a_known_geometric_decay():
    """Trials of a quantity with E x_t = r^t x_0 and multiplicative noise: the per-step ratio is r,
    within 4 SE, and the SE shrinks like 1/sqrt(trials)."""
    rng = np.random.default_rng(2)
    r, k = 0.8, 10
    for trials in (400, 1600):
        early = rng.gamma(4.0, 0.25, size=trials)
        late = early * r ** k * rng.gamma(4.0, 0.25, size=trials)
        ratio, se = stats.decay_ratio(early, late, k)
        assert abs(ratio - r) < 4 * se
        assert 0 < se < 0.01
    with pytest.raises(ValueError):
        stats.decay_ratio([0.0, 0.0], [1.0, 1.0], 3)


def test_burn_in():
    assert stats.burn_in(0.5, 1e-3) == 10                  # ceil(log(1e-3)/log(0.5)) = 10
    assert stats.burn_in(0.9, 1e-3) == math.ceil(math.log(1e-3) / math.log(0.9))
    assert stats.burn_in(0.1, 1e-3) == 10                  # minimum
    assert stats.burn_in(0.9999, 1e-3) == 400              # cap
    assert stats.burn_in(1.2) == 400 and stats.burn_in(float("nan")) == 400


def test_jackknife_of_the_mean_equals_the_standard_error():
    x = np.random.default_rng(3).normal(size=30)
    value, se = stats.jackknife(np.mean, x)
    assert value == pytest.approx(x.mean())
    assert se == pytest.approx(stats.mean_se(x)[1], rel=1e-10)


def test_rms_se_delta_method_against_resampling():
    rng = np.random.default_rng(4)
    values = rng.normal(1.0, 0.2, size=200)
    rms, se = stats.rms_se(values)
    assert rms == pytest.approx(math.sqrt(np.mean(values ** 2)))
    boot = [math.sqrt(np.mean(rng.choice(values, len(values)) ** 2)) for _ in range(2000)]
    assert se == pytest.approx(np.std(boot), rel=0.15)
