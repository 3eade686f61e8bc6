"""noloco llm tune (noloco.advice.tune) on pilot folders whose loss curves are written by hand, so the
time to the target, the synchronisation cost and the choice can be worked out independently here."""

import math
from pathlib import Path
from dataclasses import asdict

import numpy as np
import pytest

from noloco.cli import main
from noloco.infra.files import dumps, read_json, write_json
from noloco.advice import tune as T
from noloco.llm_check.config import TrainConfig
from noloco.theory.comm import Network, sync_cost
from noloco.theory.config import OuterConfig

N_PARAMS = 100_000


def pilot(path, losses, spread=1e-3, finished=True, outer=None, beta=0.7, **fields):
    """A finished run folder with an evaluation every outer step: the averaged model's loss ``losses[t]``.
    Runs of one setting (all but the seed equal) are one setting to the tuner: each test setting has its beta."""
    values = dict(method="noloco", outer=outer or OuterConfig(replicas=8, group_size=2, alpha=0.5, beta=beta, gamma=0.7),
                  inner_steps=10, outer_steps=len(losses), lr=1e-3, warmup=0, schedule="constant", eval_every=1)
    cfg = TrainConfig(**{**values, **fields})
    path.mkdir(parents=True)
    write_json(path / "result.json", {"schema_version": 2, "config": asdict(cfg), "finished": finished,
                                      "wall_s": 0.01 * cfg.inner_steps * cfg.outer_steps, "n_params": N_PARAMS})
    rows = [{"outer_step": t + 1, "weight_std": spread, "val_loss_avg_model": float(v)} for t, v in enumerate(losses)]
    (path / "metrics.jsonl").write_text("".join(dumps(r) + "\n" for r in rows))
    return cfg


def test_steps_to_a_target_on_the_smoothed_curve():
    steps = [10, 20, 30]
    assert T.steps_to(steps, [3.0, 2.0, 1.0], 2.0) == 30           # smoothed: 3, 2.5, 2
    assert T.steps_to(steps, [3.0, 2.0, 1.0], 2.75) == pytest.approx(15.0)
    assert T.steps_to(steps, [3.0, 2.0, 1.0], 0.5) is None
    assert T.steps_to(steps, [1.0, 1.0, 1.0], 1.0) == 10


def _curve(rate, T_=20, start=3.0):
    return start * np.exp(-rate * np.arange(1, T_ + 1) / T_)


@pytest.mark.parametrize("latency, winner", [(1e-6, "allreduce"), (1.0, "pairs_fast")])
def test_n_and_H_trade_against_the_network(tmp_path, latency, winner):
    """The reference (pairs, H 10), a setting with all-reduce (n = N) whose loss falls fastest, one with pairs
    that falls faster than the reference, and H 20 at equal tokens: the time to the reference's loss is
    steps x (compute + sync / H) with the comm model's sync, computed here; a slow network hands the lead from
    the all-reduce to the pairs."""
    pilot(tmp_path / "ref" / "s0", _curve(1.0))
    pilot(tmp_path / "allreduce" / "s0", _curve(1.6), outer=OuterConfig(replicas=8, group_size=8, alpha=0.5, beta=0.7, gamma=0.0))
    pilot(tmp_path / "pairs_fast" / "s0", _curve(1.3), beta=0.8)
    pilot(tmp_path / "h20" / "s0", _curve(0.9, 10), inner_steps=20)
    rep = T.tune([tmp_path], reference="ref", latency=latency, bandwidth=1e9, compute_seconds=0.01)
    target = float(np.mean(_curve(1.0)[-3:]))
    assert rep.target_loss == pytest.approx(target)
    net, payload = Network.from_bandwidth(latency, 1e9), N_PARAMS * 2.0
    pairs, allreduce = sync_cost(net, payload, 8, 2).group_exchange_seconds, sync_cost(net, payload, 8, 8).tree_seconds
    rows = {r.setting: r for r in rep.rows}
    for name, rate, sync in (("ref", 1.0, pairs), ("allreduce", 1.6, allreduce), ("pairs_fast", 1.3, pairs)):
        steps = T.steps_to(10 * np.arange(1, 21), _curve(rate), target)
        assert rows[name].time_to_target == pytest.approx(steps * (0.01 + sync / 10))
        assert rows[name].seconds_per_outer_step == pytest.approx(10 * 0.01 + sync)
    assert "does not reach the target" in rows["h20"].excluded[0]
    assert rep.recommendation.setting == winner
    assert rep.promised_speedup == pytest.approx(rows["ref"].time_to_target / rows[winner].time_to_target)


