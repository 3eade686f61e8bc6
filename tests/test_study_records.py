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
from noloco.studies import advice, gap_range, held_out_axes, reports, short_phase, tune, validate, warnings
from noloco.studies.ensemble import communication as ensemble_comm, plan as ensemble_plan, records as ensemble

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"
#: each study's report class and the file of docs/data it wrote
FILES = [(reports.PaperGptReport, "paper_gpt"), (reports.RoutingReport, "routing"),
         (comm_measure.CommReport, "comm_measured"), (validate.ValidateReport, "llm_validate_cpu_small"),
         (warnings.WarningsReport, "warnings"), (warnings.ReplayReport, "warnings_replayed_setting_mean"),
         (warnings.ReplayReport, "warnings_replayed_groups_luck"), (warnings.ReplayReport, "warnings_replayed_gap_range"),
         (warnings.ReplayReport, "warnings_replayed_held_out_axes"), (advice.HoldoutReport, "advice_holdout"),
         (advice.DevelopmentReport, "advice_development"), (tune.TuneReport, "tune_holdout"),
         (ensemble.EnsembleReport, "hdee"), (gap_range.GapRangeReport, "gap_range"),
         (gap_range.Development, "gap_range_dev"), (held_out_axes.HeldOutAxesReport, "held_out_axes"),
         (short_phase.ShortPhaseReport, "short_phase"), (gap_range.GapRangeReport, "gap_range_n4"), (warnings.ReplayReport, "warnings_replayed_short_phase"),
         (warnings.ReplayReport, "warnings_replayed_gap_range_n4")]


def _made():
    """Records no committed file holds, made in code as their writers make them."""
    from noloco.llm_check.evaluation import StageEvaluation
    from noloco.paper_figs.fig_paper_maps import Comparison, Counterexample
    from noloco.claims.judge import Paths
    from noloco.paper_figs.reports import MissingStudy
    from noloco.quadratic.comm_report import Crossings

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
                recommendation=None), held_out=None),
            _ensemble_stopped(), ensemble.StudyFile(schema_version=2, settings={"seeds": [0]}),
            ensemble.Winner("noloco", None, {"noloco": 2.5}),  # one configuration: no runner-up, no margin
            ensemble.Winner.paired("ddp", "noloco", {"ddp": 2.0, "noloco": 2.5}, 0.5, None, False),  # one seed
            MissingStudy(path="docs/data/routing.json", missing="docs/data/routing.json: no such file"),
            Paths(worst_step=1, predicted_path=[1.0, 0.5], measured_path=[1.0, 0.52], se_path=[0.0, 0.01]),
            Crossings(half_log2N=1.6e7, one=None),  # "1": a JSON key that is no field name
            Comparison(agreement=0.9, paper_stable_exact_unstable=Counterexample(alpha=0.5, gamma=1.2, spectral_radius=1.1),
                       paper_unstable_exact_stable=None)]


def _ensemble_stopped():
    """The ensemble study's report when it stopped before its evaluation: the plan only."""
    chain = ensemble_plan.Chain(chain=0, mlp_hidden=64, seed_steps=10, rounds=[ensemble_plan.ChainRound("docs", 20)],
                                flops=30, n_params=5)
    budget = ensemble_plan.Budget(flops=30, step_flops_base=1, counting="matmul",
                                  per_config={"homogeneous": ensemble_plan.ConfigFlops(30, 0.0)}, tiers=[["docs"]],
                                  rounds=[["docs"]], allocation={"homogeneous": [chain]}, baseline_steps=None)
    return ensemble.EnsembleReport(schema="hdee-study", schema_version=2,
                                   settings=ensemble_plan.Study(**ensemble_plan.QUICK),
                                   rule=ensemble.Rule("zlib", 0.25, 0.25), budget=budget,
                                   unfinished=["seed 0 homogeneous"], diverged={})


def test_a_stopped_ensemble_study_writes_its_plan_only_with_null_where_its_writer_wrote_null():
    obj = _ensemble_stopped().to_json()
    assert list(obj) == ["schema", "schema_version", "settings", "rule", "budget", "unfinished", "diverged"]
    assert obj["budget"]["baseline_steps"] is None and "n_params" in obj["budget"]["allocation"]["homogeneous"][0]
    assert "n_params" not in ensemble_plan.Chain(0, 64, 10, [], 30).to_json()  # allocation() leaves it out
    assert list(ensemble.Winner.paired("a", "b", {}, 0.1, None, False).to_json())[-3:] == ["margin", "margin_se",
                                                                                          "clear"]
    assert list(ensemble.Winner("a", None, {}).to_json()) == ["best", "second", "loss"]
    assert ensemble.Summary(None, None, [], None).to_json() == {"mean": None, "se": None, "values": [],
                                                                "perplexity": None}


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
    modules = (reports, comm_measure, validate, warnings, advice, tune, ensemble, ensemble_plan, ensemble_comm)
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

