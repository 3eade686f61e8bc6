"""``--as`` along every outer axis on fresh seeds: the transfer's calibration by the pilot's own replay and its
``near the edge`` and ``short phase`` flags (:func:`noloco.advice.forecast.transfer`), set on the one-pilot study's
development seed (cpu-tiny seed 0), judged on seeds nobody had run when they were written.

The rules, written and committed before any of these runs was evaluated:

* the runs: the one-pilot study's (:mod:`noloco.studies.one_pilot`, same folder layout, finished runs reused): for
  cpu-tiny and the Llama-style config, seeds :data:`SEEDS`, the pilot (N 4, pairs, alpha 0.5, beta 0.7, gamma 0.7,
  H 10) and every target of :data:`noloco.studies.one_pilot.TRANSFERS` (alpha 0.3 / 0.7, beta 0.5 / 0.9, gamma
  0.35 / 1.0, H 5 / 20 at equal tokens, N 4 to 8 and 8 to 4, n 2 to 4 and 4 to 2 at N 8), each trained whole;
* each prediction is ``noloco llm predict PILOT --as CHANGES``'s RMS weight_std over the second half, against the
  target's measured one, trained with the pilot's seed: it agrees within :data:`SPREAD_RULE` (15 %); a flagged
  prediction is not claimed;
* reported per family and axis: claimed, within 15 %, flagged, missed unflagged. The goal: no unflagged miss, and
  most predictions claimed (the flags not the answer to every axis).

The tuner (``noloco llm tune FORKS --forks``, unchanged) is re-judged on the same fresh seeds under the one-pilot
study's rule (:func:`noloco.studies.one_pilot.tuner_rows`): the pilot of the first of :data:`TUNER_SEEDS` and its
28 forks, the pick judged on the 29 settings trained whole with the second; it holds when the pick's loss is below
the grid's median and within its interval's upper half-width of the grid's best.

A second fresh round (the rule written and committed before any of these runs was evaluated by ``--as``): the grid
trained whole with seed :data:`FRESH2_SEED` (its groups seed), per family ``--as`` from the pilot to each of its
one-axis neighbours in the grid (alpha 0.3 / 0.7, beta 0.5 / 0.9, gamma 0.35 / 1.0, H 5 / 20) and from each back to
the pilot (:data:`AXIS_TRANSFERS`), with the rule above (15 %, flagged = not claimed), the code unchanged;
reported per family and axis (:func:`judge_fresh`: ``noloco llm study transfers --out DIR --fresh-seed 6`` writes
``DIR/transfers_fresh6.json``). A transfer whose pilot or target is not in the folder is left out and listed.

A third fresh round, along H (the rule written and committed before any of its runs was read): the two-part noise
of :func:`noloco.advice.forecast.noise_transfer` (s2 and rho carried by the inner optimiser's first moment; before
it, s2 by the L2 ratio, rho kept) judged on seeds 12 and 13 of cpu-tiny and the Llama-style config, the pilot and its
H 5 and H 20 neighbours trained whole: ``--fresh-seed 12`` and ``13``, judged once, the H transfers there and back
(H up, H up back, H down, H down back; 8 per family), 15 %, flagged = not claimed, the flags unchanged; beside them the
code before the change on the same runs. The change holds if, over these 16 transfers, as many or more are within
15 % as before and no unflagged transfer misses that held before, and if the mean log ratio of the transfers that
double H (H up; H down, back) and of those that halve it (H up, back; H down) are each nearer 0 than before.

Seeds 1 and 2 of the one-pilot study were seen before the flags were written; they are re-judged here (``seen``):
their pilots trained again (:data:`SEEN_PILOTS`), their targets' measured spreads read from
docs/data/one_pilot.json (those runs are not kept), and labelled so.

The track record (the rule committed before any run of seed 28 was read): every fresh judgement of the grid's
seeds 6 and 9 to 27 (cpu-tiny, Llama and the wider Llama) re-run with the code as it is (``--fresh-seed S`` per
folder: docs/data/transfers_track.json), with the N and n judgements of noloco.studies.transfer_groups (seeds 7, 8,
18, 19, 25 to 27), counted per axis: claimed and of them within 15 %, flagged and of them within
(:func:`track_table`, :data:`noloco.advice.forecast.AS_TRACK`); ``--as`` along one axis prints its axis's. Judged
once on seed 28 (cpu-tiny and Llama: ``--fresh-seed 28`` and ``transfer-groups --seeds 18,28``): the share of its
claimed transfers within 15 %, pooled over the axes, lies within the range of the seen seeds' shares (seeds with at
least 10 claimed); reported per axis (:func:`judge_track`).

The interval per axis (the rule committed before any run of seed 29 was read): a transfer along one axis takes as its
80 % interval the 10 % and 90 % quantiles of predicted / measured over that axis's track-record judgements, claimed
or flagged as it is (:func:`interval_table`, :data:`noloco.advice.forecast.AS_INTERVAL`; before, the development
sweep's 0.94 to 1.09 for every transfer). Judged once on seed 29 (cpu-tiny and Llama: ``--fresh-seed 29`` and
``transfer-groups --seeds 18,29``): over its transfers along one axis, the count whose predicted / measured lies
inside its interval is within the binomial 95 % range for 80 % of them (:func:`judge_interval`), the count inside
the old interval beside it. The track record's rule above is judged again, unchanged, on seed 29.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Optional

from noloco.infra.record import JsonRecord
from noloco.studies import one_pilot
from noloco.studies.one_pilot_rows import OnePilotReport, OnePilotTuner

SEEDS = (3, 4)
#: the one-pilot study's validation seeds, seen before the calibration and the flags were written
SEEN_SEEDS = (1, 2)
FAMILIES = one_pilot.FAMILIES
SPREAD_RULE = one_pilot.SPREAD_RULE
#: every run a transfer needs: the pilots and the targets
NAMES = sorted({p for p, _, _ in one_pilot.TRANSFERS} | {t for _, t, _ in one_pilot.TRANSFERS})
#: the tuner's pilot seed (its forks) and the seed its pick is judged on (the grid trained whole)
TUNER_SEEDS = (3, 4)
#: the pilots of the transfers, trained again for the seen seeds
SEEN_PILOTS = sorted({p for p, _, _ in one_pilot.TRANSFERS})
#: the one-pilot study's report: the seen seeds' measured targets
SEEN_REPORT = Path(__file__).resolve().parents[2] / "docs" / "data" / "one_pilot.json"


#: the second fresh round's seed, and its transfers: the pilot to every one-axis neighbour but N and n, and back
FRESH2_SEED = 6
AXIS_TRANSFERS = [t for t in one_pilot.TRANSFERS if t[0] == one_pilot.PILOT and t[1] in one_pilot.grid() | one_pilot.AXES
                  and not t[1].startswith("N")]
AXIS_TRANSFERS += [(t, p, f"{axis}, back") for p, t, axis in AXIS_TRANSFERS]


@dataclass(frozen=True)
class Counts(JsonRecord):
    """Claimed, within the rule, flagged and missed unflagged, of some predictions' verdicts."""

    predictions: int
    claimed: int
    within: int
    flagged: int
    missed_unflagged: int


