"""The wider Llama's grid (noloco.studies.wide_grid): its settings are the one-pilot grid's with this family's batch
and context, and the script trains a run folder the forecast's fresh judgement reads."""

import json

import pytest

from noloco.studies import one_pilot
from noloco.studies import wide_grid as W


def test_the_settings_are_the_grids_with_the_wider_batch():
    for name in one_pilot.JUDGED:
        s, base = W.setting(name), one_pilot.setting(name)
        assert (s.batch, s.ctx) == (W.BATCH, W.CTX) != (base.batch, base.ctx)
        assert s.outer() == base.outer() and s.lr == base.lr and s.schedule == base.schedule


def test_jobs_below_one_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        W.main(["/nonexistent", "--jobs", "0"])
    assert e.value.code == 2 and "--jobs 0" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.torch
def test_a_tiny_grid_run_is_a_finished_folder_of_the_family(tmp_path):
    assert W.main([str(tmp_path), "--device", "cpu", "--jobs", "1", "--width", "16", "--layers", "1", "--batch",
                   "1", "--ctx", "8", "--settings", "a0.3_b0.5_H20", "--seeds", "21"]) == 0
    folder = one_pilot.folder(tmp_path, "llama-wide", "a0.3_b0.5_H20", 21)
    rows = [json.loads(line) for line in (folder / "inputs.jsonl").read_text().splitlines()]
    assert one_pilot.finished(folder) and [r["outer_step"] for r in rows] == list(range(1, 17))  # T = 320 / H
    assert "llama-wide" in (folder / "result.json").read_text()


def test_a_fresh_judgement_reads_the_families_the_folder_holds(tmp_path):
    (tmp_path / "llama-wide" / one_pilot.JUDGED[0] / "s21").mkdir(parents=True)
    (tmp_path / "llama" / one_pilot.JUDGED[1] / "s9").mkdir(parents=True)
    (tmp_path / "notes" / "s21").mkdir(parents=True)  # not a grid setting
    assert one_pilot.families_in(tmp_path, 21) == ["llama-wide"]
    assert one_pilot.families_in(tmp_path, 9) == ["llama"] and one_pilot.families_in(tmp_path / "none", 9) == []
    assert one_pilot.families_in(tmp_path) == ["llama", "llama-wide"]
