"""Numbers the docs quote from docs/data/*.json, read back from the files, so that a page that drifts from its
data fails. The agreement rule, fixed before the comparison: a quoted number with d decimals agrees when the
stored value is within half a unit of its last digit (the value rounded as the page rounds it); a count agrees
when it is equal. A table is found by its header row in any page under docs/, so it may move between pages."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")

#: the outer step across ranks (benchmark ``outer``): the header's first cells, the 4- and 2-rank files
RANKS_HEADER = "| mode | 4 ranks: median ms | x the floor P | 2 ranks: median ms |"
RANKS_FILES = ("outer_ranks4.json", "outer_ranks2.json")
#: the forecasts study's table of fresh seeds: the header's first cells; per row (its label) the seeds whose files'
#: summaries it adds up, each cell the sum of FORECASTS_KEYS in that order
FORECASTS_HEADER = "| fresh seeds (round) | forecasts | claimed | within 15 % | missed unflagged | would hold but flagged |"
FORECASTS_ROWS = {"6 (second round)": (6,), "9, 10 (third)": (9, 10), "11, 17 to 19 (fourth)": (11, 17, 18, 19),
                  "21, 22 (fourth; wider Llama, H100)": (21, 22), "23 to 25 (sixth; 23, 24 wider Llama, H200)": (23, 24, 25),
                  "26 to 29 (sixth)": (26, 27, 28, 29)}
FORECASTS_KEYS = ("forecasts", "claimed", "claimed_within", "missed_unflagged", "would_hold_flagged")
#: the setting-mean and groups-luck studies' runs, judged one folder at a time (the fourth round's claim; the eighth's)
FORECASTS_RUNS = ("forecasts_fresh_s56.json", "forecasts_fresh_s57.json", "forecasts_fresh_neox.json",
                  "forecasts_fresh_heldout.json", "forecasts_fresh_s59.json")
#: the families study's totals as the advice page words them: (pattern, what of families.json's summary)
FAMILIES_TOTALS = (
    (r"\*\*Own inputs: (\d+) of (\d+) within the rule\*\*", lambda s: (s["own"]["agree"], s["own"]["runs"])),
    (r"\*\*Transfers: (\d+) of (\d+) claimed agree\*\*",
     lambda s: (s["transfer"]["agree"], s["transfer"]["runs"] - s["transfer"]["flagged"])),
    (r"\*\*Gap: (\d+) of (\d+) claimed at N = 8 within a factor 2, (\w+) unflagged miss",
     lambda s: (s["gap"]["agree"], s["gap"]["runs"] - s["gap"]["flagged"], s["gap"]["misses_unflagged"])),
)
#: the setting-mean study's table on the advice page: its header's first cells; per row (the transfer's axis) the
#: counts of setting_mean.json's judgement of that transfer, in the table's order
SETTING_MEAN_HEADER = "| transfer | claimed | vs the mean: within, out |"
SETTING_MEAN_CELLS = (("claimed", "predictions"), ("mean_within", "mean_missed"), ("single_within", "single_missed"),
                      ("inside",))
#: the groups-luck study's table: its header's first cells; the rows' labels and their settings
GROUPS_LUCK_HEADER = "| setting | cpu-tiny: measured, theory | Llama: measured, theory |"
GROUPS_LUCK_ROWS = {"pilot (N 4, H 10)": "a0.5_b0.7_H10", "H 20": "a0.5_b0.7_H20", "H 5": "a0.5_b0.7_H5",
                    "alpha 0.3": "a0.3_b0.7_H10", "beta 0.9": "a0.5_b0.9_H10", "N 8": "N8", "N 8, n 4": "N8_n4"}
WORDS = {"no": 0, "none": 0, "one": 1, "two": 2, "three": 3}


def _data(name: str) -> dict:
    return json.loads((DOCS / "data" / name).read_text())


def _pages() -> str:
    return "\n".join(p.read_text() for p in sorted(DOCS.rglob("*.md")))


def table(text: str, header: str) -> list[list[str]]:
    """The body rows of the markdown table whose header row starts with ``header``, cells without bold."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(header)]
    assert len(starts) == 1, f"{len(starts)} tables start with {header!r} in docs/ (expected one)"
    rows = []
    for line in lines[starts[0] + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().replace("**", "") for cell in line.strip().strip("|").split("|")])
    return rows


def agrees(quoted: str, value: float) -> bool:
    """``quoted``'s leading number is ``value`` to the digits it shows."""
    match = NUMBER.search(quoted)
    if match is None:
        return False
    digits = match.group().partition(".")[2]
    return abs(float(match.group()) - value) <= 0.5 * 10 ** -len(digits) + 1e-12