@dataclass(frozen=True)
class AsPrediction(JsonRecord):
    """One ``--as`` transfer from a pilot to a target against the target's measured RMS spread (the base of
    :class:`AsRow` and :class:`SeenRow`)."""

    family: str
    seed: int
    axis: str
    pilot: str
    target: str
    measured: float
    as_ratio: float
    as_flags: list
    as_verdict: str


@dataclass(frozen=True)
class AsRow(AsPrediction):
    """A transfer between two runs in the folder, with the transfer's diagnostics."""

    pilot_replay_ratio: Optional[float]
    decay_factor: Optional[float]
    pilot_decay_factor: Optional[float]
    tilt: Optional[float]
    average_ratio: float


@dataclass(frozen=True)
class SeenRow(AsPrediction):
    """A seen seed's transfer against the one-pilot study's measured target, with the verdict it had there."""

    old_as_ratio: float
    old_as_verdict: str
    pilot_replay_ratio: Optional[float]


class AnyAsRow:
    """Reads a row of a list that holds both kinds: a seen row carries its old verdict."""

    @staticmethod
    def from_json(obj: Any) -> AsPrediction:
        return (SeenRow if isinstance(obj, dict) and "old_as_ratio" in obj else AsRow).from_json(obj)


@dataclass(frozen=True)
class Rules(JsonRecord):
    """The rule a transfer is judged by: within ``spread_tolerance``, and what is claimed."""

    spread_tolerance: float
    claimed: str


