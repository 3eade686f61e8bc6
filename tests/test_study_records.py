"""The studies' reports and the harness's small results as typed records: every record class reads its JSON and
writes it back exactly (``to_json(from_json(obj)) == obj``, key order included, and ``from_json(to_json(x)) ==
x``), and a report made in code writes the keys in the order the study wrote them before it was typed."""

import dataclasses
import json
from pathlib import Path

import pytest

from noloco.infra.files import jsonable
from noloco.infra.record import JsonRecord
from noloco.llm_check import comm_measure
from noloco.llm_check.divergence import Diverged
from noloco.studies import advice, reports, tune, validate, warnings

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"
#: each study's report class and the file of docs/data it wrote
FILES = [(reports.PaperGptReport, "paper_gpt"), (reports.RoutingReport, "routing"),
         (comm_measure.CommReport, "comm_measured"), (validate.ValidateReport, "llm_validate_cpu_small"),
         (warnings.WarningsReport, "warnings"), (advice.HoldoutReport, "advice_holdout"),
         (advice.DevelopmentReport, "advice_development"), (tune.TuneReport, "tune_holdout")]


def _made():
    """Records no committed file holds, made in code as their writers make them."""
    from noloco.llm_check.evaluation import StageEvaluation

    cell = comm_measure.Cell(op="pingpong", ranks=2, bytes=1024, times_s=[1e-4, 2e-4], median_s=1.5e-4, p10_s=1e-4,
                             p90_s=2e-4, rel_iqr=0.5)
    fit = comm_measure.Fit(latency_s=1e-4, seconds_per_byte=1e-9, bandwidth_bits_per_s=8e9,
                           reduce_seconds_per_byte=0.0, source="test")
    summary = comm_measure.CommSummary(median_rel_iqr=0.5, max_rel_iqr=0.5, held_out_ratio_median=None,
                                       held_out_ratio_range=None)
    return [Diverged(outer_step=3, inner_step=None, replica=1, quantity="weights", tensor="wte", value="inf"),
            Diverged(outer_step=2, inner_step=7, replica=None, quantity="training loss", tensor=None, message="m"),
            StageEvaluation(removed=[1], stages=3, outer_step=2, val_loss_avg_model=4.8, val_loss_per_replica=[4.8],
                            weight_std=0.01),
            comm_measure.Analysis(fit=fit, effective_fits=[], summary=summary, measurements=[cell]),
            reports.Trend(mean=1.0, se=0.5, values=[0.5, 1.5], holds=False, rule="mean > 2 SE"),
            validate.ValidateReport(schema_version=2, preset="cpu-tiny", base={}, diverged="run00: diverged"),
            tune.TuneReport(tune=dataclasses.replace(  # the tuner recommended nothing: no rules, no verdicts
                tune.TuneReport.from_json(json.loads((DATA / "tune_holdout.json").read_text())).tune,
                recommendation=None), held_out=None)]


def _records(x):
    """Every record in a tree of records, dicts and lists."""
    if isinstance(x, JsonRecord):
        yield x
        for name in x._names():
            yield from _records(getattr(x, name))
    elif isinstance(x, dict):
        for v in x.values():
            yield from _records(v)
    elif isinstance(x, list):
        for v in x:
            yield from _records(v)


