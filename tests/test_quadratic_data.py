"""quadratic/ on real data shipped in packages: ridge regression (diabetes, longley) and L2
logistic regression (breast cancer), the linearised theory near the optimum, the splits, and
the paper preset's NoLoCo vs DiLoCo training loss."""

import dataclasses

import numpy as np
import pytest

from noloco.quadratic.compare import compare
from noloco.quadratic.objectives import DataObjective
from noloco.quadratic.sim_config import SimConfig
from noloco.infra.errors import ConfigError
from noloco.theory.config import InnerConfig
from noloco.theory.methods import PRESETS
from noloco.theory.stats import holds

SE = 4


@pytest.mark.parametrize("name", ["diabetes", "longley", "breast-cancer"])
def test_optimum_and_gradient(name):
    obj = DataObjective(name, split="shared", l2=0.01, batch_size=0, replicas=4, rng=np.random.default_rng(0))
    theta = np.broadcast_to(obj.optimum, (2, 4, obj.dim)).copy()
    np.testing.assert_allclose(obj.grad(theta, None, np.empty_like(theta)), 0.0, atol=1e-12)
    # the gradient is that of the loss: central differences in one coordinate
    rng = np.random.default_rng(1)
    w, e = rng.standard_normal(obj.dim) * 0.3, np.eye(obj.dim)[2] * 1e-6
    g = obj.grad(np.broadcast_to(w, (1, 4, obj.dim)).copy(), None, np.empty((1, 4, obj.dim)))[0, 0, 2]
    assert g == pytest.approx((obj.loss(w + e) - obj.loss(w - e)) / 2e-6, rel=1e-5)
    assert np.all(np.linalg.eigvalsh(obj.hessian()) > 0)


def test_longley_is_ill_conditioned():
    obj = DataObjective("longley", split="shared", l2=1e-4, batch_size=0, replicas=4, rng=np.random.default_rng(0))
    lam = np.linalg.eigvalsh(obj.hessian())
    assert lam[-1] / lam[0] > 1e3


def test_splits():
    rng = np.random.default_rng(0)
    by_label = DataObjective("breast-cancer", split="label", l2=0.01, batch_size=0, replicas=4, rng=rng)
    purity = [max(np.mean(y), 1 - np.mean(y)) for y in by_label.ys]
    # rows sorted by class and cut in blocks: only the block at the class boundary is mixed
    assert sorted(purity)[1:] == [1.0, 1.0, 1.0]
    iid = DataObjective("breast-cancer", split="iid", l2=0.01, batch_size=0, replicas=4, rng=rng)
    rows = np.sort(iid.Xs.reshape(-1, iid.dim), axis=0)
    assert iid.Xs.shape == (4, 569 // 4, 31) and len(np.unique(rows, axis=0)) == 4 * (569 // 4)
    km = DataObjective("diabetes", split="kmeans", l2=0.01, batch_size=0, replicas=4, rng=rng)
    assert km.Xs.shape == (4, 442 // 4, 10)
    with pytest.raises(ConfigError, match="split"):
        DataObjective("diabetes", split="random", l2=0.01, batch_size=0, replicas=4, rng=rng)


@pytest.mark.parametrize("name", ["diabetes", "longley"])
def test_ridge_matches_theory(name):
    """Ridge regression is a quadratic: with additive noise the theory is exact."""
    cfg = SimConfig(outer=PRESETS["paper"].outer, inner=InnerConfig(lr=0.01, steps=50, noise=0.1),
                    objective=name, trials=200, outer_steps=100, start=0.0)
    s = compare(cfg, decay=False)["summary"]
    assert holds(s["z_score"], SE), s


def test_logistic_near_optimum_matches_linearised_theory():
    """Started at the optimum with small noise the replicas stay where the Hessian is nearly
    constant, so the theory linearised at the optimum predicts the spread."""
    cfg = SimConfig(outer=PRESETS["paper"].outer, inner=InnerConfig(lr=0.05, steps=10, noise=0.05),
                    objective="breast-cancer", trials=100, outer_steps=80, start=0.0)
    result = compare(cfg, decay=False)
    assert holds(result["summary"]["z_score"], SE), result["summary"]
    assert any("linearised" in note for note in result["scope"])


def test_minibatch_noise_matches_linearised_theory():
    """Minibatch noise enters through its covariance at the optimum: exact-in-the-limit on ridge."""
    cfg = SimConfig(outer=PRESETS["paper"].outer, inner=InnerConfig(lr=0.01, steps=20, noise=0.0),
                    objective="diabetes", batch_size=16, trials=200, outer_steps=100, start=0.0)
    s = compare(cfg, decay=False)["summary"]
    assert holds(s["z_score"], SE), s


def _final_loss(outer, inner, method, outer_steps):
    cfg = SimConfig(outer=outer, inner=inner, objective="breast-cancer", method=method, batch_size=32,
                    trials=10, outer_steps=outer_steps)
    result = compare(cfg, decay=False)
    return result["summary"]["final_loss_replicas"], result["summary"]["inner_steps_total"]


def test_paper_preset_noloco_and_diloco_reach_the_same_training_loss():
    """The paper's NoLoCo (n = 2, alpha 0.5, beta = gamma = 0.7, H 50) and DiLoCo
    (all-reduce, alpha 0.3, beta 0.7, H 100) on breast cancer, inner SGD lr 0.01 on
    minibatches of 32, 8 replicas, 10 000 inner steps each: within 1% training loss."""
    paper, reference = PRESETS["paper"], PRESETS["diloco"]
    noloco, steps_a = _final_loss(paper.outer, dataclasses.replace(paper.inner, noise=0.0), "noloco", 200)
    diloco, steps_b = _final_loss(reference.outer, dataclasses.replace(reference.inner, noise=0.0), "diloco", 100)
    assert steps_a == steps_b == 10_000
    assert abs(noloco - diloco) < 0.01 * diloco, (noloco, diloco)