#: a family's counts by axis, per family
_BY_AXIS = (dict, (dict, Counts))


@dataclass(frozen=True)
class Seen(JsonRecord):
    """The seen seeds' transfers, labelled so (``by_axis`` and ``summary``: the transfer-groups study's)."""

    OPTIONAL_KEYS = ("by_axis", "summary")
    NESTED = {"rows": (list, AnyAsRow), "by_family": (dict, Counts), "by_axis": _BY_AXIS, "summary": Counts}

    seeds: list
    note: str
    rows: list
    by_family: dict
    by_axis: Optional[dict] = None
    summary: Optional[Counts] = None


@dataclass(frozen=True)
class TrackJudgement(JsonRecord):
    """The track record judged on a fresh seed: its claimed transfers within 15 % (pooled over the axes), the seen
    seeds' range of that share and whether it lies inside; ``by_axis``: per axis, seen ``[claimed, held]`` and fresh
    ``[claimed, held]``."""

    seed: int
    claimed: int
    held: int
    seed_low: float
    seed_high: float
    inside: bool
    by_axis: dict


@dataclass(frozen=True)
class IntervalJudgement(JsonRecord):
    """The per-axis 80 % intervals judged on a fresh seed: of ``transfers``, ``inside`` their axis's interval (and
    ``inside_before`` the development sweep's one for all, TRANSFER_ERROR), the binomial 95 % range of the count
    inside for 80 % and whether it lies in it; ``by_axis``: per axis ``[transfers, inside, inside before]``."""

    seed: int
    transfers: int
    inside: int
    inside_before: int
    low: int
    high: int
    holds: bool
    by_axis: dict


@dataclass(frozen=True)
class TransfersReport(JsonRecord):
    """``transfers.json``, ``transfers_fresh6.json`` (``missing``, no tuner or seen) and ``transfer_groups.json``
    (no tuner): the transfers' verdicts, counted per family and axis. ``tuner`` holds
    :func:`noloco.studies.one_pilot.tuner_rows`' rows."""

    OPTIONAL_KEYS = ("missing", "tuner", "seen", "track", "interval")
    NESTED = {"rules": Rules, "rows": (list, AsRow), "by_family": (dict, Counts), "by_axis": _BY_AXIS,
              "summary": Counts, "tuner": (list, OnePilotTuner), "seen": Seen, "track": TrackJudgement,
              "interval": IntervalJudgement}

    schema: str
    rules: Rules
    families: list
    seeds: list
    rows: list
    missing: Optional[list] = None
    by_family: dict = field(default_factory=dict)
    by_axis: dict = field(default_factory=dict)
    summary: Optional[Counts] = None
    tuner: Optional[list] = None
    seen: Optional[Seen] = None
    track: Optional[TrackJudgement] = None  # the track record judged on a seed it did not see
    interval: Optional[IntervalJudgement] = None  # the per-axis interval's coverage on such a seed


RULES = Rules(spread_tolerance=SPREAD_RULE, claimed="a prediction without a flag")


def tables(rows: list, families, axes=None) -> dict:
    """``rows``' counts per family (``by_family``) and per family and axis (``by_axis``; ``axes``: their order,
    by default as the rows meet them)."""
    axes = list(dict.fromkeys(r.axis for r in rows)) if axes is None else axes
    return {"by_family": {f: counts([r for r in rows if r.family == f]) for f in families},
            "by_axis": {f: {a: counts([r for r in rows if r.family == f and r.axis == a]) for a in axes}
                        for f in families}}


