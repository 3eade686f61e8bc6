"""What makes ``--as`` miss along H up, and the mend judged on GPT-NeoX (``noloco llm study as-misses``).

These four rules were written as the groups-luck study's sixth to ninth (:mod:`noloco.studies.groups_luck`, whose
runs' layout and same-seed transfers they share), each committed before any of its runs was trained; they live here
unchanged, and "the sixth rule" below is the first of them.

A sixth rule (written and committed before any of its runs was trained): what makes ``--as`` miss along H up. Over
the same-seed transfers of the groups-luck study's runs (416), the claimed ones to H 20 (16 outer steps at equal tokens) missed 15 %
9 of 80 times and every other target 5 of 288; the sd of log predicted / measured per family was 0.155 (cpu-tiny)
and 0.109 (Llama) at H 20, 0.038 to 0.062 at the other targets, and at H 20 it followed the target's own replay
error (correlation 0.75 on both families; read outside the package). Three readings, each naming the targets it
expects *wide*: **few outer steps** (the target's run is short in outer steps, its second half 8 of them), **groups
luck** (the target's spread moves with its groups by sd 0.19 to 0.26 in log by the theory, the other targets' 0.17
or less), **H changed**. The runs: the pilot and the targets :data:`WINDOW_TARGETS` (H 20 over 16 outer steps; H 10
over 16, a short run with H unchanged, groups sd 0.21 to 0.26; H 20 over 32, H changed in a long run, groups sd 0.11
to 0.15; gamma 1, a long run, groups sd 0.19 to 0.25), cpu-tiny and Llama, at :data:`WINDOW_RUNS` (groups seeds 120
to 127, each with a data order of its own, 3001 to 3008; never trained before): 80 runs, 64 same-seed transfers. A
target is *wide* when its sd of log predicted / measured (each family's about its own mean, the two variances
averaged: 14 degrees of freedom) is above :data:`WIDE_SD`, else *narrow*. The verdict: the reading of
:data:`READINGS` whose wide targets are exactly the wide ones, else *none*. What follows it: under few outer steps
``--as`` flags a target of fewer than 24 outer steps; under groups luck a target whose theory's groups sd is above
0.18; under H changed every H up; under none no new flag, and the docs say H up's misses are unexplained. Expected:
few outer steps.

A seventh rule (written and committed before any of its runs was trained, after the sixth was judged: few outer
steps). The sixth rule's H 20 over 32 outer steps was narrow but low: predicted / measured median 0.839, 9 of its
16 claimed transfers beyond 15 %, on both families (0.83 and 0.85), while H 20 over 16 ran 0.94. That target trains
twice the pilot's tokens. Two readings: **tokens** (the pilot's inputs are mapped onto the target by the share of
its schedule done, while the noise grows with training done, so a target trained longer than the pilot runs low)
and **H up** (the change of H itself, seen at 32 outer steps). The runs: the pilot and the targets
:data:`TOKENS_TARGETS` (H 10 over 64 outer steps: twice the tokens, H kept; H 20 over 32 again; H 10 over 48: 1.5
times the tokens), cpu-tiny and Llama, at :data:`TOKENS_RUNS` (groups seeds 130 to 137, each with a data order of
its own, 4001 to 4008; never trained before): 64 runs, 48 same-seed transfers. A target is *low* when the median of
its 16 predicted / measured is below :data:`LOW_MEDIAN`. The verdict: **tokens** when H 10 over 64 and H 20 over 32
are both low, **H up** when H 20 over 32 is low and H 10 over 64 is not, else *none*. What follows it: under tokens
``--as`` flags a target trained on more inner steps than the pilot (beyond 1.5 times where H 10 over 48 is not
low); under H up every H up; under none no new flag. Expected: tokens.

An eighth rule (written and committed before any of its runs was trained, after the seventh was judged: tokens, H
10 over 48 not low at 0.907). Fitted on the seventh rule's 48 transfers (least squares through 0 of log predicted /
measured on log of the tokens' ratio), the prediction runs low as the tokens' ratio to the power 0.24 (cpu-tiny
0.27, Llama 0.21); ``--as`` now multiplies a target trained longer than its pilot by that ratio to the power
:data:`noloco.advice.forecast.TOKENS_EXPONENT` (on the fitted runs 46 of 48 then within 15 %, every target's median
0.99 to 1.00). Judged on the targets :data:`CORRECTION_TARGETS` (H 10 over 40 and 80 outer steps: 1.25 and 2.5
times the tokens; H 20 over 48: 3 times, H changed; alpha 0.3 over 64: twice, another axis), cpu-tiny and Llama,
at :data:`CORRECTION_RUNS` (groups seeds 140 to 147, each with a data order of its own, 5001 to 5008; never trained
before): 80 runs, 64 same-seed transfers. A target agrees when the median of its 16 corrected predicted / measured
lies within :data:`CORRECTED_MEDIAN`; the correction holds when all four agree. What follows it: holds, the
correction stays and the ``more tokens`` flag moves to 3 times the tokens (the largest judged); fails, the
correction is removed and the flag stays at 1.5 times.

A ninth rule (written and committed before any of its runs was trained, after the eighth was judged): the sixth to
eighth rules' flag and correction, and the forecasts study's eighth round, on a family none of them was set on:
GPT-NeoX (:data:`NEOX`, Hugging Face's code, held out from every calibration). The pilot and the targets
:data:`NEOX_TARGETS` (H 20 over 16 outer steps: flagged short run; H 10 over 64, H 20 over 32 and alpha 0.3 over 64:
twice the tokens, corrected; beta 0.9 and gamma 1: claimed along other axes), at :data:`NEOX_RUNS` (groups seeds 150
to 157, each with a data order of its own, 6001 to 6008; never trained before): 56 runs, 48 same-seed transfers.
It holds when (i) at least :data:`NEOX_CLAIMED_HELD` of the claimed transfers lie within 15 %, (ii) each
twice-the-tokens target's median predicted / measured lies within :data:`CORRECTED_MEDIAN`, and (iii) of the
forecasts of the 56 runs (one ``noloco llm study forecasts --runs DIR --fresh-seed S`` per groups seed's folder) at
least 95 % of the claimed lie within 15 % and at least 20 % are claimed. Expected: it holds.

The sixth rule's verdict: few outer steps, as expected (sd 0.189 and 0.235 at H 20 and H 10 over 16 outer steps;
0.084 and 0.042 at H 20 over 32 and gamma 1), so ``--as`` flags a target of fewer than 24 outer steps (``short
run``). The seventh's: tokens, as expected (medians 0.849 at H 10 over 64 and 0.838 at H 20 over 32; H 10 over 48
not low at 0.907). The eighth holds (corrected medians 0.963 to 1.006), so the correction stays and the ``more
tokens`` flag is set at 3 times. The ninth holds: 40 of 40 claimed transfers within 15 %, the twice-the-tokens
medians 0.994 to 1.050, the forecasts 108 of 280 claimed, 107 within (docs/data/forecasts_fresh_neox.json); the
short-run target, flagged, held 8 of 8 on GPT-NeoX.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from noloco.advice.forecast import CLAIM_TOLERANCE
from noloco.infra.record import JsonRecord
from noloco.studies.groups_luck import FAMILIES, NAMES, SameSeedTransfer, same_seed_rows, target_tokens
from noloco.studies.luck import folder_study, train_runs

#: the sixth rule's targets (from the pilot), runs (groups seed, data order), its wide line and its readings' wide
#: targets
WINDOW_TARGETS = ("a0.5_b0.7_H20", "H10_T16", "H20_T32", "g1")
WINDOW_RUNS = tuple(zip(range(120, 128), range(3001, 3009)))
WIDE_SD = 0.085
READINGS = {"few outer steps": ("a0.5_b0.7_H20", "H10_T16"), "groups luck": ("a0.5_b0.7_H20", "H10_T16", "g1"),
            "H changed": ("a0.5_b0.7_H20", "H20_T32")}
#: the seventh rule's targets, runs, low line, and the tokens' ratio flagged where the 1.5 times target is not low
TOKENS_TARGETS = ("H10_T64", "H20_T32", "H10_T48")
TOKENS_RUNS = tuple(zip(range(130, 138), range(4001, 4009)))
LOW_MEDIAN = 0.9
#: the eighth rule's targets, runs, and the range a target's median corrected predicted / measured must lie in
CORRECTION_TARGETS = ("H10_T40", "H10_T80", "H20_T48", "a0.3_T64")
CORRECTION_RUNS = tuple(zip(range(140, 148), range(5001, 5009)))
CORRECTED_MEDIAN = (0.92, 1.08)
#: the ninth rule's family, targets, runs, and the share of its claimed transfers that must hold
NEOX = "neox"
NEOX_TARGETS = ("a0.5_b0.7_H20", "H10_T64", "H20_T32", "a0.3_T64", "a0.5_b0.9_H10", "g1")
NEOX_RUNS = tuple(zip(range(150, 158), range(6001, 6009)))
NEOX_CLAIMED_HELD = 0.9


@dataclass(frozen=True)
class TargetSpread(JsonRecord):
    """The sixth to eighth rules, one target: the sd of log predicted / measured over its same-seed transfers (the
    sixth rule's: each family about its own mean, the variances averaged), their median, and the rule's verdict on
    it: ``wide`` or ``narrow`` (:data:`WIDE_SD`), ``low`` or ``not low`` (:data:`LOW_MEDIAN`), ``agrees`` or
    ``disagrees`` (:data:`CORRECTED_MEDIAN`)."""

    target: str
    transfers: int
    sd: float
    median: float
    verdict: str


@dataclass(frozen=True)
class AsMissesReport(JsonRecord):
    """``as_misses.json``: each rule's same-seed transfers (``*_seed``), targets and verdict."""

    NESTED = {"window_seed": (list, SameSeedTransfer), "window_targets": (list, TargetSpread),
              "tokens_seed": (list, SameSeedTransfer), "tokens_targets": (list, TargetSpread),
              "correction_seed": (list, SameSeedTransfer), "correction_targets": (list, TargetSpread),
              "neox_seed": (list, SameSeedTransfer), "neox_targets": (list, TargetSpread)}

    schema: str
    window_seed: list  # the sixth rule's: WINDOW_TARGETS at WINDOW_RUNS
    window_targets: list
    window_verdict: str
    tokens_seed: list  # the seventh rule's: TOKENS_TARGETS at TOKENS_RUNS, uncorrected
    tokens_targets: list
    tokens_verdict: str
    correction_seed: list  # the eighth rule's: CORRECTION_TARGETS at CORRECTION_RUNS
    correction_targets: list
    correction_verdict: str
    neox_seed: list  # the ninth rule's: NEOX_TARGETS at NEOX_RUNS, GPT-NeoX
    neox_targets: list
    neox_verdict: str


def train_missing(out, families=FAMILIES, progress: bool | None = None) -> None:
    """Train every run of the four rules not finished in ``out``."""
    for kinds, runs, targets in ((families, WINDOW_RUNS, WINDOW_TARGETS), (families, TOKENS_RUNS, TOKENS_TARGETS),
                                 (families, CORRECTION_RUNS, CORRECTION_TARGETS), ((NEOX,), NEOX_RUNS, NEOX_TARGETS)):
        train_runs(out, kinds, (NAMES[0], *targets), runs, progress=progress)


def evaluate(out, families=FAMILIES) -> AsMissesReport:
    """The four rules' same-seed transfers, targets and verdicts (every run finished)."""
    fields = {}
    for prefix, kinds, runs, targets, judged in (
            ("window", families, WINDOW_RUNS, WINDOW_TARGETS, judge_window),
            ("tokens", families, TOKENS_RUNS, TOKENS_TARGETS, judge_tokens),
            ("correction", families, CORRECTION_RUNS, CORRECTION_TARGETS, judge_correction),
            ("neox", (NEOX,), NEOX_RUNS, NEOX_TARGETS, judge_neox)):
        rows = same_seed_rows(out, kinds, ((runs, targets),), tokens_corrected=prefix != "tokens")
        spreads, verdict = judged(rows)
        fields |= {f"{prefix}_seed": rows, f"{prefix}_targets": spreads, f"{prefix}_verdict": verdict}
    return AsMissesReport(schema="noloco.as_misses/1", **fields)


def judge_window(rows: list[SameSeedTransfer]) -> tuple[list[TargetSpread], str]:
    """The sixth rule on its same-seed transfers: each target wide or narrow, and the reading of :data:`READINGS`
    whose wide targets are exactly the wide ones (else ``none``)."""
    targets = []
    for target in WINDOW_TARGETS:
        mine = [r for r in rows if r.target == target]
        variances = [float(np.var(np.log([r.ratio for r in mine if r.family == f]), ddof=1))
                     for f in dict.fromkeys(r.family for r in mine)]
        sd = math.sqrt(float(np.mean(variances)))
        targets.append(TargetSpread(target=target, transfers=len(mine), sd=sd,
                                    median=float(np.median([r.ratio for r in mine])),
                                    verdict="wide" if sd > WIDE_SD else "narrow"))
    wide = {t.target for t in targets if t.verdict == "wide"}
    return targets, next((name for name, expected in READINGS.items() if set(expected) == wide), "none")


def _spreads(rows: list[SameSeedTransfer], targets, verdict) -> list[TargetSpread]:
    """Each of ``targets`` over its same-seed transfers in ``rows``: the sd of the log ratio, the median ratio, and
    ``verdict(target, median)``."""
    out = []
    for target in targets:
        ratios = [r.ratio for r in rows if r.target == target]
        median = float(np.median(ratios))
        out.append(TargetSpread(target=target, transfers=len(ratios), sd=float(np.std(np.log(ratios), ddof=1)),
                                median=median, verdict=verdict(target, median)))
    return out


def _agrees(median: float) -> str:
    return "agrees" if CORRECTED_MEDIAN[0] <= median <= CORRECTED_MEDIAN[1] else "disagrees"


def judge_tokens(rows: list[SameSeedTransfer]) -> tuple[list[TargetSpread], str]:
    """The seventh rule on its same-seed transfers: each target's median predicted / measured, low below
    :data:`LOW_MEDIAN`, and the reading."""
    targets = _spreads(rows, TOKENS_TARGETS, lambda _, median: "low" if median < LOW_MEDIAN else "not low")
    low = {t.target for t in targets if t.verdict == "low"}
    verdict = ("tokens" if {"H10_T64", "H20_T32"} <= low else "H up" if "H20_T32" in low else "none")
    return targets, verdict


def judge_correction(rows: list[SameSeedTransfer]) -> tuple[list[TargetSpread], str]:
    """The eighth rule on its same-seed transfers (the tokens' correction in them): each target's median within
    :data:`CORRECTED_MEDIAN` agrees; the correction holds when all do."""
    targets = _spreads(rows, CORRECTION_TARGETS, lambda _, median: _agrees(median))
    return targets, "holds" if all(t.verdict == "agrees" for t in targets) else "fails"


def judge_neox(rows: list[SameSeedTransfer]) -> tuple[list[TargetSpread], str]:
    """The ninth rule's transfer parts on its same-seed transfers: each target's median (the twice-the-tokens ones
    agree within :data:`CORRECTED_MEDIAN`), and ``holds`` when they all agree and at least
    :data:`NEOX_CLAIMED_HELD` of the claimed lie within 15 % (the forecasts' part is judged by the forecasts study)."""
    targets = _spreads(rows, NEOX_TARGETS, lambda target, median: _agrees(median) if target_tokens(target) > 1 else "-")
    claimed = [r for r in rows if r.claimed]
    held = sum(abs(r.ratio - 1) <= CLAIM_TOLERANCE for r in claimed)
    ok = all(t.verdict != "disagrees" for t in targets) and held >= NEOX_CLAIMED_HELD * len(claimed)
    return targets, "holds" if ok else "fails"


def run_study(out, train: bool = True) -> AsMissesReport:
    """Train what is missing (``train``), evaluate, and write ``out/as_misses.json``."""
    return folder_study(out, train, train_missing, evaluate, "as_misses.json")


def format_report(rep: AsMissesReport) -> str:
    lines = []
    for targets, verdict, which in ((rep.window_targets, rep.window_verdict, f"sixth, wide: sd above {WIDE_SD}"),
                                    (rep.tokens_targets, rep.tokens_verdict,
                                     f"seventh, low: median below {LOW_MEDIAN}"),
                                    (rep.correction_targets, rep.correction_verdict,
                                     f"eighth, agrees: median {CORRECTED_MEDIAN[0]} to {CORRECTED_MEDIAN[1]}"),
                                    (rep.neox_targets, rep.neox_verdict, "ninth, GPT-NeoX")):
        lines.append(f"what makes --as miss ({which} rule): each target's predicted / measured " + ", ".join(
            f"{t.target} sd {t.sd:.3f} median {t.median:.3f} ({t.verdict})" for t in targets)
            + f"; the reading: {verdict}")
    return "\n".join(lines)
