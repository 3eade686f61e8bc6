"""``--gap``'s printed range on run folders written by noloco.Observer, at N 4 and N 8 (docs/advice.md, "The loss
side").

Until this study ``--gap`` read such a folder at N 8 to 16 as an upper estimate with the range of the 32 runs it had
been judged on (0.94 to 3.38), and flagged every N 4 ``untested N``. On the Observer runs of the groups-luck and
setting-mean studies, none of which it had been set on, its ratio predicted / measured lay outside that range 19
times in 176 at N 8, unflagged, and at N 4 (1,093 runs) it was above 1 in 94 % of them: an upper estimate there too.

**The development** (:func:`development`, ``--development DIR,...``): every finished run at N 4 to 16 of the
studies' groups-seed layout (``DIR/gSEED/FAMILY/SETTING/sDATA``) under the folders given whose measured gap is resolved (no ``unresolved`` flag); the 5 % and 95 % quantiles of its predicted
/ measured at N 4 (N below 8) and at N 8 (8 and up) are :data:`noloco.advice.gap.OBSERVER_RANGES`, which ``--gap``
prints: the measured gap at most 1 / low times the prediction, and at least 1 / high of it, in 9 runs of 10.

**The rule**, committed before the fresh runs were trained: the runs of :data:`FRESH_RUNS` (groups seed, data
order), each family of :data:`FAMILIES` (GPT-2 held out of the development) at each setting of :data:`SETTINGS`
(two at N 4, two at N 8); a run flagged ``unresolved`` is not judged. The range **holds** when at each N the
printed range holds :data:`COVERAGE` of the judged runs of all families together (80 to 97 %: a 90 % range), and
on each family at each N the upper side (ratio >= low) holds on at least :data:`UPPER_SIDE` of its judged runs.

**Judged** (docs/data/gap_range.json): N 8 holds, 59 of 64 inside and every family's upper side 16 of 16; N 4
fails, 62 of 64 inside but cpu-tiny's upper side 14 of 16 (0.475 and 0.655, under 0.94). So below N 8 ``--gap``
prints its range flagged ``small N`` (:data:`noloco.advice.gap.SMALL_N_LOWEST`), not claimed.

**The second rule, the N 4 replication** (:func:`judge_replication`, ``--replication``), committed before its runs
were trained. The first rule's per-family upper side (at least 90 % of 16 runs) fails by chance about one time in
four at the development's own rate on cpu-tiny (29 of 516 below the low end, 5.6 %: two or more below of 16, 23 %),
so N 4 is judged again on three times the runs: the two N 4 settings at :data:`REPLICATION_RUNS` (groups seeds 200
to 215, data orders 10001 to 10016, never trained before), the four families, 128 runs, pooled with the first rule's
64 N 4 runs as judged (docs/data/gap_range.json, its two misses included): 48 per family. It **holds** under the
first rule's terms: the pooled share inside within :data:`COVERAGE`, and each family's upper side at least
:data:`UPPER_SIDE` of its judged runs. If it holds, ``--gap`` claims its range below N 8 (no ``small N`` flag); if
not, the flag stays.

**Judged** (docs/data/gap_range_n4.json): **fails, too wide**: 189 of 192 inside (98 %, above 97 %); the upper side
held on every family (cpu-tiny 46 of 48, the others 48 of 48), and every one of the 128 new runs lay above the low
end (1.03 to 9.62). The ``small N`` flag stays.

``noloco llm study gap-range --out DIR`` trains what is missing (finished runs reused) and writes
``DIR/gap_range.json``; with ``--replication``, the second rule's runs and ``DIR/gap_range_n4.json``.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noloco.advice.gap import OBSERVED_REPLICAS, replica_class
from noloco.infra.files import write_json
from noloco.infra.record import JsonRecord
from noloco.studies import one_pilot
from noloco.studies.luck import folder_study, groups_folder, train_runs

FAMILIES = ("cpu-tiny", "llama", "neox", "gpt2")
SETTINGS = (one_pilot.PILOT, "a0.3_b0.7_H10", "N8", "N8_n4")
FRESH_RUNS = tuple(zip(range(160, 168), range(7001, 7009)))
#: the second rule's: the N 4 settings only
REPLICATION_RUNS = tuple(zip(range(200, 216), range(10001, 10017)))
N4_SETTINGS = SETTINGS[:2]
#: the first rule's judged runs
JUDGED = Path(__file__).resolve().parents[2] / "docs" / "data" / "gap_range.json"
COVERAGE = (0.80, 0.97)
UPPER_SIDE = 0.90
#: the quantiles the printed range spans
QUANTILES = (0.05, 0.95)


@dataclass(frozen=True)
class DevRow(JsonRecord):
    """One development run: its folder below the one given, N, and --gap's predicted / measured."""

    run: str
    replicas: int
    ratio: float