def train_missing(out, families=FAMILIES, seeds=SEEDS, progress: bool | None = None) -> None:
    """Every run of :data:`NAMES` not finished yet, trained whole (no forks)."""
    from noloco.infra.progress import Progress
    from noloco.studies.families import train_hf

    jobs = [(f, s, n) for s in seeds for f in families for n in NAMES]
    jobs += [(f, s, n) for s in SEEN_SEEDS for f in families for n in SEEN_PILOTS]
    pilot_seed, judged = TUNER_SEEDS
    jobs += [(f, pilot_seed, "forks") for f in families]
    jobs += [(f, judged, n) for f in families for n in one_pilot.grid() | dict.fromkeys(("g0.35", "g1"))]
    with Progress(len(jobs), "transfers study", unit="run", show=progress) as bar:
        for f, s, n in jobs:
            if n == "forks":
                one_pilot.train_pilot(out, f, s)  # the pilot's forks (the pilot itself is one of the runs above)
            elif not one_pilot.finished(one_pilot.folder(out, f, n, s)):
                train_hf(one_pilot._hf_family(f), one_pilot.setting(n), s, one_pilot.folder(out, f, n, s))
            bar.update()


def counts(rows: list) -> Counts:
    """Claimed, within the rule, flagged and missed unflagged, of ``rows``' verdicts."""
    verdicts = [r.as_verdict for r in rows]
    return Counts(predictions=len(rows), claimed=sum(v != "flagged" for v in verdicts),
                  within=verdicts.count("agrees"), flagged=verdicts.count("flagged"),
                  missed_unflagged=verdicts.count("misses"))


def as_row(out, family: str, seed: int, pilot: str, target: str, axis: str) -> AsRow | None:
    """:func:`noloco.studies.one_pilot.as_row` along the runs' groups: these folders were trained with the groups
    seed ``seed`` but written before the observer recorded it, so it is passed to the transfer."""
    from noloco.advice.forecast import transfer

    if not (one_pilot.finished(one_pilot.folder(out, family, pilot, seed))
            and one_pilot.finished(one_pilot.folder(out, family, target, seed))):
        return None
    _, measured = one_pilot._measured(one_pilot.folder(out, family, target, seed))
    rep = transfer(one_pilot.folder(out, family, pilot, seed), seed=seed, **one_pilot._changes(pilot, target))
    ratio = rep.second_half_rms / measured
    return AsRow(family=family, seed=seed, axis=axis, pilot=pilot, target=target, measured=measured, as_ratio=ratio,
                 as_flags=rep.flags, as_verdict=one_pilot._verdict(ratio, rep.flags),
                 pilot_replay_ratio=rep.pilot_replay_ratio, decay_factor=rep.decay_factor,
                 pilot_decay_factor=rep.pilot_decay_factor, tilt=rep.tilt,
                 average_ratio=rep.second_half_rms_average / measured)


def seen_rows(out, families=FAMILIES, report=SEEN_REPORT) -> list[SeenRow]:
    """``--as`` of the seen seeds: from their pilots trained again in ``out``, against the targets' measured spreads
    in ``report`` (the one-pilot study's), each with the verdict it had there (``old_as_ratio``, ``old_as_verdict``)."""
    from noloco.advice.forecast import transfer
    from noloco.infra.files import read_json

    if not Path(report).exists():
        return []
    rows = []
    for r in OnePilotReport.from_json(read_json(report)).transfers:
        pilot = one_pilot.folder(out, r.family, r.pilot, r.seed)
        if r.family not in families or not one_pilot.finished(pilot):
            continue
        rep = transfer(pilot, seed=r.seed, **one_pilot._changes(r.pilot, r.target))
        ratio = rep.second_half_rms / r.measured
        rows.append(SeenRow(family=r.family, seed=r.seed, axis=r.axis, pilot=r.pilot, target=r.target,
                            measured=r.measured, as_ratio=ratio, as_flags=rep.flags,
                            as_verdict=one_pilot._verdict(ratio, rep.flags), old_as_ratio=r.as_ratio,
                            old_as_verdict=r.as_verdict, pilot_replay_ratio=rep.pilot_replay_ratio))
    return rows


def evaluate(out, families=FAMILIES, seeds=SEEDS) -> TransfersReport:
    rows = [r for f in families for s in seeds for p, t, axis in one_pilot.TRANSFERS
            if (r := as_row(out, f, s, p, t, axis)) is not None]
    seen = seen_rows(out, families)
    axes = list(dict.fromkeys(axis for _, _, axis in one_pilot.TRANSFERS))
    return TransfersReport(schema="transfers", rules=RULES, families=list(families), seeds=list(seeds), rows=rows,
                           **tables(rows, families, axes), summary=counts(rows),
                           tuner=[r for f in families for r in one_pilot.tuner_rows(out, f, TUNER_SEEDS)],
                           seen=Seen(seeds=list(SEEN_SEEDS), note="seen before the calibration and the flags were written",
                                     rows=seen, by_family={f: counts([r for r in seen if r.family == f]) for f in families}))


