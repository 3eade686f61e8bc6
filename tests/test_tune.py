"""`noloco tune`: the recommendation beats the paper setting at the same spread, and the
verifying simulation (real inner SGD steps, :mod:`noloco.quadratic.tune_check`) confirms its
predicted rate and spread."""

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from noloco.cli import main
from noloco.quadratic.tune_check import FrontierPoint, TuneReport, _fit, _radius, frontier_rows
from noloco.infra.errors import ConfigError
from noloco.theory.conditions import analyse
from noloco.infra.files import SCHEMA_VERSION
from noloco.theory.methods import PRESETS
from noloco.theory.spectrum import Spectrum
from noloco.theory.tune import TuneProblem, evaluate, make_problem, pareto, tune


@pytest.fixture(scope="module")
def paper_json(tmp_path_factory):
    """One run of `noloco tune --preset paper --json`, shared by the tests below."""
    out = tmp_path_factory.mktemp("tune") / "tune.png"
    import io
    from contextlib import redirect_stdout

    buffer = io.StringIO()
    with redirect_stdout(buffer):
        code = main(["tune", "--preset", "paper", "--json", "--out", str(out)])
    return code, json.loads(buffer.getvalue()), out


def test_json_keys(paper_json):
    code, r, _ = paper_json
    assert code == 0 and r["schema_version"] == SCHEMA_VERSION
    for key in ("recommended", "predicted_rate", "predicted_spread", "simulated_rate", "simulated_spread",
                "simulated_rate_se", "simulated_spread_se", "paper", "frontier"):
        assert key in r, key
    assert set(r["recommended"]) >= {"alpha", "beta", "gamma", "group_size", "inner_steps"}
    assert json.dumps(TuneReport.from_json(r).to_json()) == json.dumps(r)  # the typed report round-trips


def test_recommendation_verified_within_4_se(paper_json):
    _, r, _ = paper_json
    for what in ("rate", "spread"):
        sim, se, pred = r[f"simulated_{what}"], r[f"simulated_{what}_se"], r[f"predicted_{what}"]
        assert se > 0 and abs(sim - pred) <= 4 * se, (what, sim, se, pred)
    # the paper setting on the same problem is verified too
    p = r["paper_simulated"]
    assert abs(p["spread"] - r["paper"]["spread"]) <= 4 * p["spread_se"]
    assert abs(p["rate"] - r["paper"]["rate"]) <= 4 * p["rate_se"]


def test_recommendation_meets_budget_and_beats_paper(paper_json):
    _, r, _ = paper_json
    budget = r["problem"]["spread_budget"]
    assert r["predicted_spread"] <= budget * (1 + 1e-9)
    assert abs(budget - r["paper"]["spread"]) < 1e-12     # default budget: the given (paper) setting's spread
    assert r["predicted_rate"] < r["paper"]["rate"] - 0.1


def test_figure_written(paper_json):
    _, _, out = paper_json
    assert out.exists() and not out.with_suffix(".pdf").exists()  # exactly the file named (issue 22)


def test_recommendation_is_locally_optimal():
    """No point of a fine random cloud around the answer is feasible and faster (beyond round-off)."""
    p = PRESETS["paper"]
    problem = TuneProblem(p.outer, p.inner, Spectrum((0.5, 1.0, 2.0)), budget=3e-3, grid=16)
    best = tune(problem).best
    rng = np.random.default_rng(0)
    x = np.array([best.alpha, best.beta, best.gamma]) + 0.02 * rng.standard_normal((4000, 3))
    x = np.clip(x, 0, [0.95, np.inf, np.inf])
    r = evaluate(problem, x[:, 0], x[:, 1], x[:, 2], best.group_size, best.inner_steps)
    feasible = np.isfinite(r.rate) & (r.spread <= problem.budget)
    assert best.spread <= problem.budget * (1 + 1e-9)
    assert not np.any(r.rate[feasible] < best.rate - 2e-3)


def test_pareto_front():
    rates = np.array([0.9, 0.5, 0.7, 0.4, 0.6])
    spreads = np.array([1.0, 2.0, 1.5, 3.0, 2.5])
    assert pareto(rates, spreads) == [0, 2, 1, 3]


def test_tune_n_and_h_runs():
    p = PRESETS["paper"]
    problem = TuneProblem(p.outer, p.inner, Spectrum((1.0,)), budget=1.5e-3, tune_n=True, tune_h=(20, 50),
                          objective="inner-steps", grid=8)
    result = tune(problem)
    assert result.best.group_size in (2, 4) and result.best.inner_steps in (20, 50)
    assert result.best.spread <= 1.5e-3 * (1 + 1e-9)


