"""Advice from one pilot and its forks (noloco.advice.fork, noloco llm tune --forks): a fork starts from the pilot's
exact state, and the tuner ranks the forked settings from files; the study's settings are as documented."""

import dataclasses
import json

import pytest

from noloco.studies import families as F
from noloco.studies import one_pilot as O

SMALL = dataclasses.replace(F.BASE, outer_steps=8, inner_steps=4, warmup=4, batch=2, ctx=16)


def test_the_study_crosses_every_axis_both_ways_and_the_grid_has_27_settings():
    assert len(O.grid()) == 27 and O.PILOT in O.grid()
    axes = [a for _, _, a in O.TRANSFERS]
    for axis in ("alpha", "beta", "gamma", "H", "N", "n"):
        assert f"{axis} up" in axes and f"{axis} down" in axes
    tokens = {s["inner_steps"] * s["outer_steps"] for s in O.grid().values()}
    assert tokens == {O.TOKENS}  # equal tokens: the grid compares settings, not budgets
    for name in O.FORKED:  # every fork starts and ends at its own outer-step boundaries, with 8 or more steps
        H = O.setting(name).inner_steps
        assert O.FORK_AT % H == 0 and O.fork_len(name) % H == 0 and O.fork_len(name) // H >= O.FORK_MIN_STEPS


@pytest.mark.torch
def test_a_fork_at_the_pilots_own_setting_is_the_pilot_and_the_tuner_ranks_the_forks(tmp_path, monkeypatch, capsys):
    """A fork of the pilot's own setting continues the pilot exactly (same weights, AdamW state, outer momentum,
    data and learning rates): its loss at its end is the pilot's at that step. Then the tuner and --fork read them."""
    family = F.FAMILIES["cpu-tiny"]
    monkeypatch.setattr(F, "EVAL_EVERY", 2)  # the pilot evaluates where the forks end (outer step 2)
    pilot = tmp_path / "pilot"
    same, other = tmp_path / "forks" / "same", tmp_path / "forks" / "other"
    F.train_hf(family, SMALL, 0, pilot, forks=[(SMALL, same), (dataclasses.replace(SMALL, alpha=0.3, beta=0.9), other)],
               fork_at=0, fork_len=8)
    from noloco.advice.fork import fork_loss, fork_spread, read_fork
    from noloco.advice.record import read_run

    fork, base, at, length = read_fork(same)
    assert (at, length) == (0, 8) and base.folder.resolve() == pilot.resolve()
    pilot_at_end = next(r for r in read_run(pilot).metrics if r["outer_step"] == 2 and "val_loss_avg_model" in r)
    assert fork.metrics[-1]["val_loss_avg_model"] == pytest.approx(pilot_at_end["val_loss_avg_model"], abs=1e-6)
    assert fork_loss(same).fork_lead == pytest.approx(0.0, abs=1e-6)
    again = tmp_path / "again"  # a fork from the start of a finished pilot, without training it again: the same fork
    F.train_hf(family, SMALL, 0, pilot, forks=[(SMALL, again)], fork_at=0, fork_len=8, train=False)
    assert read_run(again).metrics[-1]["val_loss_avg_model"] == pytest.approx(
        read_fork(same)[0].metrics[-1]["val_loss_avg_model"], abs=1e-6)
    assert fork_loss(other).fork_lead != pytest.approx(0.0, abs=1e-6)
    spread = fork_spread(other)
    assert len(spread.rows) == SMALL.outer_steps and spread.second_half_rms > 0
    from noloco.cli import main

    capsys.readouterr()
    assert main(["llm", "tune", str(tmp_path / "forks"), "--forks", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["rows"]) == 3 and report["recommendation"]["setting"] in {r["setting"] for r in report["rows"]}
    assert report["cost"]["pilot_runs"] == pytest.approx(1 + 2 * 8 / 32)
    assert main(["llm", "predict", str(other), "--fork"]) == 0 and "second-half RMS" in capsys.readouterr().out
    assert main(["llm", "tune", str(pilot), "--forks"]) == 3 and "no fork" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.torch
def test_the_one_pilot_study_reproduces_its_committed_report(tmp_path):
    """`noloco llm study one-pilot` from nothing (hours on two busy cores): every verdict and pick that
    docs/data/one_pilot.json holds (the study as far as it was trained) comes out again."""
    from pathlib import Path

    committed = json.loads((Path(__file__).parents[1] / "docs" / "data" / "one_pilot.json").read_text())
    report = O.run_study(tmp_path).to_json()
    key = lambda r: (r["family"], r["seed"], r["axis"])  # noqa: E731
    again = {key(r): r for r in report["transfers"]}
    for r in committed["transfers"]:  # --as's verdicts there predate its calibration and flags (study transfers)
        assert again[key(r)].get("fork_verdict") == r.get("fork_verdict")
    picks = {(r["family"], r["pilot_seed"], r["judged_seed"]): r["pick"] for r in report["tuner"]}
    assert all(picks[(r["family"], r["pilot_seed"], r["judged_seed"])] == r["pick"] for r in committed["tuner"])
