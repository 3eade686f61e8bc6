"""The groups-luck study (noloco/studies/groups_luck.py): its verdicts can say each thing, its chi-square range is
scipy's, the theory's luck is a real spread over group draws, and its stored report re-judges from its own runs."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from noloco.advice.forecast import DRAW_SEED
from noloco.studies import groups_luck as gl
from noloco.theory.config import OuterConfig

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"


def test_the_chi_square_range_is_the_central_95_percent_of_chi2_7_over_7():
    from scipy.stats import chi2

    assert gl.CHI2_RANGE == pytest.approx((chi2.ppf(0.025, 7) / 7, chi2.ppf(0.975, 7) / 7), abs=1e-3)


def _runs(measured_sd: float, theory_sd: float) -> list:
    rng = np.random.default_rng(1)
    logs = rng.normal(0.0, 1.0, len(gl.GROUPS_SEEDS))
    logs = (logs - logs.mean()) / logs.std(ddof=1) * measured_sd  # exactly this sd
    return [gl.GroupsRun(family="cpu-tiny", setting=gl.NAMES[0], groups_seed=g, measured=math.exp(v),
                         theory_sd=theory_sd) for g, v in zip(gl.GROUPS_SEEDS, logs)]


@pytest.mark.parametrize("measured, verdict", [(0.1, "agrees"), (0.3, "theory too narrow"),
                                               (0.03, "theory too wide")])
def test_the_verdict_compares_the_measured_variance_with_the_theorys(measured, verdict):
    (s,) = gl.judge(_runs(measured, 0.1))
    assert math.isclose(s.measured_sd, measured) and math.isclose(s.theory_sd, 0.1)
    assert math.isclose(s.variance_ratio, (measured / 0.1) ** 2) and s.verdict == verdict


def test_the_theorys_groups_luck_is_the_spread_over_group_draws(tmp_path):
    """On a run folder of known inputs: N 4 pairs spread over the draws (a positive, repeatable sd), and a single
    draw repeated has none."""
    from tests.test_forecast import config, write_run

    cfg = config(outer=OuterConfig(replicas=4, group_size=2, alpha=0.5, beta=0.7, gamma=0.7), outer_steps=16)
    write_run(tmp_path / "run", cfg)
    sd = gl.theory_luck(tmp_path / "run", draws=8)
    assert 0 < sd < 1 and sd == gl.theory_luck(tmp_path / "run", draws=8)
    assert gl.theory_luck(tmp_path / "run", draws=8, seeds=[DRAW_SEED] * 8) == 0


def test_the_stored_report_re_judges_from_its_runs():
    rep = gl.GroupsLuckReport.from_json(json.loads((DATA / "groups_luck.json").read_text()))
    assert len(rep.runs) == len(gl.FAMILIES) * len(gl.NAMES) * len(gl.GROUPS_SEEDS)
    assert gl.judge(rep.runs) == rep.settings
    assert rep.agree == sum(s.verdict == "agrees" for s in rep.settings)
    assert rep.holds == (rep.agree >= gl.AGREE_AT_LEAST)


def test_the_groups_luck_against_the_runs_own_groups_and_on_the_command_line(tmp_path, capsys):
    """Replayed along its own groups seed every time, a run has no groups luck (low = high = 1, sd 0); along others
    it spreads about its own; `noloco llm predict RUN --groups-luck` prints it, and refuses a run still going."""
    from noloco.advice.forecast import groups_luck
    from noloco.cli import main
    from tests.test_forecast import config, write_run

    cfg = config(outer=OuterConfig(replicas=4, group_size=2, alpha=0.5, beta=0.7, gamma=0.7), outer_steps=16, seed=3)
    write_run(tmp_path / "run", cfg)
    same = groups_luck(tmp_path / "run", seeds=[3] * 4)
    assert same.low == pytest.approx(1.0) and same.high == pytest.approx(1.0) and same.sd == pytest.approx(0.0, abs=1e-12)
    other = groups_luck(tmp_path / "run", draws=8)
    assert other.low < other.high and other.sd > 0 and other.own_rms == pytest.approx(same.own_rms)
    assert main(["llm", "predict", str(tmp_path / "run"), "--groups-luck"]) == 0
    assert "group sequences of other seeds" in capsys.readouterr().out
    write_run(tmp_path / "going", cfg, measured_to=10)
    assert main(["llm", "predict", str(tmp_path / "going"), "--groups-luck"]) == 3  # bad data