def test_seeds_are_grouped_and_pilots_that_differ_elsewhere_are_excluded(tmp_path):
    pilot(tmp_path / "ref" / "s0", _curve(1.0))
    pilot(tmp_path / "ref" / "s1", _curve(1.0) + 0.02)
    pilot(tmp_path / "lr" / "s0", _curve(2.0), lr=2e-3, beta=0.8)
    pilot(tmp_path / "wide" / "s0", _curve(1.5), spread=0.5, beta=0.9)
    pilot(tmp_path / "cut" / "s0", _curve(1.5), finished=False, beta=1.0)
    rep = T.tune([tmp_path], reference="ref", goal="loss", compute_seconds=0.01)
    rows = {r.setting: r for r in rep.rows}
    finals = [np.mean(_curve(1.0)[-3:]), np.mean(_curve(1.0)[-3:]) + 0.02]
    assert rows["ref"].seeds == 2
    assert rows["ref"].loss == pytest.approx(np.mean(finals))
    assert rows["ref"].loss_se == pytest.approx(np.std(finals, ddof=1) / math.sqrt(2))
    assert rows["lr"].excluded == ["differs from the reference in lr"]
    assert rows["cut"].excluded == ["a run did not finish"]
    assert rep.recommendation.setting == "wide"  # the lowest loss, no spread limit
    limited = T.tune([tmp_path], reference="ref", goal="loss", compute_seconds=0.01, max_spread=0.1)
    assert limited.recommendation.setting == "ref"
    assert any("above --max-spread" in e for e in {r.setting: r for r in limited.rows}["wide"].excluded)


