"""The held-out-axes study: its counts per family and transfer, its verdict, and (slow) its first groups seed
re-trained bit for bit."""

import json
from pathlib import Path

import pytest

from noloco.studies import held_out_axes as H

STORED = Path(__file__).parents[1] / "docs" / "data" / "held_out_axes.json"


def _row(axis, ratio, flags=(), family="neox"):
    return H.AxisRow(family=family, groups_seed=170, axis=axis, ratio=ratio, flags=list(flags), claimed=not flags,
                     within=abs(ratio - 1) <= 0.15)


def test_each_transfer_is_counted_as_claimed_within_flagged_or_missed():
    """A claimed transfer within 15 % counts within, beyond it missed unflagged; a flagged one counts flagged, and
    within when it would have held; every transfer of the one-pilot study gets a row per family, empty or not."""
    rows = [_row("alpha down", 1.1), _row("alpha down", 0.8), _row("alpha up", 1.05, ["near the edge"]),
            _row("alpha up", 1.3, ["near the edge"]), _row("beta up", 0.9, family="gpt2")]
    counts = {(c.family, c.axis): c for c in H.counts(rows)}
    assert len(counts) == 2 * len(H.one_pilot.TRANSFERS)
    down, up = counts["neox", "alpha down"], counts["neox", "alpha up"]
    assert (down.transfers, down.claimed, down.within, down.flagged, down.missed_unflagged) == (2, 2, 1, 0, 1)
    assert (up.claimed, up.flagged, up.flagged_within, up.missed_unflagged) == (0, 2, 1, 0)
    assert counts["gpt2", "beta up"].within == 1 and counts["gpt2", "alpha down"].transfers == 0


@pytest.mark.parametrize("claimed, held, transfers, holds", [
    (100, 95, 144, True), (100, 94, 144, False), (72, 72, 144, True), (71, 71, 144, False), (0, 0, 144, False)])
def test_the_verdict_needs_95_percent_of_the_claimed_within_and_half_claimed(claimed, held, transfers, holds):
    assert H.verdict(claimed, held, transfers) is holds


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.usefixtures("one_torch_thread")  # one thread, as the study's runs were trained
def test_the_held_out_axes_study_re_trains_its_first_seed_bit_for_bit(tmp_path):
    """Training from nothing at the first groups seed (22 runs, about 4 minutes on two cores, one thread as the
    study's runs were trained): every transfer comes out as docs/data/held_out_axes.json has it, under today's
    flags."""
    pytest.importorskip("transformers")
    runs = H.RUNS[:1]
    H.train_missing(tmp_path, runs=runs, progress=False)
    again = [r.to_json() for r in H.evaluate(tmp_path, runs=runs).rows]
    stored = [r for r in json.loads(STORED.read_text())["rows"] if r["groups_seed"] == runs[0][0]]
    # judged when `short phase` flagged a target's short phase too: today H down carries no flag (short-phase study)
    assert again == [r | {"flags": [], "claimed": True} if r["axis"] == "H down" else r for r in stored]