from noloco.studies import as_misses, families, forecasts, groups_luck, luck, setting_mean, transfers, tune_fresh  # noqa: E402

#: each advice study's report class, the file of docs/data it wrote, and whether the study's writer today writes that
#: file's keys (families.json predates the own-input rows' ``along``, which today's writer adds, as null or not;
#: transfers.json's tuner rows hold grid_runs before ranked, the typed tuner row writes ranked first)
ADVICE_FILES = [(families.FamiliesReport, "families", False), (forecasts.ForecastsReport, "forecasts", True),
                (forecasts.ForecastsReport, "forecasts_fresh", True),
                (forecasts.ForecastsReport, "forecasts_fresh6", True), (forecasts.ForecastsReport, "forecasts_dev3", True),
                (forecasts.ForecastsReport, "forecasts_fresh9", True), (forecasts.ForecastsReport, "forecasts_fresh10", True),
                (forecasts.ErrorModelChoice, "forecasts_dev4", True),
                (forecasts.ErrorModelChoice, "forecasts_dev6", True), (forecasts.ForecastsReport, "forecasts_fresh11", True),
                (forecasts.ForecastsReport, "forecasts_fresh26", True), (forecasts.ForecastsReport, "forecasts_fresh27", True),
                (transfers.TransfersReport, "transfers", False), (transfers.TransfersReport, "transfers_fresh6", True),
                *((transfers.TransfersReport, f"transfers_fresh{s}{v}", True) for s in (12, 13, 14, 15, 16) for v in ("", "_before")),
                (transfers.TransfersReport, "transfers_fresh17", True), (transfers.TransfersReport, "transfers_fresh28", True), (transfers.TransfersReport, "transfers_fresh29", True),
                (forecasts.ForecastsReport, "forecasts_fresh29", True),
                (transfers.TransfersReport, "transfer_groups", True),
                (tune_fresh.IntervalData, "tune_interval", True), (luck.LuckReport, "luck", True),
                (setting_mean.SettingMeanReport, "setting_mean", True), (groups_luck.GroupsLuckReport, "groups_luck", True),
                (as_misses.AsMissesReport, "as_misses", True)]


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
    modules = (families, forecasts, transfers, tune_fresh)
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


# ------------------------------------------------------------------ the loss gap's studies and the device session

from noloco.studies import gap_check, gpu_report  # noqa: E402

#: each report class of the gap's studies and the file of docs/data it wrote
GAP_FILES = [(gap_check.GapCheckReport, "gap_check"), (gap_check.GapFreshReport, "gap_fresh")]


@pytest.mark.parametrize("record_class, name", GAP_FILES, ids=[name for _, name in GAP_FILES])
def test_a_gap_study_report_reads_and_writes_its_file_back_exactly(record_class, name):
    test_a_study_report_reads_and_writes_its_file_back_exactly(record_class, name)


def test_every_record_class_of_the_gap_studies_and_the_device_session_is_round_tripped():
    modules = (gap_check, gpu_report)
    defined = {c for m in modules for c in vars(m).values()
               if isinstance(c, type) and issubclass(c, JsonRecord) and c.__module__ == m.__name__}
    files = GAP_FILES + [(gpu_report.GpuSummary, "gpu_large")]
    seen = {type(r) for cls, name in files for r in _records(cls.from_json(json.loads((DATA / f"{name}.json")
                                                                                     .read_text())))}
    assert defined - seen == {gpu_report.Setting}  # read from a run's result.json, never written


def test_the_device_session_summary_reads_and_writes_its_file_back_exactly():
    """gpu_large.json: the runs as records, the devices' documents (by file stem) kept between env and the runs."""
    obj = json.loads((DATA / "gpu_large.json").read_text())
    summary = gpu_report.GpuSummary.from_json(obj)
    assert json.dumps(jsonable(summary)) == json.dumps(obj)
    assert {type(r) for r in summary.runs} == {gpu_report.RunSummary} and "bench_large" in summary.extra
    for part in _records(summary):
        assert type(part).from_json(part.to_json()) == part


# ------------------------------------------------------------------ the benchmarks' results

from noloco.benchmarks import all as bench_all, llm_step, observer, outer, scaling, timer  # noqa: E402

