"""The as-misses study (noloco/studies/as_misses.py): each rule's verdict can say each thing, and its stored report
re-judges from its own ratios."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from noloco.studies import as_misses as am
from noloco.studies.groups_luck import FAMILIES, SameSeedTransfer

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"


def _window_rows(wide: tuple) -> list:
    """Same-seed transfers of the sixth rule's targets, log ratios of sd 0.15 for ``wide`` and 0.04 for the rest, each
    family about its own mean (a family offset must not count)."""
    rng = np.random.default_rng(2)
    rows = []
    for family, offset in (("cpu-tiny", 0.0), ("llama", 0.3)):
        for target in am.WINDOW_TARGETS:
            logs = rng.normal(0.0, 1.0, len(am.WINDOW_RUNS))
            logs = (logs - logs.mean()) / logs.std(ddof=1) * (0.15 if target in wide else 0.04) + offset
            rows += [SameSeedTransfer(family=family, groups_seed=g, target=target, ratio=math.exp(v), claimed=True,
                                         inside=True) for (g, _), v in zip(am.WINDOW_RUNS, logs)]
    return rows


@pytest.mark.parametrize("wide, reading", [*((tuple(w), r) for r, w in am.READINGS.items()),
                                           (("g1",), "none"), ((), "none")])
def test_the_sixth_rule_names_the_reading_whose_wide_targets_are_the_wide_ones(wide, reading):
    targets, verdict = am.judge_window(_window_rows(wide))
    assert verdict == reading
    assert [t.verdict for t in targets] == ["wide" if t.target in wide else "narrow" for t in targets]
    assert all(math.isclose(t.sd, 0.15 if t.target in wide else 0.04) and t.transfers == 16 for t in targets)


@pytest.mark.parametrize("low, reading", [(("H10_T64", "H20_T32"), "tokens"), (am.TOKENS_TARGETS, "tokens"),
                                          (("H20_T32",), "H up"), (("H10_T64",), "none"), ((), "none")])
def test_the_seventh_rule_reads_the_low_targets(low, reading):
    rows = [SameSeedTransfer(family=f, groups_seed=g, target=t, ratio=(0.8 if t in low else 0.95) * (1 + 0.01 * g),
                                claimed=True, inside=True)
            for f in FAMILIES for g in range(8) for t in am.TOKENS_TARGETS]
    targets, verdict = am.judge_tokens(rows)
    assert verdict == reading
    assert [t.verdict for t in targets] == ["low" if t.target in low else "not low" for t in targets]


@pytest.mark.parametrize("median, verdict", [(0.95, "holds"), (1.07, "holds"), (0.91, "fails"), (1.09, "fails")])
def test_the_eighth_rule_holds_when_every_targets_median_lies_in_its_range(median, verdict):
    rows = [SameSeedTransfer(family=f, groups_seed=g, target=t, ratio=(median if t == "H10_T80" else 1.0)
                                * (1 + 0.001 * (g - 3.5)), claimed=True, inside=True)
            for f in FAMILIES for g in range(8) for t in am.CORRECTION_TARGETS]
    targets, got = am.judge_correction(rows)
    assert got == verdict
    assert [t.verdict for t in targets] == ["agrees" if t.target != "H10_T80" or verdict == "holds" else "disagrees"
                                            for t in targets]


@pytest.mark.parametrize("longer, missed, verdict", [(1.0, 0, "holds"), (1.0, 4, "holds"), (0.85, 0, "fails"),
                                                      (1.0, 5, "fails")])
def test_the_ninth_rule_holds_when_the_longer_targets_agree_and_the_claimed_hold(longer, missed, verdict):
    """Of 40 claimed transfers (five claimed targets at eight seeds) at most 4 may miss 15 %; a twice-the-tokens
    target's median outside CORRECTED_MEDIAN fails it; the short-run target (flagged) is not counted."""
    rows = []
    for g, _ in am.NEOX_RUNS:
        for t in am.NEOX_TARGETS:
            ratio = (longer if t in ("H10_T64", "H20_T32", "a0.3_T64") else 1.0) * (1 + 0.001 * (g - 153.5))
            rows.append(SameSeedTransfer(family=am.NEOX, groups_seed=g, target=t, ratio=ratio,
                                            claimed=t != "a0.5_b0.7_H20", inside=True))
    for i in range(missed):  # claimed transfers along beta and gamma beyond 15 %
        r = [r for r in rows if r.target in ("a0.5_b0.9_H10", "g1")][i]
        rows[rows.index(r)] = SameSeedTransfer(**{**r.to_json(), "ratio": 1.3})
    targets, got = am.judge_neox(rows)
    assert got == verdict and len(targets) == len(am.NEOX_TARGETS)


def test_the_stored_report_re_judges_from_its_ratios():
    """Every pilot-to-target pair of each rule's runs is in as_misses.json, and each rule's targets and verdict are
    its judge's on the stored ratios."""
    rep = am.AsMissesReport.from_json(json.loads((DATA / "as_misses.json").read_text()))
    for rows, spreads, verdict, judged, families, runs, targets in (
            (rep.window_seed, rep.window_targets, rep.window_verdict, am.judge_window, FAMILIES, am.WINDOW_RUNS,
             am.WINDOW_TARGETS),
            (rep.tokens_seed, rep.tokens_targets, rep.tokens_verdict, am.judge_tokens, FAMILIES, am.TOKENS_RUNS,
             am.TOKENS_TARGETS),
            (rep.correction_seed, rep.correction_targets, rep.correction_verdict, am.judge_correction, FAMILIES,
             am.CORRECTION_RUNS, am.CORRECTION_TARGETS),
            (rep.neox_seed, rep.neox_targets, rep.neox_verdict, am.judge_neox, (am.NEOX,), am.NEOX_RUNS,
             am.NEOX_TARGETS)):
        assert sorted((r.family, r.groups_seed, r.target) for r in rows) == sorted(
            (f, g, t) for f in families for g, _ in runs for t in targets)
        assert judged(rows) == (spreads, verdict)