def ranks_mismatches(text: str) -> list[str]:
    """Every cell of the across-ranks table that is not its benchmark files' number."""
    modes = [_data(name)["results"]["modes"] for name in RANKS_FILES]
    wrong = []
    for mode, ms4, x4, ms2, x2, mb in table(text, RANKS_HEADER):
        if not all(mode in m for m in modes):
            wrong.append(f"{mode}: not in {', '.join(RANKS_FILES)}")
            continue
        four, two = modes[0][mode], modes[1][mode]
        for what, quoted, value in (("4-rank ms", ms4, 1e3 * four["median_s"]), ("4-rank x", x4, four["x_floor_P"]),
                                    ("2-rank ms", ms2, 1e3 * two["median_s"]), ("2-rank x", x2, two["x_floor_P"]),
                                    ("MB", mb, four["bytes_sent_per_rank"] / 1e6)):
            if not agrees(quoted, value):
                wrong.append(f"{mode}, {what}: the page says {quoted}, the data {value:.4g}")
    return wrong


def forecasts_mismatches(text: str) -> list[str]:
    """Every count of the forecasts study's table of fresh seeds that is not the sum of its seeds' files."""
    wrong = []
    for label, *cells in table(text, FORECASTS_HEADER):
        runs = [name for name in FORECASTS_RUNS if name in label]
        if runs:  # the studies' runs judged one folder at a time: the file's rows summed
            doc = _data(runs[0])
            stored = [sum(r[doc["columns"].index(k)] for r in doc["rows"]) for k in FORECASTS_KEYS]
        elif label not in FORECASTS_ROWS:
            wrong.append(f"{label}: no seeds of the forecasts study are mapped to this row")
            continue
        else:
            summaries = [_data(f"forecasts_fresh{seed}.json")["summary"] for seed in FORECASTS_ROWS[label]]
            stored = [sum(s[k] for s in summaries) for k in FORECASTS_KEYS]
        quoted = [int(NUMBER.findall(cell.replace(",", ""))[0]) for cell in cells]
        if quoted != stored:
            wrong.append(f"{label}: the page says {quoted}, the data {stored}")
    return wrong


def setting_mean_mismatches(text: str) -> list[str]:
    """Every count of the setting-mean study's table that is not setting_mean.json's, and every transfer missing."""
    axes = {a["axis"]: a for a in _data("setting_mean.json")["axes"]}
    wrong, seen = [], set()
    for axis, *cells in table(text, SETTING_MEAN_HEADER):
        if axis not in axes:
            wrong.append(f"{axis}: not a transfer of setting_mean.json")
            continue
        seen.add(axis)
        for cell, keys in zip(cells, SETTING_MEAN_CELLS):
            quoted = [int(n) for n in NUMBER.findall(cell)][:len(keys)]
            if quoted != [axes[axis][k] for k in keys]:
                wrong.append(f"{axis}: the page says {cell.strip()}, the data {[axes[axis][k] for k in keys]}")
    wrong += [f"{axis}: not in the table" for axis in axes if axis not in seen]
    return wrong


def held_out_axes_mismatches(text: str) -> list[str]:
    """The setting-mean table's last column: per transfer, GPT-NeoX's and GPT-2's claimed and within counts from
    held_out_axes.json, and the study's totals as the paragraph under the table quotes them."""
    rep = _data("held_out_axes.json")
    counts = {(c["family"], c["axis"]): c for c in rep["counts"]}
    wrong = []
    for axis, *cells in table(text, SETTING_MEAN_HEADER):
        quoted = [int(n) for n in NUMBER.findall(cells[-1])]
        expected = [counts[f, axis][k] for f in ("neox", "gpt2") for k in ("claimed", "within")]
        if quoted != expected:
            wrong.append(f"{axis}: the page says {cells[-1].strip()}, the data {expected}")
    flat = " ".join(text.split())
    flagged = sum(c["flagged"] for c in rep["counts"])
    totals = (f"{rep['held']} of {rep['claimed']} claimed within 15 %",
              f"{sum(c['flagged_within'] for c in rep['counts'])} of the {flagged} flagged would have held")
    return wrong + [t for t in totals if t not in flat]