#: each stored benchmark result, its results' record class and its options' (None: the options stay a dict)
BENCH_FILES = [(outer.OneProcess, outer.OuterOptions, "outer_one_process_cpu"),
               (outer.AcrossRanks, outer.OuterOptions, "outer_ranks4"),
               (outer.AcrossRanks, outer.OuterOptions, "outer_overlap_ranks2"),
               (observer.ObserverCost, observer.ObserverOptions, "observer_cost_h20"),
               (observer.ObserverCost, observer.ObserverOptions, "observer_cost_ranks")]


@pytest.mark.parametrize("results_class, options_class, name", BENCH_FILES, ids=[n for _, _, n in BENCH_FILES])
def test_a_benchmark_result_reads_and_writes_its_file_back_exactly(results_class, options_class, name):
    obj = json.loads((DATA / f"{name}.json").read_text())
    doc = timer.BenchResult.from_json(obj)
    doc = dataclasses.replace(doc, results=results_class.from_json(doc.results))
    assert json.dumps(doc.to_json()) == json.dumps(obj)
    for part in [*_records(doc.results), doc.machine]:  # the document itself reads its results as JSON
        assert type(part).from_json(part.to_json()) == part
    assert json.dumps(jsonable(_fresh(doc))) == json.dumps(obj)  # made in code: the benchmark's key order
    options = options_class.from_json(obj["options"])  # written by the command line's order, read back as is
    assert json.dumps(options.to_json()) == json.dumps(obj["options"])


def _made_bench():
    """Benchmark records no committed file holds, made in code as the benchmarks make them."""
    return [outer.RankTimes(times={"pairs: toolkit": [0.1, 0.2]}, observed={"pairs: toolkit": [0.0, 0.0]}, P=10,
                            inner_s=[]),
            scaling.Scaling(base=scaling.BASE, simulate={"exact_vs_dim": [[100, 0.1], [1000, 1.0]]},
                            check_vs_directions=[[10, 0.1], [100, 0.5]]),
            llm_step.StepRates(threads=1, n_params=100, modes={"loop": llm_step.ModeRate(tokens_per_s=1.0, step_s=1.0,
                                                                                           warmup_s=2.0),
                                                               "vmap": llm_step.ModeRate(error="no batching rule")}),
            llm_step.StepOptions(replicas=8, size="cpu-small", device="cpu"),
            bench_all.Suite(load_average_before=[0.5], extra={"grid_points": 9}), bench_all.Suite(skipped="no torch"),
            timer.machine()]


@pytest.mark.parametrize("record", _made_bench(), ids=lambda r: type(r).__name__)
def test_a_benchmark_record_made_in_code_round_trips(record):
    obj = record.to_json()
    assert type(record).from_json(obj) == record
    assert json.dumps(type(record).from_json(obj).to_json()) == json.dumps(obj)


def test_every_record_class_of_the_benchmarks_is_round_tripped_above():
    modules = (bench_all, llm_step, observer, outer, scaling, timer)
    defined = {c for m in modules for c in vars(m).values()
               if isinstance(c, type) and issubclass(c, JsonRecord) and c.__module__ == m.__name__}
    seen = {type(r) for results_class, options_class, name in BENCH_FILES
            for doc in [json.loads((DATA / f"{name}.json").read_text())]
            for r in [*_records(results_class.from_json(doc["results"])), options_class.from_json(doc["options"]),
                      timer.BenchResult.from_json(doc)]}
    seen |= {type(r) for made in _made_bench() for r in _records(made)}
    assert defined - seen == set()


def test_the_all_result_keeps_each_suite_s_keys_in_order():
    suite = bench_all.Suite(load_average_before=[0.5], extra={"b": 1, "a": 2})
    assert list(suite.to_json()) == ["load_average_before", "b", "a"]
    assert bench_all.Suite(skipped="no torch").to_json() == {"skipped": "no torch"}


# ------------------------------------------------------------------ the advice's own reports (made in code only)

from noloco.advice import fork as advice_fork, forecast as advice_forecast, predict as advice_predict  # noqa: E402
from noloco.advice.record import OtherSettings  # noqa: E402


