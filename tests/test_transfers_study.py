"""The transfers study's rule and verdicts (noloco.studies.transfers) on a fixture of synthetic run folders in the
one-pilot layout: a target measured at the predicted spread agrees, one measured 1.3x off misses, a flagged one is
not claimed, a target not trained is left out."""

import pytest

from noloco.infra.files import read_json, write_json
from noloco.studies import one_pilot as O
from noloco.studies import transfers as T
from test_forecast import _measured_as, config, replayed_weight_std, write_run


def _run(out, name: str, cfg, values):
    path = O.folder(out, "fx", name, 7)
    write_run(path, cfg)
    _measured_as(path, cfg, values)
    result = read_json(path / "result.json")
    write_json(path / "result.json", {**result, "finished": True})
    return path


def test_the_study_counts_agreements_misses_and_flags(tmp_path):
    from noloco.advice.forecast import transfer

    cfg = config(schedule="constant", warmup=20)
    pilot = _run(tmp_path, O.PILOT, cfg, replayed_weight_std(cfg, write_run(tmp_path / "ph", cfg)))
    predicted = {}
    for name in ("a0.3_b0.7_H10", "g0.35", "a0.5_b0.7_H20"):
        rep = transfer(pilot, **O._changes(O.PILOT, name))
        predicted[name] = rep.second_half_rms
    # the targets measure a constant spread: the prediction's second-half RMS times the factor off
    for name, off in (("a0.3_b0.7_H10", 1.0), ("g0.35", 1.3), ("a0.5_b0.7_H20", 1.0)):
        target = cfg if name != "a0.5_b0.7_H20" else config(schedule="constant", warmup=20, inner_steps=20,
                                                             outer_steps=16)
        _run(tmp_path, name, target, [predicted[name] / off] * target.outer_steps)
    rep = T.evaluate(tmp_path, families=("fx",), seeds=(7,))
    verdicts = {r.axis: r.as_verdict for r in rep.rows}
    assert verdicts == {"alpha down": "agrees", "gamma down": "misses", "H up": "flagged"}  # short run
    assert rep.rows[1].as_ratio == pytest.approx(1.3, rel=1e-6)
    assert rep.by_family["fx"].to_json() == {"predictions": 3, "claimed": 2, "within": 1, "flagged": 1,
                                             "missed_unflagged": 1}
    assert rep.by_axis["fx"]["H up"].flagged == 1 and rep.by_axis["fx"]["N up"].predictions == 0
    assert "| fx | 3 | 2 | 1 | 1 | 1 |" in T.markdown(rep)


@pytest.mark.slow
@pytest.mark.torch
def test_the_transfers_study_reproduces_its_committed_report(tmp_path):
    """`noloco llm study transfers` from nothing (about an hour and a half on two busy cores): every verdict of
    docs/data/transfers.json, the fresh seeds' and the seen seeds', and the tuner's pick come out again."""
    import json
    from pathlib import Path

    committed = T.TransfersReport.from_json(json.loads((Path(__file__).parents[1] / "docs" / "data" /
                                                        "transfers.json").read_text()))
    report = T.run_study(tmp_path)
    key = lambda r: (r.family, r.seed, r.axis)  # noqa: E731
    for part in (lambda rep: rep.rows, lambda rep: rep.seen.rows):  # the committed verdicts as flagged today
        again = {key(r): r.as_verdict for r in part(report)}
        today = T.flagged_today([T.JudgedTransfer.of(r) for r in part(committed)])
        assert all(again[r.family, r.seed, r.label] == r.verdict for r in today)
    assert [r["pick"] for r in report.to_json()["tuner"]] == [r["pick"] for r in committed.tuner]


def test_the_transfers_track_record_re_runs_from_its_files_and_is_judged_by_the_seen_seeds_range():
    """AS_TRACK is track_table of the stored judgements; a fresh seed whose claimed transfers all held is inside the
    seen seeds' range (it reaches 100 %), one whose claimed all missed is outside it."""
    from noloco.advice.forecast import AS_TRACK
    from noloco.studies import transfers as T

    seen = T.read_track_rows()
    assert T.track_table(seen) == AS_TRACK
    assert len({(r.seed, r.family, r.label) for r in seen}) == len(seen)
    fresh = [T.JudgedTransfer(99, "x", label, 1.0, "agrees")
             for label in ("alpha down", "beta up", "gamma up", "H up", "N up", "n up")] * 2
    judged = T.judge_track(fresh, seen)
    assert judged.inside and judged.seed_high == 1.0 and (judged.claimed, judged.held) == (12, 12)
    assert judged.by_axis["H"] == [*AS_TRACK["H"][:2], 2, 2]
    missed = T.judge_track([r._replace(ratio=1.3, verdict="misses") for r in fresh], seen)
    assert not missed.inside and missed.held == 0 and missed.seed_low > 0.8


def test_the_per_axis_interval_re_runs_from_the_track_record_and_is_judged_by_its_coverage():
    """AS_INTERVAL is interval_table of the stored judgements; a fresh seed with every ratio at 1 lies inside every
    interval (40 of 40: above the binomial range for 80 %, so the rule fails: too wide), one with 80 % inside holds."""
    from noloco.advice.forecast import AS_INTERVAL, TRANSFER_ERROR
    from noloco.studies import transfers as T

    assert T.interval_table(T.read_interval_rows()) == AS_INTERVAL
    labels = [("alpha down", "agrees"), ("alpha up", "flagged"), ("beta up", "agrees"), ("gamma up", "agrees"),
              ("H up", "agrees"), ("H down", "flagged"), ("N up", "agrees"), ("n down", "flagged")]
    fresh = [T.JudgedTransfer(99, "x", label, 1.0, verdict) for label, verdict in labels] * 5
    all_in = T.judge_interval(fresh)
    assert (all_in.transfers, all_in.inside, all_in.inside_before) == (40, 40, 40) and not all_in.holds
    assert all_in.by_axis["alpha"] == [10, 10, 10]
    outside = max(high for _, high in AS_INTERVAL.values()) + 0.01  # outside every axis's interval
    some_out = [r._replace(ratio=outside) if i < 8 else r for i, r in enumerate(fresh)]
    judged = T.judge_interval(some_out)
    assert judged.inside == 32 and judged.low <= 32 <= judged.high and judged.holds
    assert judged.inside_before == 32 + sum(TRANSFER_ERROR[0] <= outside <= TRANSFER_ERROR[1] for _ in range(8))
