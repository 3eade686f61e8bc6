"""Methods and presets: one meaning everywhere, conflicts refused, the schedules shared."""

import numpy as np
import pytest

from noloco.infra.errors import ConfigError
from noloco.theory.config import OuterConfig
from noloco.infra.checks import check_choice, check_divides
from noloco.theory.methods import METHODS, PRESETS, constrain, resolve
from noloco.theory.schedules import learning_rate, learning_rates


def test_presets_match_the_reference_configurations():
    p = PRESETS["paper"]
    assert (p.method, p.outer.group_size, p.outer.alpha, p.outer.beta, p.outer.gamma, p.outer.momentum,
            p.inner.steps) == ("noloco", 2, 0.5, 0.7, 0.7, "heavy-ball", 50)
    d = PRESETS["diloco"]
    assert (d.method, d.outer.group_size, d.outer.alpha, d.outer.beta, d.outer.momentum, d.inner.steps) == (
        "diloco", d.outer.replicas, 0.3, 0.7, "heavy-ball", 100)
    t = PRESETS["diloco-nesterov"]
    assert (t.outer.alpha, t.outer.momentum, t.inner.steps) == (0.9, "nesterov", 500)


@pytest.mark.parametrize("method", METHODS)
def test_method_constraints(method):
    _, outer, inner = resolve(method=method, replicas=12)
    n = {"noloco": 2, "diloco": 12, "local": 1, "ddp": 12}[method]
    assert outer.replicas == 12 and outer.group_size == n
    if method in ("local", "ddp"):
        assert (outer.alpha, outer.beta, outer.gamma) == (0.0, 1.0, 0.0)
    assert (inner.steps == 1) == (method == "ddp")
    # constrain is idempotent and agrees with resolve
    assert constrain(method, outer, inner) == (outer, inner)


def test_explicit_values_override_the_preset_and_conflicts_are_refused():
    method, outer, inner = resolve("paper", alpha=0.1, steps=7, replicas=16)
    assert (method, outer.alpha, outer.replicas, outer.group_size, inner.steps) == ("noloco", 0.1, 16, 2, 7)
    assert resolve(gamma_tied=True, beta=0.4)[1].gamma == 0.4
    for kwargs, words in [(dict(method="diloco", group_size=2), "group_size=2 conflicts with method='diloco'"),
                          (dict(method="local", alpha=0.5), "alpha=0.5 conflicts"),
                          (dict(method="ddp", steps=5), "inner_steps=5 conflicts"),
                          (dict(gamma_tied=True, gamma=0.2), "gamma_tied"),
                          (dict(preset="nope"), "preset='nope'"),
                          (dict(method="nope"), "method='nope'"),
                          (dict(replicas=7), "dividing replicas=7")]:
        with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
            resolve(**kwargs)
    # the value the method sets anyway is not a conflict
    assert resolve(method="diloco", replicas=4, group_size=4)[1].group_size == 4
    # an unknown keyword names the ones resolve takes (H is steps here, inner_steps elsewhere)
    with pytest.raises(TypeError, match="unknown setting.*: inner_steps; allowed: .*steps"):
        resolve("paper", inner_steps=5)


def test_validators_name_field_value_and_range():
    with pytest.raises(ConfigError, match=r"group_size=3 is out of range; allowed: an integer >= 1 dividing replicas=8"):
        check_divides("group_size", 3, "replicas", 8)
    with pytest.raises(ConfigError, match="momentum='x' is not allowed; allowed: a, b"):
        check_choice("momentum", "x", ("a", "b"))
    with pytest.raises(ConfigError, match="alpha=nan"):
        OuterConfig(alpha=float("nan"))


def test_schedules():
    lr = learning_rates("cosine", 0.1, 100, warmup=10, floor=0.1)
    assert lr[0] == pytest.approx(0.01) and lr[9] == pytest.approx(0.1)
    assert lr[10] == pytest.approx(0.1) and lr[-1] == pytest.approx(0.01, rel=0.01)
    assert np.all(np.diff(lr[10:]) <= 1e-15)
    assert learning_rate(5, "constant", 0.1, 100) == 0.1
    assert learning_rate(5, "constant", 0.1, 100, warmup=10) == pytest.approx(0.06)
    assert learning_rate(20, "inverse", 1.0, 100, decay_time=20.0) == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="warmup=100"):
        learning_rates("cosine", 0.1, 100, warmup=100)
    with pytest.raises(ConfigError, match="schedule='x'"):
        learning_rate(0, "x", 0.1, 10)
