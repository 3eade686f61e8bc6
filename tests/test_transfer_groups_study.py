"""The transfer-groups study's rule and verdicts (noloco.studies.transfer_groups) on a fixture of synthetic run
folders in the one-pilot layout: the four transfers along N and n, a target measured at the predicted spread agrees,
one measured 1.3x off misses, a flagged one is not claimed; the seen seeds are counted apart."""

import pytest

from noloco.studies import one_pilot as O
from noloco.studies import transfer_groups as G
from noloco.theory.config import OuterConfig
from test_forecast import config, replayed_weight_std, write_run
from test_transfers_study import _run

SETTINGS = {O.PILOT: OuterConfig(replicas=4, group_size=2, alpha=0.5, beta=0.7, gamma=0.7),
            "N8": OuterConfig(replicas=8, group_size=2, alpha=0.5, beta=0.7, gamma=0.7),
            "N8_n4": OuterConfig(replicas=8, group_size=4, alpha=0.5, beta=0.7, gamma=0.7)}


def test_the_study_judges_the_n_axes_and_counts_the_seen_seeds_apart(tmp_path):
    from noloco.advice.forecast import transfer

    cfgs = {name: config(outer=outer, schedule="constant", warmup=20, seed=7, outer_steps=24) for name, outer in SETTINGS.items()}
    for name, cfg in cfgs.items():  # first the pilots, measured as their own groups replay them
        _run(tmp_path, name, cfg, replayed_weight_std(cfg, write_run(tmp_path / "ph" / name, cfg), own=True))
    predicted = {(p, t): transfer(O.folder(tmp_path, "fx", p, 7), **O._changes(p, t)) for p, t, _ in G.AXES}
    off = {"N up": 1.0, "N down": 1.3, "n up": 1.0, "n down": 1.0}
    # each target measures a constant spread: the prediction's second-half RMS over the factor off. A pilot is also a
    # target, so the second half of the pilots' rows is replaced: rebuilt per transfer, judged one at a time
    verdicts = {}
    for p, t, axis in G.AXES:
        _run(tmp_path, t, cfgs[t], [predicted[p, t].second_half_rms / off[axis]] * cfgs[t].outer_steps)
        row = G.transfers.as_row(tmp_path, "fx", 7, p, t, axis)
        verdicts[axis] = row.as_verdict
        assert row.as_ratio == pytest.approx(off[axis], rel=1e-6) or row.as_flags
        for name, cfg in cfgs.items():  # the pilots back as they were
            _run(tmp_path, name, cfg, replayed_weight_std(cfg, write_run(tmp_path / "ph" / name, cfg), own=True))
    flagged = {a for (p, t, a) in G.AXES if predicted[p, t].flags}
    assert flagged == {"n down"}  # tilt about 2 there: extrapolates
    assert verdicts == {"N up": "agrees", "N down": "misses", "n up": "agrees", "n down": "flagged"}
    rep = G.evaluate(tmp_path, families=("fx",), seeds=(7,))
    assert rep.by_family["fx"].predictions == 4 and rep.seen.rows == []  # seed 7 is not a seen seed
    assert set(rep.by_axis["fx"]) == {"N up", "N down", "n up", "n down"}
    assert "| fx | n down |" in G.markdown(rep)


@pytest.mark.slow
@pytest.mark.torch
def test_the_transfer_groups_study_reproduces_its_committed_fresh_verdicts(tmp_path):
    """`noloco llm study transfer-groups` from nothing (12 runs, about 15 to 30 minutes on two busy cores): every
    verdict of docs/data/transfer_groups.json's fresh seeds comes out again."""
    import json
    from pathlib import Path

    committed = G.transfers.TransfersReport.from_json(
        json.loads((Path(__file__).parents[1] / "docs" / "data" / "transfer_groups.json").read_text()))
    report = G.run_study(tmp_path)
    key = lambda r: (r.family, r.seed, r.axis)  # noqa: E731
    again = {key(r): r.as_verdict for r in report.rows}
    assert {key(r): r.as_verdict for r in committed.rows} == again