def judge_fresh(out, seed: int = FRESH2_SEED, families=FAMILIES) -> TransfersReport:
    """The second fresh round (module docstring): ``--as`` along :data:`AXIS_TRANSFERS` at ``seed``, nothing trained."""
    rows, missing = [], []
    for f in families:
        for p, t, axis in AXIS_TRANSFERS:
            row = as_row(out, f, seed, p, t, axis)
            rows.append(row) if row is not None else missing.append(f"{f} {p} -> {t}")
    axes = list(dict.fromkeys(axis for _, _, axis in AXIS_TRANSFERS))
    return TransfersReport(schema="transfers-fresh", rules=RULES, families=list(families), seeds=[seed], rows=rows,
                           missing=missing, **tables(rows, families, axes), summary=counts(rows),
                           **({} if seed in TRACK_SEEDS else judged_unseen(out, seed, rows)))


def judged_unseen(out, seed: int, rows: list) -> dict:
    """A seed the track record did not see, judged (module docstring): its ``track`` record and its ``interval``
    coverage, over ``rows`` and, where the folder holds it, the seed's rows of ``transfer_groups_s18_sSEED.json``
    (run ``transfer-groups --seeds 18,SEED`` first)."""
    from noloco.infra.files import read_json

    fresh = [JudgedTransfer.of(r) for r in rows]
    groups = Path(out) / f"transfer_groups_s18_s{seed}.json"
    if groups.exists():
        fresh += [JudgedTransfer.of(r) for r in TransfersReport.from_json(read_json(groups)).rows if r.seed == seed]
    return {"track": judge_track(fresh), "interval": judge_interval(fresh)}


def run_study(out, train: bool = True, families=FAMILIES, seeds=SEEDS, fresh_seed: int | None = None) -> TransfersReport:
    from noloco.infra.files import write_json
    from noloco.studies.families import train_and_evaluate

    if fresh_seed is not None:  # the families whose grid the folder holds
        report = judge_fresh(out, fresh_seed, one_pilot.families_in(out, fresh_seed) or families)
        write_json(Path(out) / f"transfers_fresh{fresh_seed}.json", report, indent=2)
        return report

    return train_and_evaluate(out, "transfers.json", train_missing, evaluate, train, families, seeds)


def _flag_names(flags: list) -> str:
    return ", ".join(f.split(":")[0] for f in flags) or "-"


def format_report(rep: TransfersReport) -> str:
    lines = [f"--as within {rep.rules.spread_tolerance:.0%}, a flagged prediction not claimed; seeds "
             f"{', '.join(map(str, rep.seeds))}",
             f"{'family':<9}{'seed':>5}  {'axis':<11}{'--as':>7}  {'verdict':<8} flags"]
    lines += [f"{r.family:<9}{r.seed:>5}  {r.axis:<11}{r.as_ratio:>7.3f}  {r.as_verdict:<8} "
              f"{_flag_names(r.as_flags)}" for r in rep.rows]
    lines += [f"{f}: " + one_pilot.json_line(c.to_json()) for f, c in rep.by_family.items()]
    lines += [f"tuner {r.family} pilot seed {r.pilot_seed} -> seed {r.judged_seed}: pick {r.pick} "
              f"predicted {r.predicted:.4f} [{r.low:.4f}, {r.high:.4f}], measured {r.measured:.4f} (rank "
              f"{r.rank} of {r.settings}; best {r.best} {r.best_loss:.4f}, median {r.median_loss:.4f}); "
              f"holds: {r.better_than_median and r.within_interval_of_best}" for r in rep.tuner or []]
    if rep.seen is not None:
        lines += [f"{f}, seeds {', '.join(map(str, rep.seen.seeds))} ({rep.seen.note}): " + one_pilot.json_line(c.to_json())
                  for f, c in rep.seen.by_family.items() if c.predictions]
    if rep.track is not None:
        t = rep.track
        lines.append(f"track record, seed {t.seed}: {t.held} of {t.claimed} claimed within 15%; the seen seeds "
                     f"{t.seed_low:.0%} to {t.seed_high:.0%}: {'inside' if t.inside else 'outside'}; per axis (seen "
                     f"claimed, held; fresh claimed, held): {t.by_axis}")
    if rep.interval is not None:
        i = rep.interval
        lines.append(f"80 % interval per axis, seed {i.seed}: {i.inside} of {i.transfers} inside (the binomial range "
                     f"{i.low} to {i.high}: {'holds' if i.holds else 'fails'}); inside the old one for all "
                     f"{i.inside_before}; per axis (transfers, inside, inside the old): {i.by_axis}")
    return "\n".join(lines)


