"""Every claim of noloco.claims holds (quick, fixed seed), each can fail, and
``noloco claims --quick --json`` prints strict JSON and exits 0."""

import dataclasses
import json
import math

import numpy as np
import pytest

from noloco import claims
from noloco.claims import CLAIMS
from noloco.theory import comm, numeric
from noloco.theory import jitter
from noloco.theory.config import OuterConfig
from noloco.infra.files import loads


@pytest.fixture(scope="module")
def results():
    return {c.name: c for c in claims.run_all(quick=True, seed=0)}


@pytest.mark.parametrize("name", CLAIMS)
def test_claim_holds(results, name):
    c = results[name]
    assert c.holds, f"{name}: predicted {c.predicted:.6g}, measured {c.measured:.6g} +- {c.se:.2g}, z {c.z}"
    assert c.unit != "se" or c.z is not None


@pytest.mark.parametrize("name", [n for n in CLAIMS if not n.startswith("comm_") and n != "recursion_equals_enumeration"])
def test_measurement_rejects_a_prediction_10_percent_off(results, name):
    """Power: every Monte Carlo claim's measurement is precise enough to refuse a 10 % error."""
    c = results[name]
    args = (c.name, c.statement, c.reference)
    if "predicted_path" in c.details:
        d = c.details
        wrong = claims.judge_path(*args, 1.1 * np.asarray(d["predicted_path"]), d["measured_path"], d["se_path"])
    else:
        wrong = claims.judge(*args, 1.1 * c.predicted, c.measured, c.se)
    assert not wrong.holds


def scaled(monkeypatch, module, name, factor):
    original = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: factor * np.asarray(original(*a, **k)))


def test_wrong_stationary_variance_is_caught(monkeypatch):
    scaled(monkeypatch, numeric, "stationary_variance", 1.1)
    assert not claims.stationary_spread(quick=True).holds


def test_wrong_decay_factor_is_caught(monkeypatch):
    scaled(monkeypatch, numeric, "variance_decay_factor", 1.1)
    c = claims.decay_factor(quick=True)
    assert not c.holds and not c.details["spectral_gap"]  # and the recursion never settles to it


def test_wrong_kappa_is_caught_by_the_enumeration(monkeypatch):
    from noloco.theory import config

    kappa = config.group_kappa
    for module in (config, numeric):  # wherever the recursion takes kappa from
        monkeypatch.setattr(module, "group_kappa", lambda N, n: 1.03 * kappa(N, n), raising=False)
    c = claims.recursion_equals_enumeration(quick=True)
    assert not c.holds and c.measured > 1e3 * c.tolerance


def test_wrong_mean_transition_is_caught(monkeypatch):
    """A mean that felt the pull (M with beta c replaced by beta c + 0.1 gamma) is refused."""
    transition = numeric.transition
    monkeypatch.setattr(numeric, "transition", lambda a, b, g, c, *r: transition(a, b, g, c + 0.1 * g / b, *r))
    assert not claims.mean_is_diloco(quick=True).holds


def test_wrong_communication_model_is_caught(monkeypatch):
    scaled(monkeypatch, comm, "root_group_exchange", 1.1)
    assert not claims.comm_speedup_latency_bound().holds
    scaled(monkeypatch, comm, "root_group_exchange", 1.5)
    assert not claims.comm_speedup_internet().holds


def test_wrong_expected_maximum_is_caught(monkeypatch):
    scaled(monkeypatch, jitter, "expected_max", 1.1)
    assert not claims.idle_barrier(quick=True).holds
    assert not claims.idle_noloco_first_step(quick=True).holds


def test_unstable_setting_does_not_hold_and_stays_strict_json():
    c = claims.stationary_spread(outer=OuterConfig(gamma=3.0))
    assert not c.holds and c.z is None and math.isinf(c.predicted)
    from noloco.infra.files import dumps

    data = loads(dumps(c))
    assert data["predicted"] is None and data["predicted_nonfinite"] == "inf"


def test_every_claim_documents_formula_assumptions_and_reference():
    for name, function in CLAIMS.items():
        doc = function.__doc__ or ""
        assert "Assumptions" in doc and "Reference" in doc, name


def test_cli_quick_json_is_strict_and_exits_0(capsys):
    from noloco.cli import main

    assert main(["claims", "--quick", "--json"]) == 0
    data = json.loads(capsys.readouterr().out, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    assert data["all_hold"] and [c["name"] for c in data["claims"]] == list(CLAIMS)
    assert all(c["holds"] for c in data["claims"])


def test_cli_table_and_bad_name(capsys):
    from noloco.cli import main

    assert main(["claims", "--quick", "--only", "pure_pairing,comm_speedup_internet"]) == 0
    out = capsys.readouterr().out
    assert "pure_pairing" in out and "2 of 2 claims hold" in out and len(out.splitlines()) == 4
    assert main(["claims", "--only", "nope"]) == 2
    assert "claim='nope'" in capsys.readouterr().err


def test_cli_exits_1_when_a_claim_fails(monkeypatch, capsys):
    from noloco.cli import main

    scaled(monkeypatch, comm, "root_group_exchange", 1.1)
    assert main(["claims", "--only", "comm_speedup_latency_bound"]) == 1
    assert "NO" in capsys.readouterr().out


def test_same_seed_same_numbers():
    a, b = (dataclasses.replace(claims.pure_pairing(seed=3), seconds=0) for _ in range(2))
    assert a == b


def test_wrong_routing_recursion_is_caught(monkeypatch):
    from noloco.quadratic import routing

    original = routing.trajectory

    def flat_too_high(*a, **k):
        exact = original(*a, **k)
        return dataclasses.replace(exact, flat=1.1 * exact.flat)

    monkeypatch.setattr(routing, "trajectory", flat_too_high)
    assert not claims.routing_flat_direction(quick=True).holds
