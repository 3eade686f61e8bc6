"""The paper audit as text."""

from __future__ import annotations


import numpy as np

from noloco.theory.stability import TOLERANCE as TOL
from noloco.claims.paper_verdicts import APPROXIMATE, HOLDS, Audit, NA, Part

def _value(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    return f"{x:.4g}"


def _verdict(p: Part) -> str:
    if p.verdict == "approximate" and p.relative_error is not None:
        return f"approximate ({p.relative_error:.0%})"
    return p.verdict


def format_audit(report: Audit) -> str:
    """The audit as a table: one row per part (the headline first, the others indented), the direction it
    was judged in (the worst, where it covers several), its note below."""
    s = report.setting
    o, i, curv = s.outer, s.inner, s.curvatures
    where = f"curvature {curv[0]:g}: c = {s.c:.4g}, s2 = {s.s2:.4g}" if len(curv) == 1 else \
        f"{s.spectrum_count} directions, curvature {min(curv):g}..{max(curv):g}" + \
        (f" ({len(curv)} audited one by one)" if s.spectrum_count > len(curv) else "")
    lines = [f"setting: N={o.replicas} n={o.group_size} alpha={o.alpha:g} beta={o.beta:g} "
             f"gamma={o.gamma:g} {o.momentum} | inner SGD eta={i.lr:g} H={i.steps} sigma={i.noise:g} "
             f"| {where}, and the flat limit c -> 0 | seed {report.seed}"]
    rows = [("statement / part", "direction (worst)", "paper", "exact", "measured +- se (z)", "verdict")]
    notes = [None]
    for st in report.statements:
        for k, p in enumerate(st.parts):
            measured = "-" if p.measured is None else f"{_value(p.measured)} +- {_value(p.se)}" + (
                f" ({p.z:+.1f})" if p.z is not None and p.se else "")
            rows.append((st.id if k == 0 else f"  {p.label}", p.direction or "-", _value(p.paper), _value(p.exact),
                         measured, _verdict(p)))
            notes.append(f"{p.label}: {p.note}" if k == 0 and p.note else p.note or None)
    widths = [max(len(r[j]) for r in rows) for j in range(6)]
    for row, note in zip(rows, notes):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if note:
            lines.append(f"      {note}")
    held = [st.parts[0].verdict for st in report.statements]
    lines.append(f"headlines: {held.count('holds')} hold, {held.count('approximate')} approximate, "
                 f"{held.count('fails')} fail, {held.count(NA)} not applicable (of {len(held)}); verdict rule: holds "
                 f"<= {HOLDS:.0%}, approximate <= {APPROXIMATE:.0%} relative error; stability: a spectral radius "
                 f"within {TOL:g} of 1 is marginal; Monte Carlo z against the exact value; {report.seconds:.1f} s")
    return "\n".join(lines)
