"""Every `--json` output of check, simulate, comm and tune is strict JSON: no NaN or Infinity
(`json.loads` with a `parse_constant` that raises), with non-finite values written as null
and the reason in a neighbouring `<key>_nonfinite` field (noloco.infra.files)."""

import json

import pytest

from noloco.cli import main
from noloco.infra.files import SCHEMA_VERSION


def _refuse(name):
    raise AssertionError(f"{name} is not JSON")


def strict(capsys, *argv, code=None):
    rc = main([*argv, "--json"])
    captured = capsys.readouterr()
    if code is not None:
        assert rc == code, captured.err
    return rc, json.loads(captured.out, parse_constant=_refuse)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NOLOCO_CACHE", str(tmp_path / "cache"))


def test_check_overflow_is_null_with_reason(capsys):
    """The case of the issue: it printed -Infinity."""
    _, out = strict(capsys, "check", "--inner-lr", "100", "--inner-steps", "1000", code=1)
    assert out["stable"] is False and out["schema_version"] == SCHEMA_VERSION
    assert out["stationary_variance"] is None and out["stationary_variance_nonfinite"] == "inf"
    direction = out["directions"][0]
    assert direction["c"] is None and direction["c_nonfinite"] == "-inf"
    assert out["conditions"][1]["value"] is None and "value_nonfinite" in out["conditions"][1]


@pytest.mark.parametrize("argv,code", [
    (["--preset", "paper"], 0),
    (["--gamma", "3"], 1),                                  # unstable spread
    (["--preset", "diloco"], 0),
    (["--method", "local"], 0),
    (["--spectrum", "uniform:0.1:300:5"], 1),                # the stiffest direction diverges
    (["--spectrum", "powerlaw:2:1:6", "--preset", "diloco-nesterov"], 0),
])
def test_check(capsys, argv, code):
    _, out = strict(capsys, "check", *argv, code=code)
    assert out["stable"] is (code == 0)
    for key in ("mean_spectral_radius", "variance_decay_factor", "stationary_variance"):
        assert (out[key] is None) == (f"{key}_nonfinite" in out)


@pytest.mark.parametrize("argv,code", [
    (["--preset", "paper"], 0),
    (["--method", "diloco", "--spectrum", "0.5,2"], 0),
    (["--inner-lr", "2.5"], 1),                              # |1 - eta lambda| > 1: the run diverges
])
def test_simulate(capsys, argv, code):
    _, out = strict(capsys, "simulate", "--trials", "4", "--outer-steps", "5", "--no-cache", *argv, code=code)
    assert bool(out["diverged"]) == (code == 1)


@pytest.mark.parametrize("argv", [
    ["--replicas", "64", "--steps", "20", "--trials", "2"],
    ["--replicas", "8", "--group-size", "1", "--steps", "20", "--trials", "2"],   # never communicates
    ["--replicas", "8", "--group-size", "8", "--latency", "0", "--steps", "20", "--trials", "2",
     "--jitter-cv", "0"],
])
def test_comm(capsys, argv):
    _, out = strict(capsys, "comm", *argv, code=0)
    assert out["schema_version"] == SCHEMA_VERSION


def test_comm_infinite_speedup_is_null_with_reason(capsys):
    _, out = strict(capsys, "comm", "--replicas", "8", "--group-size", "1", "--steps", "20", "--trials", "2",
                    code=0)
    assert out["group_exchange_seconds"] == 0
    assert out["speedup_vs_tree"] is None and out["speedup_vs_tree_nonfinite"] == "inf"


def test_tune(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, out = strict(capsys, "tune", "--no-verify", "--grid", "6", code=0)
    assert out["schema_version"] == SCHEMA_VERSION and out["simulated_rate"] is None
    assert 0 < out["predicted_rate"] < out["paper"]["rate"]
    assert list(tmp_path.iterdir()) == []


def test_every_llm_advice_json_carries_the_schema_version(capsys, tmp_path):
    """llm predict (own inputs, --forecast, --as, --gap) and llm tune print one contract: strict JSON whose
    object carries schema_version (they printed none before issue 36's report)."""
    from test_forecast import config, write_run

    from noloco.infra.files import read_json, write_json

    run = tmp_path / "pilots" / "base" / "s0"
    cfg = config()
    write_run(run, cfg)
    result = read_json(run / "result.json")  # what an observer writes at close, for --gap
    write_json(run / "result.json", {**result, "finished": True, "wall_s": 4.0, "n_params": 1000,
                                     "adam_second_moment": {"outer_step": cfg.outer_steps, "sum_sqrt_v": 3.0}})
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(json.dumps({**m, "val_loss_avg_model": 2.0 - 0.01 * m["outer_step"],
                                                           "val_loss_replicas_mean": 2.01 - 0.01 * m["outer_step"]})
                                               + "\n" for m in metrics))
    for argv in (["llm", "predict", str(run)], ["llm", "predict", str(run), "--forecast"],
                 ["llm", "predict", str(run), "--as", "alpha=0.4"], ["llm", "predict", str(run), "--gap"],
                 ["llm", "tune", str(tmp_path / "pilots"), "--compute-seconds", "0.01"]):
        rc, out = strict(capsys, *argv)
        assert rc in (0, 1) and out["schema_version"] == SCHEMA_VERSION, argv
