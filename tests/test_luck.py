"""The luck study (noloco/studies/luck.py): its stored report re-judges from its own rows, and its verdict can
say 'beyond luck'."""

import json
import math
from pathlib import Path

import numpy as np

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