def _verdicts(rows: list) -> str:
    return ", ".join(r.as_verdict + (f" ({_flag_names(r.as_flags)})" if r.as_flags else "") for r in rows)


def _count_rows(by_family: dict) -> list:
    return [f"| {f} | {c.predictions} | {c.claimed} | {c.within} | {c.flagged} | {c.missed_unflagged} |"
            for f, c in by_family.items()]


def markdown(rep: TransfersReport) -> str:
    """The tables docs/advice.md shows: per family and axis, the ratios per seed with their verdicts and flags."""
    out = ["| family | axis | pilot -> target | `--as` / measured per seed | verdicts (flags) |", "|---|---|---|---|---|"]
    by = {}
    for r in rep.rows:
        by.setdefault((r.family, r.axis, r.pilot, r.target), []).append(r)
    for (family, axis, pilot, target), rows in by.items():
        out.append(f"| {family} | {axis} | {pilot} -> {target} | {', '.join(format(r.as_ratio, '.3f') for r in rows)} "
                   f"| {_verdicts(rows)} |")
    out += ["", "| family | predictions | claimed | within 15 % | flagged | missed unflagged |",
            "|---|---|---|---|---|---|"] + _count_rows(rep.by_family)
    if rep.tuner:
        out += ["", "The tuner, its pick on the fresh seeds:", ""] + one_pilot.tuner_table(rep.tuner)
    seen = rep.seen
    if seen is not None and seen.rows:
        out += ["", f"Seeds {' and '.join(map(str, seen.seeds))}, {seen.note}:", "",
                "| family | axis | before: ratio per seed, verdicts | now: ratio per seed, verdicts (flags) |",
                "|---|---|---|---|"]
        by = {}
        for r in seen.rows:
            by.setdefault((r.family, r.axis), []).append(r)
        for (family, axis), rows in by.items():
            old = ", ".join(f"{r.old_as_ratio:.3f} {r.old_as_verdict}" for r in rows)
            out.append(f"| {family} | {axis} | {old} | {_verdicts(rows)} |")
        out += ["", "| family (seen seeds) | predictions | claimed | within 15 % | flagged | missed unflagged |",
                "|---|---|---|---|---|---|"] + _count_rows(seen.by_family)
    return "\n".join(out)


#: the track record's per-axis judgements (module docstring): the fresh rounds re-run with the code as it is
TRACK_FILE = SEEN_REPORT.parent / "transfers_track.json"
#: the transfer-groups studies' reports whose rows the track record adds (N and n)
TRACK_GROUPS = ("transfer_groups", "transfer_groups_s18_s19", "transfer_groups_s18_s25", "transfer_groups_s18_s26",
                "transfer_groups_s18_s27")
#: the least claimed transfers of one seed for its share held to count in the seen seeds' range; the seeds seen
TRACK_MIN_CLAIMED, TRACK_SEEDS = 10, tuple(range(28))


class JudgedTransfer(NamedTuple):
    """One judged ``--as`` as the track record counts it: its axis label (``alpha down``, ``H up, back``, ``N up``),
    predicted / measured ``ratio`` and ``verdict`` (agrees, misses or flagged)."""

    seed: int
    family: str
    label: str
    ratio: float
    verdict: str

    @property
    def axis(self) -> str:
        return self.label.split()[0]

    @property
    def within(self) -> bool:
        from noloco.studies.families import within

        return bool(within(self.ratio, SPREAD_RULE, relative=True))

    @property
    def claimed(self) -> bool:
        return self.verdict != "flagged"

    @classmethod
    def of(cls, row: AsPrediction) -> "JudgedTransfer":
        return cls(row.seed, row.family, row.axis, row.as_ratio, row.as_verdict)


