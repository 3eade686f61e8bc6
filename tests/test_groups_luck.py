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
    assert len(rep.ranges) == len(gl.FAMILIES) * len(gl.RANGE_SEEDS) * len(gl.RANGE_TRANSFERS)
    assert all(len(r.targets) == len(gl.RANGE_SEEDS) - 1 and str(r.groups_seed) not in r.targets for r in rep.ranges)
    assert gl.judge_ranges(rep.ranges) == (rep.coverage, rep.range_holds)
    assert len(rep.fresh_ranges) == len(gl.FAMILIES) * len(gl.FRESH_RANGE_SEEDS) * len(gl.RANGE_TRANSFERS)
    assert {r.groups_seed for r in rep.fresh_ranges} == set(gl.FRESH_RANGE_SEEDS)
    assert gl.judge_ranges(rep.fresh_ranges) == (rep.fresh_coverage, rep.fresh_range_holds)
    from noloco.advice.forecast import GROUPS_RANGE_HELD

    # --as to the targets of each pilot's own groups seed, inside the printed interval as its axis's is today; the
    # fourth rule's share
    from noloco.advice.forecast import AS_INTERVAL, TRANSFER_ERROR

    label = {target: axis.split()[0] for pilot, target, axis in gl.one_pilot.TRANSFERS if pilot == gl.NAMES[0]}
    for r in rep.same_seed + rep.interval_seed + rep.own_order_seed:
        low, high = AS_INTERVAL.get((label.get(r.target), r.claimed), TRANSFER_ERROR)
        assert r.inside == (low <= r.ratio <= high), r
    assert len(rep.interval_seed) == len(gl.FAMILIES) * len(gl.INTERVAL_SEEDS) * (len(gl.NAMES) - 1)
    assert rep.interval_inside == sum(r.inside for r in rep.interval_seed)
    assert rep.interval_holds == (0.70 <= rep.interval_inside / len(rep.interval_seed) <= 0.90)
    assert len(rep.own_order_seed) == len(gl.FAMILIES) * len(gl.INTERVAL_RUNS) * (len(gl.NAMES) - 1)
    assert rep.own_order_inside == sum(r.inside for r in rep.own_order_seed)
    assert rep.own_order_holds == (0.70 <= rep.own_order_inside / len(rep.own_order_seed) <= 0.90)
    # what --groups-luck prints: the third and tenth rules' judgements, each set of fresh seeds apart, the held-out
    # families apart; the tenth rule's verdicts are its counts'
    def counted(coverage):
        return sum(j.inside for j in coverage), sum(j.pairs for j in coverage)

    replicated = [j for j in rep.replication_coverage if j.family in gl.FAMILIES]
    held_out = [j for j in rep.replication_coverage if j.family in gl.HELD_OUT]
    assert list(GROUPS_RANGE_HELD.values()) == [counted(rep.fresh_coverage), counted(replicated), counted(held_out)]
    assert len(rep.replication_ranges) == len(gl.FAMILIES + gl.HELD_OUT) * len(gl.REPLICATION_SEEDS) * len(
        gl.RANGE_TRANSFERS)
    assert (rep.replication_holds, rep.held_out_range_holds) == tuple(
        0.70 <= inside / pairs <= 0.90 for inside, pairs in (counted(replicated), counted(held_out)))


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


def test_the_ranges_coverage_counts_the_targets_inside_and_judges_the_share():
    def row(axis, targets):
        return gl.RangeRow(family="llama", groups_seed=50, axis=axis, predicted=2.0, low=0.8, high=1.25, flags=[],
                           targets={str(k): v for k, v in enumerate(targets)})

    axes = [axis for _, _, axis in gl.RANGE_TRANSFERS]
    wide = [row(axes[0], [1.7, 2.4, 2.6, 1.5]), *(row(a, [2.0] * 4) for a in axes[1:])]  # 2.6, 1.5 outside 1.6..2.5
    coverage, holds = gl.judge_ranges(wide)
    assert [(j.axis, j.pairs, j.inside) for j in coverage] == [(axes[0], 4, 2), *((a, 4, 4) for a in axes[1:])]
    assert holds  # 14 of 16 inside: 88 %
    assert not gl.judge_ranges([row(a, [2.0] * 4) for a in axes])[1]  # 100 %: a range too wide
    assert not gl.judge_ranges([row(a, [2.0, 2.0, 1.0, 3.0]) for a in axes])[1]  # 50 %: too narrow