def groups_luck_mismatches(text: str) -> list[str]:
    """Every sd of the groups-luck study's table that is not groups_luck.json's, and every setting missing."""
    found = {(s["family"], s["setting"]): s for s in _data("groups_luck.json")["settings"]}
    wrong, rows = [], table(text, GROUPS_LUCK_HEADER)
    for label, *cells in rows:
        for family, cell in zip(("cpu-tiny", "llama"), cells):
            stored = found[family, GROUPS_LUCK_ROWS[label]]
            quoted = NUMBER.findall(cell)[:2]
            if not all(agrees(q, v) for q, v in zip(quoted, (stored["measured_sd"], stored["theory_sd"]))) or \
                    (stored["verdict"] != "agrees") != (stored["verdict"] in cell):
                wrong.append(f"{label}, {family}: the page says {cell}, the data {stored}")
    if sorted(label for label, *_ in rows) != sorted(GROUPS_LUCK_ROWS):
        wrong.append("the table's settings are not the study's")
    return wrong


def families_mismatches(text: str) -> list[str]:
    """Every total of the families study quoted on the advice page that is not families.json's."""
    summary = _data("families.json")["summary"]
    wrong = []
    for pattern, stored in FAMILIES_TOTALS:
        quoted = re.search(pattern, text)
        if quoted is None:
            wrong.append(f"{pattern}: no longer on any page in this wording")
        elif tuple(int(WORDS.get(n, n)) for n in quoted.groups()) != stored(summary):
            wrong.append(f"{quoted.group()}: families.json says {stored(summary)}")
    return wrong


def luck_mismatches(text: str) -> list[str]:
    """Every number of the luck study the advice page quotes ("The floor", the forecast's bullet) that is not
    luck.json's: each axis's `--as` and oracle RMS, each setting's luck, and the forecast's floor and seen RMS."""
    rep = _data("luck.json")
    flat = " ".join(text.split())
    quoted = {f"{a['axis']} {{}} vs {{}}": (a["transfer_rms"], a["oracle_rms"]) for a in rep["axes"]}
    names = {"a0.5_b0.7_H10": "pilot", "a0.5_b0.7_H20": "H 20", "a0.5_b0.7_H5": "H 5", "a0.7_b0.7_H10": "alpha 0.7",
             "a0.5_b0.9_H10": "beta 0.9"}
    half, late = rep["shares"]
    quoted |= {f"{names[k]} {{}}": (v,) for k, v in rep["luck_rms"].items()}
    quoted["scatter {} and {} in log about each other, the seen forecasts' error {} and {}"] = (
        half["floor_rms"], late["floor_rms"], half["seen_rms"], late["seen_rms"])
    wrong = []
    for form, values in quoted.items():
        pattern = re.escape(form).replace(r"\{\}", r"(-?[\d.]+)")
        found = re.search(pattern, flat)
        if found is None:
            wrong.append(f"{form!r}: not quoted in this form")
        elif not all(agrees(q, v) for q, v in zip(found.groups(), values)):
            wrong.append(f"{found.group()}: luck.json says {values}")
    return wrong


def what_misses_mismatches(text: str) -> list[str]:
    """The as-misses study's rules (the sixth to ninth) as the advice page quotes them: each target's sd (sixth) or
    median (seventh), the corrected medians' range and the count within 15 % (eighth), in order."""
    rep = _data("as_misses.json")
    start = text.index("**What makes `--as` miss along H up**")
    words = " ".join(text[start:text.index("\n\n", start)].split())
    sd = {t["target"]: t["sd"] for t in rep["window_targets"]}
    median = {t["target"]: t["median"] for t in rep["tokens_targets"]}
    corrected = [t["median"] for t in rep["correction_targets"]]
    within = sum(abs(r["ratio"] - 1) <= 0.15 for r in rep["correction_seed"])
    expected = [f"{sd['a0.5_b0.7_H20']:.3f} at H 20 and {sd['H10_T16']:.3f} at H 10 over 16",
                f"{sd['H20_T32']:.3f} at H 20 and {sd['g1']:.3f} at gamma 1 over 32",
                f"{median['H10_T64']:.3f} at H 10 over 64, {median['H20_T32']:.3f} at H 20 over 32; "
                f"{median['H10_T48']:.3f} at H 10 over 48",
                f"medians {min(corrected):.3f} to {max(corrected):.3f}",
                f"{within} of {len(rep['correction_seed'])} within 15 %"]
    claimed = [r for r in rep["neox_seed"] if r["claimed"]]  # the ninth rule's, on GPT-NeoX
    longer = [t["median"] for t in rep["neox_targets"] if t["verdict"] != "-"]
    expected += [f"{sum(abs(r['ratio'] - 1) <= 0.15 for r in claimed)} of {len(claimed)} claimed transfers within 15 %",
                 f"medians {min(longer):.3f} to {max(longer):.3f}"]
    return [e for e in expected if e not in words]


