import json
import subprocess
import sys

import pytest

from noloco.cli import main


def run_json(capsys, *argv):
    code = main(["check", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("N", [4, 8, 32])
def test_pure_random_pairing_reports_kappa(capsys, N):
    code, out = run_json(capsys, "--alpha", "0", "--beta", "0", "--gamma", "1", "--group-size", "2",
                         "--replicas", str(N))
    # beta = 0: the mean never moves (radius 1), so the verdict is honestly "unstable"
    assert code == 1 and [c["holds"] for c in out["conditions"]] == [True, False, True]
    assert abs(out["variance_decay_factor"] - (N - 2) / (2 * (N - 1))) < 1e-12


def test_diloco_has_zero_spread(capsys):
    code, out = run_json(capsys, "--preset", "diloco", "--replicas", "16")
    assert code == 0 and out["stationary_variance"] == 0.0
    assert out["outer"]["group_size"] == 16 and out["outer"]["momentum"] == "nesterov"


def test_paper_preset_json_schema(capsys):
    code, out = run_json(capsys, "--preset", "paper")
    assert code == 0
    assert out["schema_version"] == 1
    for key in ("stable", "mean_spectral_radius", "variance_decay_factor", "stationary_variance", "conditions"):
        assert key in out
    assert all({"name", "value", "holds"} <= set(c) for c in out["conditions"])
    assert out["outer"] == {"replicas": 8, "group_size": 2, "alpha": 0.5, "beta": 0.7, "gamma": 0.7,
                            "momentum": "heavy-ball"}


def test_spectrum_totals(capsys):
    _, one = run_json(capsys, "--curvature", "0.5")
    _, two = run_json(capsys, "--curvature", "2")
    _, both = run_json(capsys, "--spectrum", "0.5,2")
    assert both["stationary_variance"] == pytest.approx(one["stationary_variance"] + two["stationary_variance"])
    assert both["variance_decay_factor"] == max(one["variance_decay_factor"], two["variance_decay_factor"])
    assert both["mean_spectral_radius"] == max(one["mean_spectral_radius"], two["mean_spectral_radius"])
    _, uni = run_json(capsys, "--spectrum", "uniform:0.1:1:10")
    assert len(uni["directions"]) == 10


def test_gamma_tied(capsys):
    _, out = run_json(capsys, "--beta", "0.4", "--gamma-tied")
    assert out["outer"]["gamma"] == 0.4


def test_unstable_exits_1_with_failing_condition(capsys):
    code, out = run_json(capsys, "--gamma", "3")
    assert code == 1 and out["stable"] is False and out["stationary_variance"] is None
    assert [c["holds"] for c in out["conditions"]] == [True, True, False]


@pytest.mark.parametrize("argv,words", [
    (["--group-size", "3"], "group_size=3"),
    (["--alpha", "1.5"], "alpha=1.5"),
    (["--inner-lr", "nan"], "inner_lr=nan"),
    (["--spectrum", "1,-2"], "curvature=-2.0"),
    (["--spectrum", "uniform:1"], "spectrum="),
])
def test_bad_input_exits_2_with_one_line(capsys, argv, words):
    assert main(["check", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_console_entry_point_human_output():
    proc = subprocess.run([sys.executable, "-m", "noloco", "check", "--preset", "paper"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "verdict: STABLE" in proc.stdout and "spectral radius of T" in proc.stdout