def read_track_rows(held_out: bool = True, short_target_claimed: bool = True) -> list[JudgedTransfer]:
    """Every judged transfer of the track record, one per seed, family and axis label, as flagged today
    (:func:`flagged_today`); ``held_out``: with the held-out-axes study's GPT-NeoX and GPT-2 transfers (groups seeds
    170 to 175) and the short-phase study's (190 to 197), judged after :data:`noloco.advice.forecast.AS_INTERVAL` was
    set."""
    from noloco.infra.errors import DataError
    from noloco.infra.files import read_json

    data = read_json(TRACK_FILE)
    if list(data["columns"]) != list(JudgedTransfer._fields):
        raise DataError(f"{TRACK_FILE.name}: columns {data['columns']}, expected {list(JudgedTransfer._fields)}")
    rows = [JudgedTransfer(*row) for row in data["rows"]]
    for name in TRACK_GROUPS:
        rows += map(JudgedTransfer.of, TransfersReport.from_json(read_json(SEEN_REPORT.parent / f"{name}.json")).rows)
    if held_out:
        rows += [JudgedTransfer(r["groups_seed"], r["family"], r["axis"], r["ratio"],
                                "flagged" if r["flags"] else "agrees" if r["within"] else "misses")
                 for name in ("held_out_axes", "short_phase") for r in read_json(SEEN_REPORT.parent / f"{name}.json")["rows"]]
    unique = list({(r.seed, r.family, r.label): r for r in rows}.values())  # seed 18: every s18_*
    return flagged_today(unique, short_target_claimed)


def flagged_today(rows: list[JudgedTransfer], short_target_claimed: bool = True) -> list[JudgedTransfer]:
    """``rows`` as ``--as`` flags them today: a transfer to a target of fewer outer steps than
    :data:`noloco.advice.forecast.SHORT_RUN` (in the one-pilot grid, H up: H 20 over 16 outer steps) is flagged
    (``short run``), whatever it was when judged; one to a phase shorter than the inner Adam's memory from a pilot
    past it (H down: H 10 to 5), flagged ``short phase`` until the short-phase study and by nothing else (every
    held-out row's flags), is judged by its ratio (``short_target_claimed``; False: flagged, as it was when
    AS_INTERVAL was derived and judged). What AS_TRACK and AS_INTERVAL are derived from."""
    from noloco.advice.forecast import short_run
    from noloco.studies.families import within

    transfers = (*one_pilot.TRANSFERS, *AXIS_TRANSFERS)
    short = {label for _, target, label in transfers if short_run(one_pilot.setting(target))}
    memory = 10  # the plain loop's AdamW, beta1 0.9: 1 / (1 - beta1) inner steps
    cleared = {label for pilot, target, label in transfers
               if one_pilot.setting(target).inner_steps < memory <= one_pilot.setting(pilot).inner_steps}

    def today(r: JudgedTransfer) -> JudgedTransfer:
        if r.label in short:
            return r._replace(verdict="flagged")
        if short_target_claimed and r.label in cleared and r.verdict == "flagged":
            return r._replace(verdict="agrees" if within(r.ratio, SPREAD_RULE, relative=True) else "misses")
        return r

    return [today(r) for r in rows]


def read_interval_rows() -> list[JudgedTransfer]:
    """What :data:`noloco.advice.forecast.AS_INTERVAL` is derived from (groups-luck study, fourth rule): the track
    record's judged transfers and those of the setting-mean study (single runs, seeds 30 and 31, ``seed`` its groups
    seed times 10,000 plus the data order) and of the groups-luck study (a pilot to the targets of its own groups
    seed, the targets one axis away), as flagged today (:func:`flagged_today`) but for H down, flagged as it was when
    the interval was derived and judged (the fourth and fifth rules; the studies' stored inside counts hold to it)."""
    from noloco.infra.files import read_json
    from noloco.studies.families import within

    def judged(seed, family, label, ratio, flags):
        verdict = "flagged" if flags else "agrees" if within(ratio, SPREAD_RULE, relative=True) else "misses"
        return JudgedTransfer(seed, family, label, ratio, verdict)

    rows = read_track_rows(held_out=False, short_target_claimed=False)
    rows += [judged(p["groups_seed"] * 10_000 + p["data_seed"], p["family"], p["axis"], p["single_ratio"], p["flags"])
             for p in read_json(SEEN_REPORT.parent / "setting_mean.json")["predictions"]]
    label = {target: axis for pilot, target, axis in one_pilot.TRANSFERS if pilot == one_pilot.PILOT}
    rows += [judged(t["groups_seed"], t["family"], label[t["target"]], t["ratio"], not t["claimed"])
             for t in read_json(SEEN_REPORT.parent / "groups_luck.json").get("same_seed") or []
             if t["target"] in label]
    return flagged_today(rows, short_target_claimed=False)