@pytest.mark.parametrize("argv", [
    ["--spread-budget", "-1"],
    ["--spread-budget", "0"],
    ["--tune", "alpha"],
    ["--h-values", "a,b", "--tune", "H"],
    ["--tune", "H", "--h-values", "0"],
    ["--objective", "steps", "--target", "2"],
    ["--trials", "3"],
    ["--grid", "2"],
    ["--replicas", "7"],
    ["--preset", "diloco"],          # the tuner searches NoLoCo's alpha, beta, gamma
    ["--method", "local"],
    ["--preset", "diloco", "--method", "noloco"],   # n = N has no spread to budget: asks for one
    ["--gamma-tied", "--gamma", "0.5"],
])
def test_bad_input_exits_2(capsys, argv):
    assert main(["tune", "--no-verify", "--out", "", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("noloco tune: error:"), err


def test_bad_input_exit_code_from_the_shell():
    proc = subprocess.run([sys.executable, "-m", "noloco", "tune", "--spread-budget", "-1"],
                          capture_output=True, text=True, cwd=str(Path(__file__).parents[1]))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr


QUICK = ["tune", "--no-verify", "--grid", "6"]


def test_no_figure_unless_asked(tmp_path, monkeypatch, capsys):
    """The bug: `noloco tune` wrote ./paper_figs/out/ wherever it ran, even with --json."""
    monkeypatch.chdir(tmp_path)
    for extra in ([], ["--json"]):
        assert main([*QUICK, *extra]) == 0
    assert list(tmp_path.iterdir()) == []
    assert "figure:" not in capsys.readouterr().out


def test_unwritable_out_fails_before_the_search(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    start = time.perf_counter()
    assert main(["tune", "--out", str(blocker / "fig.png")]) == 3   # the full search would take seconds
    assert time.perf_counter() - start < 2
    err = capsys.readouterr().err
    assert err.startswith("noloco tune: error: ") and err.count("\n") == 1 and str(blocker) in err


def test_make_problem_defaults_to_the_given_spread():
    p = PRESETS["paper"]
    spectrum = Spectrum((0.5, 2.0))
    problem = make_problem("noloco", p.outer, p.inner, spectrum, tune=("H",), h_values=(20, 50))
    assert problem.budget == analyse(p.outer, p.inner, spectrum).stationary_variance
    assert problem.tune_h == (20, 50) and not problem.tune_n
    assert make_problem("noloco", p.outer, p.inner, spectrum, h_values=(20, 50)).tune_h == ()
    with pytest.raises(ConfigError, match="method='diloco'"):
        make_problem("diloco", p.outer, p.inner, spectrum)


def test_fit_recovers_the_characteristic_polynomial():
    """Noise-free, the least-squares fit of y_{t+2} = a1 y_{t+1} + a0 y_t is exact, and the
    rate is the larger root's modulus (complex roots included)."""
    for a1, a0 in ((1.2, -0.5), (0.75, -0.1405), (0.5, 0.3)):
        y = [1.0, 0.9]
        for _ in range(20):
            y.append(a1 * y[-1] + a0 * y[-2])
        assert np.allclose(_fit(np.array(y)), [a1, a0], atol=1e-10)
        assert _radius((a1, a0)) == pytest.approx(max(abs(np.roots([1, -a1, -a0]))))
    assert _radius((1.2, -0.5)) == pytest.approx(np.sqrt(0.5))   # complex pair: sqrt(det M)


def test_frontier_rows_pick_the_fastest_within_each_budget():
    front = [FrontierPoint(rate=r, spread=s, alpha=0.5, beta=0.7, gamma=0.7, group_size=2, inner_steps=50)
             for s, r in ((1e-4, 0.9), (1e-3, 0.7), (1e-2, 0.5), (1e-1, 0.3))]
    rows = frontier_rows(front, budget=1e-2, rows=4)
    assert [q.rate for q in rows] == [0.9, 0.7, 0.5, 0.3]
    assert frontier_rows(front, budget=1e-2, rows=2) == [front[0], front[3]]


def test_out_names_exactly_the_file_it_writes(tmp_path):
    """`--out DIR/x.txt` used to write x.png and overwrite x.pdf beside it: a figure file's suffix chooses its
    format, any other suffix is bad input, and nothing else is written."""
    keep = tmp_path / "x.pdf"
    keep.write_bytes(b"the user's own pdf")
    assert main(["tune", "--no-verify", "--grid", "6", "--out", str(tmp_path / "x.txt")]) == 2
    assert main(["tune", "--no-verify", "--grid", "6", "--out", str(tmp_path / "x.png")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.pdf", "x.png"]
    assert keep.read_bytes() == b"the user's own pdf"