def gap_range_mismatches(text: str) -> list[str]:
    """The gap-range study as the advice page quotes it: the development runs' ranges, the fresh runs' counts inside
    and on the upper side (all families; cpu-tiny's at N 4), and the N 4 replication's pooled counts."""
    dev, rep, n4 = _data("gap_range_dev.json"), _data("gap_range.json"), _data("gap_range_n4.json")["cells"][0]
    start = text.index("**Its printed range, at N 4 and 8**")
    words = " ".join(text[start:text.index("\n\n", start)].split())
    ranges = {r["replicas"]: r for r in dev["ranges"]}
    cells = {(c["family"], c["replicas"]): c for c in rep["cells"]}
    r4, r8, a4, a8, tiny = ranges[4], ranges[8], cells["all", 4], cells["all", 8], cells["cpu-tiny", 4]
    expected = [f"upper side {n4['upper']} of {n4['judged']}, but **too wide** ({n4['inside']} inside)",
                f"{r8['low']:.2f} to {r8['high']:.2f} at N 8, {r4['low']:.2f} to {r4['high']:.2f} at N 4",
                f"{a8['inside']} of {a8['judged']} inside, {a8['upper']} of {a8['judged']} above its low end",
                f"{a4['inside']} of {a4['judged']} inside", f"upper side held {tiny['upper']} of {tiny['judged']}",
                f"{len(rep['rows'])} runs"]
    return [e for e in expected if e not in words]


def test_the_held_out_families_columns_are_held_out_axes_json():
    assert held_out_axes_mismatches(_pages()) == []


def test_the_as_track_record_quoted_is_as_track():
    """The advice page's and the README's `--as` track record per axis: AS_TRACK's claimed counts (and the page's
    flagged ones)."""
    from noloco.advice.forecast import AS_TRACK

    claimed = ", ".join(f"{axis} {held} of {n}" for axis, (n, held, _, _) in AS_TRACK.items())
    flagged = ", ".join(f"{axis} {held} of {n}" for axis, (_, _, n, held) in AS_TRACK.items() if n)
    page = " ".join((DOCS / "advice.md").read_text().split())
    assert f"claimed along {claimed}; flagged, {flagged}" in page
    assert f"along {claimed};" in " ".join((DOCS.parent / "README.md").read_text().split())


def test_the_gap_range_numbers_are_its_files():
    assert gap_range_mismatches(_pages()) == []


def test_what_makes_as_miss_is_as_misses_json():
    assert what_misses_mismatches(_pages()) == []


def test_the_luck_numbers_are_luck_json():
    assert luck_mismatches(_pages()) == []


def test_the_setting_mean_table_is_setting_mean_json():
    assert setting_mean_mismatches(_pages()) == []


def test_the_groups_luck_table_is_groups_luck_json():
    assert groups_luck_mismatches(_pages()) == []


def test_the_across_ranks_table_is_its_benchmark_files():
    assert ranks_mismatches(_pages()) == []


def test_the_forecasts_table_is_forecasts_json():
    assert forecasts_mismatches(_pages()) == []


def test_the_families_totals_are_families_json():
    assert families_mismatches(_pages()) == []


def test_the_forecast_claim_quoted_is_the_error_models():
    from noloco.advice import forecast as FC
    from noloco.studies.forecasts import stored_error_model

    wording = r"flagged `unsure` when its error model \(below\) puts forecast / measured at mu ± ([\d.]+) sigma beyond (\d+) %"
    quoted = re.search(wording.replace(" ", r"\s+"), _pages())
    assert quoted, "the page no longer quotes the forecast's claim in the form this test reads"
    assert (float(quoted[1]), int(quoted[2])) == (round(FC.CLAIM_Z, 2), round(100 * FC.CLAIM_TOLERANCE))
    assert FC.ERROR_MODEL.z == stored_error_model().z  # the fourth round's, which the stored studies claimed by