def track_table(rows: list[JudgedTransfer]) -> dict:
    """:data:`noloco.advice.forecast.AS_TRACK` from judged transfers: per axis, ``(claimed, of them within 15 %,
    flagged, of them within)``."""
    from noloco.advice.forecast import AS_AXES

    out = {}
    for _, axis in AS_AXES:
        mine = [r for r in rows if r.axis == axis]
        claimed = [r for r in mine if r.claimed]
        flagged = [r for r in mine if not r.claimed]
        out[axis] = (len(claimed), sum(r.within for r in claimed), len(flagged), sum(r.within for r in flagged))
    return out


def interval_table(rows: list[JudgedTransfer]) -> dict:
    """:data:`noloco.advice.forecast.AS_INTERVAL` from judged transfers: per axis, claimed (True) or flagged, the
    10 % and 90 % quantiles of predicted / measured (rounded to 3 decimals)."""
    import numpy as np

    from noloco.advice.forecast import AS_AXES

    out = {}
    for _, axis in AS_AXES:
        for claimed in (True, False):
            ratios = [r.ratio for r in rows if r.axis == axis and r.claimed == claimed]
            if ratios:
                out[axis, claimed] = tuple(round(float(q), 3) for q in np.quantile(ratios, [0.1, 0.9]))
    return out


def judge_interval(fresh: list[JudgedTransfer]) -> IntervalJudgement:
    """The interval's rule (module docstring) on ``fresh``, one seed's judged transfers along one axis each."""
    from scipy.stats import binom

    from noloco.advice.forecast import AS_INTERVAL, TRANSFER_ERROR

    def inside(r, interval):
        return interval[0] <= r.ratio <= interval[1]

    mine = [r for r in fresh if (r.axis, r.claimed) in AS_INTERVAL]
    by_axis: dict = {}
    for r in mine:
        counts = by_axis.setdefault(r.axis, [0, 0, 0])
        counts[0] += 1
        counts[1] += inside(r, AS_INTERVAL[r.axis, r.claimed])
        counts[2] += inside(r, TRANSFER_ERROR)
    n = len(mine)
    k = sum(c[1] for c in by_axis.values())
    low, high = (int(x) for x in binom.interval(0.95, n, 0.8))
    return IntervalJudgement(seed=fresh[0].seed, transfers=n, inside=k, inside_before=sum(c[2] for c in by_axis.values()),
                             low=low, high=high, holds=low <= k <= high, by_axis=by_axis)


def judge_track(fresh: list[JudgedTransfer], seen: list[JudgedTransfer] | None = None) -> TrackJudgement:
    """The track record's rule (module docstring) on ``fresh`` (one seed's judged transfers)."""
    seen = read_track_rows() if seen is None else seen
    by_seed: dict = {}
    for r in seen:
        if r.claimed:
            by_seed.setdefault(r.seed, []).append(r)
    shares = [sum(r.within for r in rs) / len(rs) for rs in by_seed.values() if len(rs) >= TRACK_MIN_CLAIMED]
    claimed = [r for r in fresh if r.claimed]
    held = sum(r.within for r in claimed)
    table, fresh_table = track_table(seen), track_table(fresh)
    low, high = min(shares), max(shares)
    return TrackJudgement(seed=fresh[0].seed, claimed=len(claimed), held=held, seed_low=low, seed_high=high,
                          inside=bool(claimed) and low <= held / len(claimed) <= high,
                          by_axis={axis: [*table[axis][:2], *fresh_table[axis][:2]] for axis in table})