def _prediction(groups_along="own") -> advice_predict.Prediction:
    P = advice_predict
    outer = P.PredictOuter(replicas=4, group_size=2, alpha=0.5, beta=0.7, gamma=0.7, momentum="heavy-ball")
    group = P.PredictGroup(numel=10, c_late=0.1, c_regression_late=0.05, s2_late=1e-6, drift_var=None,
                           rho_lag1_late=0.2, rho_long_run_final=0.3)
    row = P.PredictRow(outer_step=2, measured=1e-3, predicted=1.1e-3, ratio=1 / 1.1, predicted_lag1=1e-3,
                       predicted_long_run=1.1e-3)
    return P.Prediction(schema_version=2, run="r", method="noloco", outer=outer, noise_model="long-run",
                        fitted_constants=0, inputs_logged=True, measured_growth=1.01, notes=["n"], decay_factor=0.6,
                        flattest_group="w", flattest_c=0.1, groups={"w": group}, groups_along=groups_along,
                        rows=[row], predicted_growth=None)


def _transfer() -> advice_forecast.Transfer:
    F = advice_forecast
    return F.Transfer(run="r", changes={"alpha": 0.3}, flags=[], decay_factor=0.5, pilot_decay_factor=0.6,
                      flattest_c=0.05, tilt=1.1, second_half_rms=1e-3, second_half_rms_average=1.1e-3,
                      groups=F.StepGroups(along="average", seed=None, why="no seed"), pilot_replayed_rms=9e-4,
                      pilot_replay_ratio=None, interval={"quantiles": [0.9, 1.1], "from": "x"},
                      rows=[F.TransferRow(outer_step=1, predicted=1e-3, low=9e-4, high=1.1e-3)])


def _forecast(measured=None) -> advice_forecast.Forecast:
    F = advice_forecast
    return F.Forecast(run="r", method="noloco", from_step=8, outer_steps=32, window=[4, 8], c_rise=0.1, c_level=0.2,
                      noise_scatter=0.05, decay_factor=0.7, flags=["early: x"], groups=F.StepGroups(along="own", seed=3, why=None),
                      rows=[F.ForecastStep(outer_step=9, forecast=1e-3, low=9e-4, high=1.1e-3, measured=measured)],
                      interval={"quantiles": [0.9, 1.1], "from": "x"},
                      recipe=F.ForecastRecipe(window=5, c_scaling="held", s2_scaling="L2 exp(1.3 t / T)"))


def test_the_forecast_writes_the_keys_in_the_order_of_its_report():
    obj = _forecast().to_json()
    assert list(obj) == ["run", "method", "from_step", "outer_steps", "window", "c_rise", "c_level", "noise_scatter",
                         "decay_factor", "flags", "groups", "rows", "interval", "recipe"]
    assert obj["rows"] == [{"outer_step": 9, "forecast": 1e-3, "low": 9e-4, "high": 1.1e-3, "measured": None}]
    assert obj["groups"] == {"along": "own", "seed": 3, "why": None}
    assert list(obj["recipe"]) == ["window", "c_scaling", "s2_scaling"]


def test_the_prediction_and_the_transfer_write_the_keys_in_the_order_they_always_did():
    assert list(_prediction().to_json()) == [
        "schema_version", "run", "method", "outer", "noise_model", "fitted_constants", "inputs_logged",
        "measured_growth", "notes", "decay_factor", "flattest_group", "flattest_c", "groups", "groups_along", "rows",
        "predicted_growth"]
    assert "groups_along" not in _prediction(groups_along=None).to_json()  # n = N, or no inputs: never written
    assert list(_transfer().to_json()) == [
        "run", "changes", "flags", "decay_factor", "pilot_decay_factor", "flattest_c", "tilt", "second_half_rms",
        "second_half_rms_average", "groups", "pilot_replayed_rms", "pilot_replay_ratio", "interval", "rows"]


@pytest.mark.parametrize("record", [_prediction(), _prediction(None), _transfer(), _forecast(), _forecast(1e-3),
                                    advice_fork.ForkOrigin(fork_of="p", fork_at=40, fork_len=80),
                                    OtherSettings(seed=3, adam_beta1=0.8)],
                         ids=lambda r: type(r).__name__)
def test_an_advice_record_round_trips(record):
    obj = json.loads(json.dumps(record.to_json()))
    assert type(record).from_json(obj) == record
    assert json.dumps(type(record).from_json(obj).to_json()) == json.dumps(obj)
    for part in _records(record):
        assert type(part).from_json(part.to_json()) == part


def test_a_fork_origin_keeps_the_rest_of_the_config():
    config = {"method": "noloco", "fork_of": "/p", "fork_at": 40, "fork_len": 80, "seed": 1}
    origin = advice_fork.ForkOrigin.from_json(config)
    assert (origin.fork_of, origin.fork_at, origin.fork_len) == ("/p", 40, 80) and origin.to_json() == config