def test_the_command_line(tmp_path, capsys):
    pilot(tmp_path / "ref" / "s0", _curve(1.0))
    pilot(tmp_path / "better" / "s0", _curve(1.5), spread=2e-3, beta=0.9)
    assert main(["llm", "tune", str(tmp_path), "--reference", "ref", "--compute-seconds", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "recommendation: better" in out and "promised:" in out and "winner's curse" in out
    assert main(["llm", "tune", str(tmp_path), "--reference", "ref", "--max-spread", "1e-4"]) == 1
    assert "recommendation: none" in capsys.readouterr().out
    assert main(["llm", "tune", str(tmp_path), "--reference", "nothing"]) == 2
    assert "names no piloted setting" in capsys.readouterr().err
    capsys.readouterr()
    assert main(["llm", "tune", str(tmp_path / "missing")]) == 3  # as llm predict on a missing run folder
    assert "missing: no such folder" in capsys.readouterr().err
    assert main(["llm", "predict", str(tmp_path / "missing")]) == 3
    assert main(["llm", "tune", str(tmp_path), "--compute-seconds", "-1"]) == 2


def test_a_run_reached_twice_counts_once(tmp_path):
    """A pilot reached through symbolic links (or named twice) is one run: not "3 seeds" with a standard error
    of 0 that the ranking then trusts."""
    pilot(tmp_path / "pilots" / "ref" / "s0", _curve(1.0))
    pilot(tmp_path / "pilots" / "ref" / "s1", _curve(1.0) + 0.02)
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "a").symlink_to(tmp_path / "pilots" / "ref" / "s0")
    (tmp_path / "links" / "b").symlink_to(tmp_path / "pilots" / "ref")
    rep = T.tune([tmp_path / "pilots", tmp_path / "links", tmp_path / "pilots" / "ref" / "s0"], reference="ref",
                 goal="loss", compute_seconds=0.01)
    assert [r.seeds for r in rep.rows] == [2]


def test_a_pilot_that_cannot_be_read_is_left_out_and_said(tmp_path, capsys):
    """A pilot that diverged before its first evaluation has nothing to rank: it is listed as left out, and the
    others are still tuned (exit 0), where it used to end the whole command with exit 3."""
    pilot(tmp_path / "ref" / "s0", _curve(1.0))
    pilot(tmp_path / "better" / "s0", _curve(1.5), beta=0.9)
    dead = tmp_path / "dead" / "s0"
    pilot(dead, _curve(1.0), beta=5.0)
    (dead / "metrics.jsonl").write_text("")
    rep = T.tune([tmp_path], reference="ref", compute_seconds=0.01)
    assert rep.recommendation.setting == "better"
    assert [x.folder for x in rep.skipped_pilots] == [str(dead.resolve())]
    assert main(["llm", "tune", str(tmp_path), "--reference", "ref", "--compute-seconds", "0.01"]) == 0
    assert "left out: " in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--bytes-per-value", "--bandwidth", "--latency"])
def test_a_bad_network_value_is_bad_input_before_any_file_is_read(tmp_path, capsys, flag):
    (tmp_path / "empty").mkdir()  # no runs at all: the files alone would be exit 3
    assert main(["llm", "tune", str(tmp_path / "empty"), flag, "nan"]) == 2
    assert flag[2:].replace("-", "_") in capsys.readouterr().err


def test_the_committed_held_out_verdicts_follow_from_their_seeds():
    """docs/data/tune_holdout.json (python -m noloco.studies.tune): the three rules recomputed from the
    per-seed times and spreads it stores."""
    import json
    from pathlib import Path

    from noloco.studies import tune as S

    report = json.loads((Path(__file__).resolve().parents[1] / "docs/data/tune_holdout.json").read_text())
    held, tuned = report["held_out"], report["tune"]
    seeds = held["seeds"]
    assert [p["seed"] for p in seeds] == list(S.SEEDS)
    diffs = np.array([p["t_rec"] - p["t_ref"] for p in seeds])
    se = diffs.std(ddof=1) / math.sqrt(len(diffs))
    assert held["as_fast"] == bool(diffs.mean() <= S.SE_FACTOR * se)
    speedup = np.mean([p["t_ref"] for p in seeds]) / np.mean([p["t_rec"] for p in seeds])
    assert held["measured_speedup"] == pytest.approx(speedup)
    assert held["speedup_holds"] == bool(abs(speedup / tuned["promised_speedup"] - 1) <= S.SPEEDUP_TOLERANCE)
    spread = np.mean([p["spread"] for p in seeds]) / tuned["recommendation"]["spread"]
    assert held["spread_holds"] == bool(abs(spread - 1) <= S.SPREAD_TOLERANCE)


_FORK_ROW = {"setting": "a0.3_b0.5_H10", "fork": "runs/forks-s5/a0.3_b0.5_H10", "alpha": 0.3, "beta": 0.5,
             "gamma": 0.7, "n": 2, "H": 10, "outer_steps": 32, "predicted": 3.1, "low": 3.0, "high": 3.3,
             "fork_lead": -0.01, "spread": 2e-3, "spread_flags": [], "seconds": 12.5, "excluded": []}
_NETWORK = {"latency": 0.05, "bandwidth": 1e9, "bytes_per_value": 2.0}


def _last(obj: dict, key: str) -> dict:
    """``obj`` with ``key`` moved to the end (the committed one-pilot report predates ``ranked``, written before it)."""
    return {**{k: v for k, v in obj.items() if k != key}, key: obj[key]}


def _records():
    """Every record of the tuner chain with a JSON object of it: the committed reports (tune_holdout.json holds a
    tuner's report and its rows) and, where none is committed, objects in the order the code writes them."""
    from noloco.advice import fork, tune_rows as TR
    from noloco.studies import one_pilot_rows as OR
    from noloco.studies.tune import TuneReport

    data = Path(__file__).parents[1] / "docs" / "data"
    holdout, one, fresh = (read_json(data / f"{n}.json") for n in ("tune_holdout", "one_pilot", "tune_fresh"))
    return [
        (TuneReport, holdout), (TR.TuneResult, holdout["tune"]), (TR.TuneRow, holdout["tune"]["rows"][0]),
        (TR.NetworkSetting, _NETWORK), (TR.SkippedPilot, {"folder": "runs/x/s0", "why": "no metrics.jsonl"}),
        (TR.ForkRow, _FORK_ROW), (TR.ForkCost, {"pilot_runs": 10.25, "grid_runs_per_seed": 29, "forks": 28,
                                                "interval": "80 %"}),
        (TR.ForkTuneResult, {"pilot": "runs/p/s5", "goal": "loss", "compute_seconds_per_inner_step": 0.05,
                             "pilot_drop": 0.03, "network": _NETWORK, "max_spread": None, "settings_ranked": 1,
                             "recommendation": _FORK_ROW, "rows": [_FORK_ROW], "not_told_apart": [],
                             "cost": {"pilot_runs": 1.25, "grid_runs_per_seed": 2, "forks": 1, "interval": "80 %"}}),
        (fork.ForkLoss, {"predicted": 3.1, "low": 3.0, "high": 3.3, "fork_lead": -0.01, "pilot_final": 3.11,
                         "pilot_drop": 0.03, "fork_gap": None}),
        (fork.SpreadPoint, {"outer_step": 1, "predicted": 1e-3}),
        (fork.ForkSpread, {"run": "f", "pilot": "p", "fork_at": 0, "fork_len": 80, "second_half_rms": 2e-3,
                           "pilot_calibration": 1.1, "tilt": 1.0, "flags": ["not validated"],
                           "rows": [{"outer_step": 1, "predicted": 1e-3}]}),
        (OR.OnePilotReport, one), (OR.TransferRow, one["transfers"][0]), (OR.OnePilotTuner, _last(one["tuner"][0], "grid_runs")),
        (OR.RankedSetting, one["tuner"][0]["ranked"][0]), (OR.OnePilotSummary, one["summary"]),
        (OR.StudyRules, one["rules"]), (OR.LossRow, {"family": "cpu-tiny", "seed": 1, "setting": "g1",
                                                     "measured": 3.2, "predicted": 3.1, "low": 3.0, "high": 3.3,
                                                     "fork_lead": 0.01, "pilot_final": 3.15, "inside": True}),
        (OR.PickJudgement, {k: v for k, v in one["tuner"][0].items() if k in OR.PickJudgement._names()}),
        (OR.FreshReport, fresh), (OR.FreshTuner, fresh["tuner"][0]), (OR.LossModel, fresh["model"]),
        (OR.FreshTuner, {"family": "llama", "pilot_seed": 5, "judged_seed": 6, "complete": False, "missing": ["g1"],
                         "grid_runs": 29, "pilot_drop": 0.05, "pick": "g1", "holds": None}),
    ]


@pytest.mark.parametrize("cls, obj", _records(), ids=lambda x: x.__name__ if isinstance(x, type) else "")
def test_each_tuner_record_reads_and_writes_its_json_unchanged(cls, obj):
    """from_json then to_json gives the object back byte for byte, and a record made in code (no order read)
    writes the keys the object holds in the same order (a report written before a key was added lacks it)."""
    import dataclasses

    record = cls.from_json(obj)
    assert dumps(record.to_json()) == dumps(obj) and not record.extra
    made = dataclasses.replace(record, order=()).to_json()
    assert [k for k in made if k in obj] == list(obj)