@pytest.mark.parametrize("check, old, new", [
    (ranks_mismatches, "| pairs: toolkit | 47.5 |", "| pairs: toolkit | 49.5 |"),
    (ranks_mismatches, "| 15.13 |\n", "| 15.2 |\n"),
    (forecasts_mismatches, "| 9, 10 (third) | 580 | 272 | 255 |", "| 9, 10 (third) | 580 | 272 | 254 |"),
    (families_mismatches, "**Transfers: 7 of 8 claimed agree**", "**Transfers: 8 of 8 claimed agree**"),
    (luck_mismatches, "H up 0.043 vs 0.043", "H up 0.045 vs 0.043"),
    (setting_mean_mismatches, "| N up | 24 of 24 | 21, 3 |", "| N up | 24 of 24 | 22, 2 |"),
    (groups_luck_mismatches, "| H 20 | 0.345, 0.303 |", "| H 20 | 0.345, 0.313 |"),
    (groups_luck_mismatches, "0.098, 0.314 (theory too wide)", "0.098, 0.314"),
    (families_mismatches, "factor 2, one unflagged miss", "factor 2, no unflagged miss"),
    (what_misses_mismatches, "0.838 at H 20 over 32", "0.839 at H 20 over 32"),
    (gap_range_mismatches, "held 14 of 16 (0.475", "held 15 of 16 (0.475"),
    (held_out_axes_mismatches, "| 18 | 6, 6; 6, 6 |", "| 18 | 6, 6; 6, 5 |"),
])
def test_a_page_that_drifts_from_its_data_fails(check, old, new):
    text = _pages()
    assert old in text, f"{old!r} is no longer on the page: choose another cell to alter"
    assert check(text) == [] and check(text.replace(old, new, 1))


@pytest.mark.parametrize("quoted, value, ok", [
    ("69.5", 69.54, True), ("69.5", 69.56, False), ("417", 416.52, True), ("2.7 (of the all-reduce)", 2.695, True),
    ("0.21", 0.2086, True), ("0.21", 0.2149, True), ("0.21", 0.2151, False), ("-", 1.0, False),
])
def test_agreement_is_to_the_digits_shown(quoted, value, ok):
    assert agrees(quoted, value) is ok


def test_the_clean_runs_alarm_counts_quoted_are_the_files():
    """The early warnings' clean-run totals on the run page and in the README. At the first checks: the earlier count
    (602) and the rows of warnings_clean_s55.json, with the alarms they hold. At today's: the warnings study's clean
    runs and the runs re-checked by --replay, with theirs."""
    rows = _data("warnings_clean_s55.json")["rows"]
    first = sum(bool(r[-1]) for r in rows), 602 + len(rows)
    study = _data("warnings.json")["summary"]
    replayed = [_data(f"warnings_replayed_{name}.json")
                for name in ("setting_mean", "groups_luck", "gap_range", "held_out_axes", "short_phase",
                             "gap_range_n4")]
    today = (study["false_alarms"] + sum(r["alarms"] for r in replayed),
             study["clean_runs"] + sum(len(r["runs"]) for r in replayed))
    for page in (DOCS / "own_run.md", DOCS.parent / "README.md"):
        text = " ".join(page.read_text().split())
        quoted = [(int(a), int(b.replace(",", ""))) for a, b in re.findall(r"(\d+) of (\d{1,3}(?:,\d{3})+|\d{3}) clean runs", text)]
        older = re.search(r"first checks[^.]*?(\d+) of (\d{1,3},\d{3})", text)
        assert older and (int(older[1]), int(older[2].replace(",", ""))) == first, page.name
        assert today in quoted, (page.name, quoted, today)


def test_the_forecasts_judged_on_the_setting_mean_and_groups_luck_runs_are_the_files():
    """The track-record bins of those runs and the README's count: the sums of
    forecasts_fresh_s56.json's rows (one `noloco llm study forecasts --fresh-seed` judgement each)."""
    doc = _data("forecasts_fresh_s56.json")
    col = {name: i for i, name in enumerate(doc["columns"])}
    total = {name: sum(r[col[name]] for r in doc["rows"]) for name in doc["columns"][3:]}
    text = " ".join((DOCS / "advice.md").read_text().split())  # the table's row: forecasts_mismatches
    bins = re.search(r"on those runs, (\d+) of (\d+) bins", text)
    assert bins and (int(bins[1]), int(bins[2])) == (total["track_bins_inside"], total["track_bins"])
    readme = " ".join((DOCS.parent / "README.md").read_text().split())
    quoted = re.search(r"(\d+) runs since: (\d+) of ([\d,]+);", readme)
    assert quoted and (int(quoted[1]), int(quoted[2]), int(quoted[3].replace(",", ""))) == (
        total["forecasts"] // 5, total["claimed"], total["forecasts"])
    # the eighth round's (forecasts_fresh_s57.json): runs, claimed of forecasts, within
    doc = _data("forecasts_fresh_s57.json")
    col = {name: i for i, name in enumerate(doc["columns"])}
    total = {name: sum(r[col[name]] for r in doc["rows"]) for name in doc["columns"][3:]}
    quoted = re.search(r"(\d+) fresh runs, (\d+) of ([\d,]+) claimed, (\d+) within", readme)
    assert quoted and [int(q.replace(",", "")) for q in quoted.groups()] == [
        total["forecasts"] // 5, total["claimed"], total["forecasts"], total["claimed_within"]]