@dataclass(frozen=True)
class DevRange(JsonRecord):
    """The printed range at one N: the 5 % and 95 % quantiles over its development runs."""

    replicas: int
    runs: int
    low: float
    high: float


@dataclass(frozen=True)
class Development(JsonRecord):
    """``gap_range_dev.json``: the development runs and the ranges they set."""

    NESTED = {"rows": (list, DevRow), "ranges": (list, DevRange)}

    schema: str
    unresolved: int
    rows: list
    ranges: list


def development(folders) -> Development:
    """The ratios of every finished Observer run at N 4 to 16 under ``folders`` and the ranges they set."""
    from noloco.advice.gap import equipartition_gap
    from noloco.infra.errors import DataError
    from noloco.infra.files import input_dir

    rows, unresolved = [], 0
    folders = [f for f in folders if str(f).strip()] or [""]  # "A,B," as "A,B"; "," names no folder (exit 2)
    for top in (input_dir(f, "--development") for f in folders):
        if not top.is_dir():
            raise DataError(f"--development {top}: no such folder")
        # whole runs of the groups-seed layout (a pilot's forks are partial runs); glob.glob follows the links
        # the studies' folders hold to others' runs, Path.glob (3.11) does not
        for result in sorted(map(Path, glob.glob(str(top / "g*" / "*" / "*" / "s*" / "result.json")))):
            gap = equipartition_gap(result.parent)
            if not (gap.observer and OBSERVED_REPLICAS[0] <= gap.replicas <= OBSERVED_REPLICAS[1]) or gap.ratio is None:
                continue  # not an Observer folder, or N outside 4 to 16
            if not gap.judged:  # a ratio, but not resolved
                unresolved += 1
                continue
            rows.append(DevRow(run=str(result.parent.relative_to(top)), replicas=gap.replicas, ratio=gap.ratio))
    ranges = []
    for n in (4, 8):
        ratios = [r.ratio for r in rows if replica_class(r.replicas) == n]
        if not ratios:
            where = "4 to 7" if n == 4 else "8 to 16"
            raise DataError(f"--development {', '.join(map(str, folders))}: no resolved noloco.Observer run at "
                            f"N {where} in the layout DIR/gSEED/FAMILY/SETTING/sDATA; the range at N {n} needs them")
        low, high = np.quantile(ratios, QUANTILES)
        ranges.append(DevRange(replicas=n, runs=len(ratios), low=round(float(low), 2), high=round(float(high), 2)))
    return Development(schema="noloco.gap_range_dev/1", unresolved=unresolved, rows=rows, ranges=ranges)


@dataclass(frozen=True)
class FreshRow(JsonRecord):
    """One fresh run's gap: judged unless unresolved; inside the printed range; on its upper side."""

    family: str
    setting: str
    groups_seed: int
    replicas: int
    ratio: float | None
    judged: bool
    inside: bool
    upper: bool


@dataclass(frozen=True)
class Cell(JsonRecord):
    """One family's (or ``all``) runs at one N: judged, inside the range, on its upper side."""

    family: str
    replicas: int
    judged: int
    inside: int
    upper: int


@dataclass(frozen=True)
class GapRangeReport(JsonRecord):
    """``gap_range.json``: the fresh runs, their counts per family and N, and the verdict."""

    NESTED = {"rows": (list, FreshRow), "cells": (list, Cell)}

    schema: str
    ranges: dict
    rows: list
    cells: list
    holds: bool


def train_missing(out, families=FAMILIES, runs=FRESH_RUNS, progress: bool | None = None,
                  settings=SETTINGS) -> None:
    """Every run of ``runs`` (groups seed, data order) x ``families`` x ``settings`` not finished in ``out``."""
    train_runs(out, families, settings, runs, progress=progress)