def _fresh(x):
    """``x`` as if made in code: no key order kept from a file, and a value strict JSON wrote as null with its
    ``KEY_nonfinite`` marker the number again (the writer marks it in place)."""
    if isinstance(x, JsonRecord):
        marked = {k[:-len("_nonfinite")]: float(v) for k, v in x.extra.items() if k.endswith("_nonfinite")}
        extra = {k: v for k, v in x.extra.items() if not k.endswith("_nonfinite")}
        return dataclasses.replace(x, **{n: _fresh(getattr(x, n)) for n in x._names()} | marked, extra=extra,
                                   order=())
    if isinstance(x, dict):
        return {k: _fresh(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_fresh(v) for v in x]
    return x


@pytest.mark.parametrize("record_class, name", FILES, ids=[name for _, name in FILES])
def test_a_study_report_reads_and_writes_its_file_back_exactly(record_class, name):
    obj = json.loads((DATA / f"{name}.json").read_text())
    report = record_class.from_json(obj)
    assert json.dumps(report.to_json()) == json.dumps(obj)  # the same keys, values and order
    for part in _records(report):
        assert type(part).from_json(part.to_json()) == part
    assert json.dumps(jsonable(_fresh(report))) == json.dumps(obj)  # made in code: the study's key order


@pytest.mark.parametrize("record", _made(), ids=lambda r: type(r).__name__)
def test_a_record_made_in_code_round_trips(record):
    obj = record.to_json()
    assert type(record).from_json(obj) == record
    assert json.dumps(type(record).from_json(obj).to_json()) == json.dumps(obj)


def test_every_record_class_of_the_studies_is_round_tripped_above():
    modules = (reports, comm_measure, validate, warnings, advice, tune)
    defined = {c for m in modules for c in vars(m).values()
               if isinstance(c, type) and issubclass(c, JsonRecord) and c.__module__ == m.__name__}
    seen = {type(r) for cls, name in FILES for r in _records(cls.from_json(json.loads((DATA / f"{name}.json")
                                                                                     .read_text())))}
    seen |= {type(r) for made in _made() for r in _records(made)}
    assert defined - seen <= {warnings.FlaggedRun}  # the base of the clean and the faulty runs: never itself


def test_a_malformed_report_is_a_data_error():
    from noloco.infra.errors import DataError

    doc = json.loads((DATA / "warnings.json").read_text())
    del doc["summary"]["caught"]
    with pytest.raises(DataError, match="lacks caught"):
        warnings.WarningsReport.from_json(doc)


# ------------------------------------------------------------------ the advice studies' reports

from noloco.studies import families, forecasts, transfers  # noqa: E402

#: each advice study's report class, the file of docs/data it wrote, and whether the study's writer today writes that
#: file's keys (families.json predates the own-input rows' ``along``, which today's writer adds, as null or not)
ADVICE_FILES = [(families.FamiliesReport, "families", False), (forecasts.ForecastsReport, "forecasts", True),
                (forecasts.ForecastsReport, "forecasts_fresh", True),
                (forecasts.ForecastsReport, "forecasts_fresh6", True), (forecasts.ForecastsReport, "forecasts_dev3", True),
                (forecasts.ForecastsReport, "forecasts_fresh9", True), (forecasts.ForecastsReport, "forecasts_fresh10", True),
                (transfers.TransfersReport, "transfers", True), (transfers.TransfersReport, "transfers_fresh6", True),
                (transfers.TransfersReport, "transfer_groups", True)]


@pytest.mark.parametrize("record_class, name, current", ADVICE_FILES, ids=[name for _, name, _ in ADVICE_FILES])
def test_an_advice_study_report_reads_and_writes_its_file_back_exactly(record_class, name, current):
    obj = json.loads((DATA / f"{name}.json").read_text())
    report = record_class.from_json(obj)
    assert json.dumps(report.to_json()) == json.dumps(obj)
    assert json.dumps(jsonable(report)) == json.dumps(obj)  # what write_json writes
    for part in _records(report):
        assert type(part).from_json(part.to_json()) == part
    if current:
        assert json.dumps(jsonable(_fresh(report))) == json.dumps(obj)


def test_the_advice_reports_read_their_rows_as_their_kinds():
    rep = transfers.TransfersReport.from_json(json.loads((DATA / "transfer_groups.json").read_text()))
    kinds = {type(r) for r in rep.seen.rows}
    assert kinds == {transfers.AsRow, transfers.SeenRow}  # a seen row carries its old verdict
    fresh = forecasts.ForecastsReport.from_json(json.loads((DATA / "forecasts_fresh6.json").read_text()))
    assert fresh.choice.at_5.limits()[:3] == (fresh.choice.at_5.settled_c, fresh.choice.at_5.settled_rise,
                                              fresh.choice.at_5.settled_fall or float("inf"))
    assert all(isinstance(r, forecasts.ForecastRow) and r.claimed_at_5 is not None for r in fresh.rows)


def _averaged_row():
    """A forecast row with the same forecast averaged over groups beside it (no committed file holds one)."""
    along = dict(c_rise=0.1, c_level=0.2, always=[], inside=True, holds=True)
    return forecasts.ForecastRow(family="llama", run="pilot", seed=0, from_step=8, outer_steps=32, inner_steps=10,
                                 ratio=1.05, groups="own", naive=1.2, claimed=True, own_over_average=1.05 / 0.9,
                                 average=forecasts.Along(ratio=0.9, groups="average", flagged=False, **along), **along)


def test_a_forecast_row_made_in_code_round_trips_in_the_study_key_order():
    row = _averaged_row()
    obj = row.to_json()
    assert list(obj) == ["family", "run", "seed", "from_step", "outer_steps", "inner_steps", "ratio", "c_rise",
                         "c_level", "groups", "always", "inside", "holds", "naive", "average", "own_over_average",
                         "claimed"]
    assert forecasts.ForecastRow.from_json(obj) == row and forecasts.ForecastRow.from_json(obj).to_json() == obj


def test_every_record_class_of_the_advice_studies_is_round_tripped_above():
    modules = (families, forecasts, transfers)
    defined = {c for m in modules for c in vars(m).values()
               if isinstance(c, type) and issubclass(c, JsonRecord) and c.__module__ == m.__name__}
    seen = {type(r) for cls, name, _ in ADVICE_FILES
            for r in _records(cls.from_json(json.loads((DATA / f"{name}.json").read_text())))}
    seen |= set(map(type, _records(_averaged_row())))
    assert defined - seen == {transfers.AsPrediction}  # the base of the two kinds of row: never itself


def test_a_malformed_advice_report_is_a_data_error():
    from noloco.infra.errors import DataError

    doc = json.loads((DATA / "forecasts_fresh.json").read_text())
    del doc["rows"][0]["claimed"]
    with pytest.raises(DataError, match="ForecastRow: the JSON object lacks claimed"):
        forecasts.ForecastsReport.from_json(doc)