def test_as_with_groups_luck_prints_the_targets_range_and_keeps_the_prediction(tmp_path, capsys):
    from noloco.advice import forecast as F
    from noloco.cli import main
    from tests.test_forecast import config, write_run

    cfg = config(outer=OuterConfig(replicas=4, group_size=2, alpha=0.5, beta=0.7, gamma=0.7), outer_steps=16, seed=3)
    write_run(tmp_path, cfg)
    plain, ranged = F.transfer(tmp_path, alpha=0.3), F.transfer(tmp_path, groups_draws=8, alpha=0.3)
    assert plain.groups_luck is None and ranged.second_half_rms == plain.second_half_rms
    assert 0 < ranged.groups_luck.low < ranged.groups_luck.high and ranged.groups_luck.draws == 8
    assert main(["llm", "predict", str(tmp_path), "--as", "alpha=0.3", "--groups-luck"]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("with another groups seed:")][0]
    # every fresh judgement of the range printed with its count and its verdict by the rule's shares
    assert "not claimed" in line and "405 of 448 (90.4 %, too wide) on seeds 90 to 97;" in line
    assert "291 of 448 (65.0 %, too narrow) on seeds 180 to 187;" in line
    assert main(["llm", "predict", str(tmp_path), "--forecast", "--groups-luck"]) == 2


@pytest.mark.slow
@pytest.mark.torch
def test_the_groups_luck_study_re_trains_cpu_tiny_bit_for_bit(tmp_path):
    """cpu-tiny's seven runs of groups seed 40 trained from nothing (about a minute on two cores): each run's measure
    and the theory's groups luck come out as docs/data/groups_luck.json has them."""
    pytest.importorskip("transformers")
    from noloco.studies import luck

    luck.train_data_orders(gl.groups_folder(tmp_path, 40), ("cpu-tiny",), gl.NAMES, (gl.DATA_SEED,), 40, progress=False)
    stored = {r.setting: r for r in gl.GroupsLuckReport.from_json(json.loads((DATA / "groups_luck.json").read_text())).runs
              if (r.family, r.groups_seed) == ("cpu-tiny", 40)}
    for name in gl.NAMES:
        path = gl.one_pilot.folder(gl.groups_folder(tmp_path, 40), "cpu-tiny", name, gl.DATA_SEED)
        assert gl.one_pilot._measured(path)[1] == stored[name].measured
        assert gl.theory_luck(path) == stored[name].theory_sd


def test_the_range_divides_the_groups_draws_by_the_transfers_own_error():
    """No error (an interval of width 0 at 1): about the draws' own 10 % and 90 % quantiles; an error centred above 1
    (the prediction high) moves the range down by it; a wider error widens the range on both sides."""
    import numpy as np

    from noloco.advice.forecast import with_transfer_error

    draws = np.exp(np.linspace(-0.3, 0.3, 32))
    bare = with_transfer_error(draws, (1.0, 1.0))
    assert bare == pytest.approx((np.quantile(draws, 0.1), np.quantile(draws, 0.9)), rel=0.005)  # 41 copies of each
    high = with_transfer_error(draws, (1.1, 1.1))
    assert high == pytest.approx((bare[0] / 1.1, bare[1] / 1.1), rel=1e-9)
    wide = with_transfer_error(draws, (0.9, 1.1))
    assert wide[0] < bare[0] and wide[1] > bare[1]
