"""The run folder's typed records: every row of a real cpu-tiny run folder, and every such row the docs' data
files hold, goes through from_json and back to the same JSON, key order included; a user's own keys survive."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noloco.advice.run_rows import InputsRow, MetricsRow, RunResult
from noloco.infra.errors import DataError

DATA = Path(__file__).resolve().parent.parent / "docs" / "data"


def _same(record_class, obj) -> None:
    back = record_class.from_json(obj).to_json()
    assert json.dumps(back) == json.dumps(obj)  # equal, and in the same key order


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A cpu-tiny noloco run of a few outer steps, as `noloco llm train` writes it (seconds)."""
    pytest.importorskip("torch")
    from noloco.cli import main

    out = tmp_path_factory.mktemp("tiny") / "run"
    assert main(["llm", "train", "--size", "cpu-tiny", "--method", "noloco", "--outer-steps", "4",
                 "--val-windows", "4", "--threads", "1", "--out", str(out)]) == 0
    return out


def test_every_row_of_a_run_folder_round_trips(run_folder):
    metrics = [json.loads(line) for line in (run_folder / "metrics.jsonl").read_text().splitlines()]
    inputs = [json.loads(line) for line in (run_folder / "inputs.jsonl").read_text().splitlines()]
    assert metrics and inputs
    for row in metrics:
        _same(MetricsRow, row)
    for row in inputs:
        _same(InputsRow, row)
    result = json.loads((run_folder / "result.json").read_text())
    _same(RunResult, result)
    typed = RunResult.from_json(result)
    assert typed.final == MetricsRow.from_json(metrics[-1])  # the last evaluation, typed the same way
    assert typed.final.weight_std > 0 and typed.part.tokens == typed.run.tokens > 0
    assert typed.setting()["replicas"] == result["config"]["outer"]["replicas"] and "outer" not in typed.setting()
    # what the closing table reads is named by the record, not left in extra
    assert {"corpus_sha256", "python", "unigram_entropy", "checkpoint_outer_step"}.isdisjoint(typed.extra)
    assert typed.corpus_sha256 == result["corpus_sha256"] and typed.diverged is None


def _rows_in(obj):
    """Every object in ``obj`` that is a metrics row (an outer step and a weight spread)."""
    if isinstance(obj, dict):
        if isinstance(obj.get("outer_step"), int) and "weight_std" in obj:
            yield obj
        for v in obj.values():
            yield from _rows_in(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _rows_in(v)


def test_the_metrics_rows_of_the_docs_data_round_trip():
    rows = [r for path in sorted(DATA.glob("*.json")) for r in _rows_in(json.loads(path.read_text()))]
    assert len(rows) > 10
    for row in rows:
        _same(MetricsRow, row)


def test_a_users_own_keys_absent_keys_and_nulls_survive():
    row = {"outer_step": 3, "my_metric": [1, 2], "weight_std": None}
    typed = MetricsRow.from_json(row)
    assert typed.extra == {"my_metric": [1, 2]} and typed.weight_std is None and typed.lr is None
    assert typed.to_json() == row and "lr" not in typed.to_json()  # absent stays absent, null stays null
    made = MetricsRow(outer_step=1, weight_std=0.5)  # made in code: every field, in declared order
    assert list(made.to_json())[:3] == ["outer_step", "step", "tokens"] and made.to_json()["weight_std"] == 0.5


def test_a_row_without_its_required_key_or_not_an_object_is_a_data_error():
    with pytest.raises(DataError, match="lacks outer_step"):
        MetricsRow.from_json({"weight_std": 1.0})
    with pytest.raises(DataError, match="expected a JSON object"):
        InputsRow.from_json([1, 2])
    with pytest.raises(DataError, match="GroupInputs"):
        InputsRow.from_json({"outer_step": 1, "groups": {"wte": 3}})


def test_strict_json_writes_a_record_by_its_keys():
    """jsonable (every file and --json output) writes a record as to_json does, not its bookkeeping fields, and
    marks a non-finite value the usual way."""
    from noloco.infra.files import jsonable

    row = MetricsRow.from_json({"outer_step": 2, "mine": 1})
    assert jsonable(row) == {"outer_step": 2, "mine": 1}
    assert jsonable(MetricsRow(outer_step=1, weight_std=float("inf")))["weight_std_nonfinite"] == "inf"


def test_the_studies_the_figures_read_round_trip():
    """The typed readers of docs/data's paper GPT, routing and ensemble studies keep every key, in order."""
    from noloco.studies.ensemble.records import EnsembleReport
    from noloco.studies.reports import PaperGptReport, RoutingReport

    for record_class, name in ((PaperGptReport, "paper_gpt"), (RoutingReport, "routing"), (EnsembleReport, "hdee")):
        _same(record_class, json.loads((DATA / f"{name}.json").read_text()))
    routing = json.loads((DATA / "routing.json").read_text())
    del routing["settings"]["stages"]
    with pytest.raises(DataError, match="lacks stages"):
        RoutingReport.from_json(routing)