def judge(out, families=FAMILIES, runs=FRESH_RUNS, settings=SETTINGS) -> GapRangeReport:
    """The rule (module docstring) on the finished runs of ``runs`` x ``settings`` in ``out``."""
    from noloco.advice.gap import OBSERVER_RANGES, equipartition_gap
    from noloco.infra.errors import DataError

    rows = []
    for groups_seed, data_seed in runs:
        for family in families:
            for name in settings:
                path = one_pilot.folder(groups_folder(out, groups_seed), family, name, data_seed)
                if not one_pilot.finished(path):
                    raise DataError(f"{path}: not a finished run (train it: noloco llm study gap-range --out {out})")
                gap = equipartition_gap(path)
                low, high = OBSERVER_RANGES[replica_class(gap.replicas)]
                judged = gap.judged
                rows.append(FreshRow(family=family, setting=name, groups_seed=groups_seed, replicas=gap.replicas,
                                     ratio=gap.ratio, judged=judged, inside=judged and low <= gap.ratio <= high,
                                     upper=judged and gap.ratio >= low))
    cells = counted(rows, families, (4, 8))
    return GapRangeReport(schema="noloco.gap_range/1", ranges={str(n): list(r) for n, r in OBSERVER_RANGES.items()},
                          rows=rows, cells=cells, holds=verdict(cells))


def counted(rows: list[FreshRow], families, replicas) -> list[Cell]:
    """Per N of ``replicas``, the judged ``rows`` of all families together and of each."""
    cells = []
    for n in replicas:
        for family in ("all", *families):
            mine = [r for r in rows if replica_class(r.replicas) == n and family in ("all", r.family) and r.judged]
            cells.append(Cell(family=family, replicas=n, judged=len(mine), inside=sum(r.inside for r in mine),
                              upper=sum(r.upper for r in mine)))
    return cells


def judge_replication(out, families=FAMILIES, runs=REPLICATION_RUNS, first=None) -> GapRangeReport:
    """The second rule (module docstring): the N 4 runs of ``runs`` in ``out`` pooled with the first rule's N 4 rows
    as judged (``first``: a GapRangeReport; default the stored one)."""
    from noloco.infra.files import read_json

    first = GapRangeReport.from_json(read_json(JUDGED)) if first is None else first
    fresh = judge(out, families, runs, N4_SETTINGS)
    rows = [r for r in first.rows if replica_class(r.replicas) == 4] + fresh.rows
    cells = counted(rows, families, (4,))
    return GapRangeReport(schema="noloco.gap_range_n4/1", ranges=fresh.ranges, rows=rows, cells=cells,
                          holds=verdict(cells))


def verdict(cells: list[Cell]) -> bool:
    """The rule on the counts: every N's pooled share inside within :data:`COVERAGE`, each family's upper side at
    least :data:`UPPER_SIDE` (cells with no judged run say nothing)."""
    return all(COVERAGE[0] <= c.inside / c.judged <= COVERAGE[1] if c.family == "all" else
               c.upper >= UPPER_SIDE * c.judged for c in cells if c.judged)


def run_study(out, train: bool = True, development_folders=None,
              replication: bool = False) -> GapRangeReport | Development:
    """The fresh runs judged (trained first unless ``train`` is False), or with ``development_folders`` the
    development ranges of the runs under them (nothing trained): ``DIR/gap_range.json`` or
    ``DIR/gap_range_dev.json``; ``replication``: the second rule's, ``DIR/gap_range_n4.json``."""
    out = Path(out)
    if development_folders and replication:  # two different studies: neither silently dropped
        from noloco.infra.errors import ConfigError

        raise ConfigError("--development and --replication are two different actions; give one")
    if development_folders:
        dev = development(development_folders)
        write_json(out / "gap_range_dev.json", dev, indent=2)
        return dev
    if replication:
        return folder_study(out, train, lambda o: train_missing(o, runs=REPLICATION_RUNS, settings=N4_SETTINGS),
                            judge_replication, "gap_range_n4.json", indent=2)
    return folder_study(out, train, train_missing, judge, "gap_range.json", indent=2)


def format_report(rep: GapRangeReport | Development) -> str:
    if isinstance(rep, Development):
        return "\n".join(f"N {r.replicas}: {r.runs} resolved runs, predicted / measured {r.low:g} to {r.high:g} "
                         f"(5 and 95 %)" for r in rep.ranges) + f"\n{rep.unresolved} unresolved runs left out"
    lines = [f"N {c.replicas} {c.family}: {c.inside} of {c.judged} inside {rep.ranges[str(c.replicas)]}, upper side "
             f"{c.upper}" for c in rep.cells]
    return "\n".join(lines + [f"the range {'holds' if rep.holds else 'does not hold'} (rule: noloco/studies/"
                              "gap_range.py)"])
