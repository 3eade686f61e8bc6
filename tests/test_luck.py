"""The luck study (noloco/studies/luck.py): its stored report re-judges from its own rows, and its verdict can
say 'beyond luck'."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from noloco.studies import luck
from noloco.studies.transfers import AsRow

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"


def _stored() -> luck.LuckReport:
    return luck.LuckReport.from_json(json.loads((DATA / "luck.json").read_text()))


def test_the_stored_report_re_judges_from_its_measured_runs_and_transfers():
    rep = _stored()
    measured: dict = {}
    for r in rep.runs:
        measured.setdefault((r.family, r.setting), {})[r.data_seed] = r.measured
    runs = luck.oracle_runs(measured)
    assert [(r.family, r.setting, r.data_seed) for r in runs] == [(r.family, r.setting, r.data_seed) for r in rep.runs]
    assert np.allclose([r.oracle_log_error for r in runs], [r.oracle_log_error for r in rep.runs], rtol=0, atol=1e-12)
    luck_rms, axes = luck.judge(runs, rep.transfers)
    assert luck_rms == rep.luck_rms and axes == rep.axes
    assert luck.loss_luck(rep.runs) == rep.loss_sd and all(0 < v < 0.2 for v in rep.loss_sd.values())
    assert len(rep.runs) == len(luck.FAMILIES) * len(luck.NAMES) * len(luck.DATA_SEEDS)
    assert all(a.transfers == len(luck.FAMILIES) * len(luck.DATA_SEEDS) for a in rep.axes)


def test_the_f_limit_is_the_95_percent_point_of_f_12_10():
    from scipy.stats import f

    assert math.isclose(luck.F_LIMIT, f.ppf(0.95, 12, 10), abs_tol=0.005)


def _row(family, seed, target, axis, ratio):
    return AsRow(family=family, seed=seed, axis=axis, pilot=luck.PILOT, target=target, measured=1.0, as_ratio=ratio,
                 as_flags=[], as_verdict="agrees", pilot_replay_ratio=1.0, decay_factor=0.5, pilot_decay_factor=0.5,
                 tilt=1.0, average_ratio=ratio)


def test_transfers_three_times_the_runs_luck_are_beyond_it_and_as_large_are_within():
    rng = np.random.default_rng(0)
    sigma = 0.05
    measured = {(f, n): {d: float(np.exp(rng.normal(0, sigma))) for d in luck.DATA_SEEDS}
                for f in luck.FAMILIES for n in luck.NAMES}
    runs = luck.oracle_runs(measured)
    target, axis = luck.TARGETS[0]
    oracle = [r.oracle_log_error for r in runs if r.setting == target]
    for scale, verdict in ((3.0, "beyond luck"), (1.0, "within luck")):
        rows = [_row(r.family, r.data_seed, target, axis, math.exp(scale * e)) for r in runs if r.setting == target
                for e in [r.oracle_log_error]]
        _, axes = luck.judge(runs, rows)
        mine = next(a for a in axes if a.axis == axis)
        assert math.isclose(mine.transfer_rms, scale * math.sqrt(np.mean(np.square(oracle))))
        assert mine.verdict == verdict


def test_the_forecasts_floor_re_judges_from_its_continuations_and_can_say_within_luck():
    """The stored continuations' oracle errors re-make from their measures, and judge_forecasts gives the stored
    verdicts; seen forecasts whose errors are the floor's own are within luck, ten times them beyond it."""
    from noloco.studies.forecasts import SeenForecast

    rep = _stored()
    conts = rep.continuations
    assert len(conts) == len(luck.FAMILIES) * len(luck.FORECAST_NAMES) * len(luck.SHARES) * len(luck.CONTINUATIONS)
    for c in conts:
        rest = [math.log(o.measured) for o in conts if (o.family, o.setting, o.from_step) == (c.family, c.setting,
                                                                                              c.from_step) and o != c]
        assert math.isclose(c.oracle_log_error, math.log(c.measured) - np.mean(rest), abs_tol=1e-12)
    assert luck.judge_forecasts(conts) == rep.shares
    for scale, verdict in ((1.0, "within luck"), (10.0, "beyond luck")):
        seen = [SeenForecast("x", "r", 0, c.from_step, c.outer_steps, 10, math.exp(scale * c.oracle_log_error))
                for c in conts]
        assert all(x.verdict == verdict for x in luck.judge_forecasts(conts, seen))


@pytest.mark.slow
@pytest.mark.torch
def test_the_luck_study_re_trains_cpu_tiny_bit_for_bit(tmp_path):
    """`noloco llm study luck`'s training from nothing for cpu-tiny (30 runs and 36 continuations, about 8 minutes
    on two cores): every run's spread and final loss, every continuation's measure and every transfer's ratio come out
    as docs/data/luck.json has them."""
    pytest.importorskip("transformers")
    luck.train_missing(tmp_path, families=("cpu-tiny",), progress=False)
    again, stored = luck.evaluate(tmp_path, families=("cpu-tiny",)), _stored()

    def mine(rows, *fields):
        return [tuple(getattr(r, f) for f in fields) for r in rows if r.family == "cpu-tiny"]

    assert mine(again.runs, "setting", "data_seed", "measured", "final_loss") == \
        mine(stored.runs, "setting", "data_seed", "measured", "final_loss")
    assert mine(again.continuations, "setting", "from_step", "data_seed", "measured") == \
        mine(stored.continuations, "setting", "from_step", "data_seed", "measured")
    # as flagged today (transfers.flagged_today): a target of fewer than SHORT_RUN outer steps (H 20 at equal tokens)
    # is flagged short run; one to H 5, flagged short phase when judged, is judged by its ratio
    from noloco.studies import one_pilot
    from noloco.studies.transfers import JudgedTransfer, flagged_today

    label = {target: axis for pilot, target, axis in one_pilot.TRANSFERS if pilot == one_pilot.PILOT}

    def today(row):
        return (*row[:3], flagged_today([JudgedTransfer(row[1], "cpu-tiny", label[row[0]], row[2], row[3])])[0].verdict)

    assert mine(again.transfers, "target", "seed", "as_ratio", "as_verdict") == \
        [today(r) for r in mine(stored.transfers, "target", "seed", "as_ratio", "as_verdict")]
