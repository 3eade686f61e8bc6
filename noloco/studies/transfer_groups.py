"""``--as`` along N and n on fresh seeds: the transfer stepped along the groups its runs draw (the pilot replayed along
its own, the target along those its N and n draw from the same groups seed) and multiplied by tilt ** 0.18
(:func:`noloco.advice.forecast.transfer`), both set on the one-pilot study's seeds 0 to 4 along N and n (seen), judged
on seeds nobody had run when they were written.

The rules, written and committed before any of these runs was trained:

* the runs: the one-pilot study's layout and settings (:mod:`noloco.studies.one_pilot`, finished runs reused): for
  cpu-tiny and the Llama-style config, seeds :data:`SEEDS`, the pilot (N 4, pairs, alpha 0.5, beta 0.7, gamma 0.7,
  H 10), ``N8`` (N 8, pairs) and ``N8_n4`` (N 8, groups of 4), each trained whole: 12 runs;
* the predictions: the four transfers along N and n of :data:`noloco.studies.one_pilot.TRANSFERS` (N 4 to 8 and
  8 to 4, n 2 to 4 and 4 to 2 at N 8), ``noloco llm predict PILOT --as CHANGES``'s RMS weight_std over the second
  half against the target's measured one, trained with the pilot's seed; a prediction agrees within
  :data:`SPREAD_RULE` (15 %); a flagged prediction is not claimed;
* reported per family and axis: claimed, within 15 %, flagged, missed unflagged; beside them, labelled seen, every
  transfer of the one-pilot study's seeds 0 to 4 whose runs are in the folder (and seeds 1 and 2's targets of
  docs/data/one_pilot.json), under the same code. The goal: no unflagged miss, and most predictions claimed.
"""

from __future__ import annotations

from noloco.studies import one_pilot, transfers

SEEDS = (7, 8)
#: the seeds the correction was set on (seen): the development seed 0 and the validation seeds 1 to 4
SEEN_SEEDS = (0, 1, 2, 3, 4)
FAMILIES = one_pilot.FAMILIES
SPREAD_RULE = one_pilot.SPREAD_RULE
#: the transfers judged on the fresh seeds: along N and n, both ways
AXES = [(p, t, a) for p, t, a in one_pilot.TRANSFERS if a.split()[0] in ("N", "n")]
NAMES = sorted({p for p, _, _ in AXES} | {t for _, t, _ in AXES})


def train_missing(out, families=FAMILIES, seeds=SEEDS, progress: bool | None = None) -> None:
    """Every run of :data:`NAMES` for ``seeds`` not finished yet, trained whole with one torch thread."""
    import torch

    from noloco.infra.progress import Progress
    from noloco.studies.families import train_hf

    torch.set_num_threads(1)
    jobs = [(f, s, n) for s in seeds for f in families for n in NAMES]
    with Progress(len(jobs), "transfer-groups study", unit="run", show=progress) as bar:
        for f, s, n in jobs:
            if not one_pilot.finished(one_pilot.folder(out, f, n, s)):
                train_hf(one_pilot._hf_family(f), one_pilot.setting(n), s, one_pilot.folder(out, f, n, s))
            bar.update()


def seen(out, families=FAMILIES) -> list:
    """Every one-pilot transfer of :data:`SEEN_SEEDS` whose runs are in ``out``, then seeds 1 and 2's transfers whose
    target is not there, against docs/data/one_pilot.json's measured targets."""
    rows = [r for f in families for s in SEEN_SEEDS for p, t, axis in one_pilot.TRANSFERS
            if (r := transfers.as_row(out, f, s, p, t, axis)) is not None]
    have = {(r.family, r.seed, r.axis) for r in rows}
    return rows + [r for r in transfers.seen_rows(out, families) if (r.family, r.seed, r.axis) not in have]


def evaluate(out, families=FAMILIES, seeds=SEEDS) -> transfers.TransfersReport:
    rows = [r for f in families for s in seeds for p, t, axis in AXES
            if (r := transfers.as_row(out, f, s, p, t, axis)) is not None]
    old = seen(out, families)
    return transfers.TransfersReport(
        schema="transfer-groups", rules=transfers.RULES, families=list(families), seeds=list(seeds), rows=rows,
        **transfers.tables(rows, families), summary=transfers.counts(rows),
        seen=transfers.Seen(seeds=list(SEEN_SEEDS), note="seen: the correction was set on them", rows=old,
                            **transfers.tables(old, families), summary=transfers.counts(old)))


def run_study(out, train: bool = True, families=FAMILIES, seeds=SEEDS) -> transfers.TransfersReport:
    from noloco.studies.families import seeded_name, train_and_evaluate

    seeds = tuple(seeds)
    return train_and_evaluate(out, seeded_name("transfer_groups.json", seeds, SEEDS), train_missing, evaluate, train,
                              families, seeds)


def format_report(rep: transfers.TransfersReport) -> str:
    lines = [f"--as along N and n within {rep.rules.spread_tolerance:.0%}, a flagged prediction not claimed; "
             f"seeds {', '.join(map(str, rep.seeds))}",
             f"{'family':<9}{'seed':>5}  {'axis':<11}{'--as':>7}  {'verdict':<8} flags"]
    lines += [f"{r.family:<9}{r.seed:>5}  {r.axis:<11}{r.as_ratio:>7.3f}  {r.as_verdict:<8} "
              f"{transfers._flag_names(r.as_flags)}" for r in rep.rows]
    lines += [f"{f}: " + one_pilot.json_line(c.to_json()) for f, c in rep.by_family.items()]
    lines += [f"{f}, seen seeds: " + one_pilot.json_line(c.to_json()) for f, c in rep.seen.by_family.items()]
    return "\n".join(lines)


def markdown(rep: transfers.TransfersReport) -> str:
    """The table docs/advice.md shows: per family and axis, fresh and seen, the four counts."""
    out = ["| family | axis | fresh: ratios (claimed, within 15 %, flagged, missed) | seen seeds 0 to 4: the same |",
           "|---|---|---|---|"]
    for f in rep.families:
        for a, c in rep.by_axis[f].items():
            ratios = ", ".join(format(r.as_ratio, ".2f") for r in rep.rows if r.family == f and r.axis == a)
            s = rep.seen.by_axis[f].get(a)
            out.append(f"| {f} | {a} | {ratios} ({c.claimed}, {c.within}, {c.flagged}, {c.missed_unflagged}) | "
                       + (f"{s.claimed}, {s.within}, {s.flagged}, {s.missed_unflagged} of {s.predictions}" if s else "-")
                       + " |")
    return "\n".join(out)
