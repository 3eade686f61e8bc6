"""The paper audit's verdicts: a statement's parts (paper, exact, measured), their grading and the worst
direction (:mod:`noloco.claims.paper`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field


from noloco.claims.judge import TOLERANCE
from noloco.infra.files import SCHEMA_VERSION
from noloco.theory import stats
from noloco.theory.config import InnerConfig, OuterConfig
from noloco.theory.stability import TOLERANCE as TOL

#: relative error up to which the paper's form "holds" and "approximates" the exact value
HOLDS, APPROXIMATE = 0.01, 0.25
NA = "not applicable"
VERDICT_RULE = {"holds": f"relative error <= {HOLDS:.0%} (or a qualitative claim that is true)",
                "approximate": f"relative error <= {APPROXIMATE:.0%}", "fails": "otherwise (the reason in the note)",
                NA: "no stationary state to approximate, or a sufficient condition not met (counted apart)"}
#: eta * lambda * H of the decade over which a slope "as eta -> 0" is read
ASYMPTOTIC = (1e-6, 1e-5)




@dataclass(frozen=True)
class Part:
    """One comparison: the paper's value, the exact one, a measurement of the exact quantity (Monte
    Carlo or an independent computation; se 0 when deterministic), the verdict and the direction it was
    judged in (the worst one, where the part covers several)."""

    label: str
    paper: object           # a number, or a boolean for a qualitative claim
    exact: object
    measured: float | None
    se: float | None
    verdict: str
    note: str = ""
    relative_error: float | None = None
    z: float | None = None  # measured against the exact value at the point measured
    details: dict = field(default_factory=dict)
    direction: str = ""


@dataclass(frozen=True)
class Statement:
    id: str
    reference: str
    claim: str
    parts: tuple

    def as_dict(self) -> dict:
        head = dataclasses.asdict(self.parts[0])
        head.pop("label")
        return {"id": self.id, "reference": self.reference, "claim": self.claim, **head,
                "parts": [dataclasses.asdict(p) for p in self.parts]}


@dataclass(frozen=True)
class AuditSetting:
    """The setting audited, as the report writes it: the outer and inner configs, the worst direction's
    curvature, c and s2, kappa, the spectrum's size and the curvatures audited one by one."""

    outer: OuterConfig
    inner: InnerConfig
    curvature: float
    c: float
    s2: float
    kappa: float
    spectrum_count: int
    curvatures: list
    flat_limit: bool = True

    def to_json(self) -> dict:
        return {"outer": dataclasses.asdict(self.outer), "inner": dataclasses.asdict(self.inner),
                "curvature": self.curvature, "c": self.c, "s2": self.s2, "kappa": self.kappa,
                "spectrum_count": self.spectrum_count, "curvatures": self.curvatures, "flat_limit": self.flat_limit}


@dataclass(frozen=True)
class Audit:
    setting: AuditSetting
    statements: tuple
    seed: int
    quick: bool
    seconds: float

    def to_json(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "setting": self.setting.to_json(), "seed": self.seed, "quick": self.quick,
                "verdict_rule": VERDICT_RULE, "stability_tolerance": TOL, "seconds": self.seconds,
                "statements": [s.as_dict() for s in self.statements]}


def relative_error(paper: float, exact: float) -> float:
    if exact == 0:
        return 0.0 if paper == 0 else math.inf
    return abs(paper - exact) / abs(exact)


def _mc_note(note: str, z) -> str:
    if z is not None and abs(z) > TOLERANCE:
        return f"{note}; Monte Carlo disagrees with the exact theory (z = {z:.1f}): a finding".lstrip("; ")
    return note


def join_notes(*notes) -> str:
    return "; ".join(n for n in notes if n)


def graded(label: str, paper: float, exact: float, *, measured=None, se=None, at=None, note: str = "",
           details=None, direction: str = "") -> Part:
    """A numeric form against the exact value: the verdict from the relative error; ``at`` is the
    exact value at the point the measurement is taken, when that differs from ``exact``. An exact value
    that is not finite (no stationary state) makes the part ``not applicable``: nothing about the
    approximation was tested."""
    paper, exact = float(paper), float(exact)
    reference = exact if at is None else float(at)
    if measured is not None and not (math.isfinite(measured) and math.isfinite(se)):
        measured = se = None
        note = join_notes(note, "the Monte Carlo diverges (no finite estimate)")
    z = stats.z_score(measured, se, reference) if measured is not None else None
    if not math.isfinite(exact):
        verdict, err = NA, None
        note = join_notes("no stationary state: the exact value is unbounded, so the approximation has nothing to "
                     "approximate", note)
    elif not math.isfinite(paper):
        verdict, err = "fails", None
        note = join_notes("the paper's form is not finite (it predicts no stationary value; the exact value is finite)",
                     note)
    else:
        err = relative_error(paper, exact)
        verdict = "holds" if err <= HOLDS else "approximate" if err <= APPROXIMATE else "fails"
    return Part(label, paper, exact, measured, se, verdict, _mc_note(note, z), err, z, dict(details or {}),
                direction)


def agreement(label: str, paper: bool, exact: bool, *, sufficient: bool = False, measured=None,
              note: str = "", details=None, direction: str = "") -> Part:
    """A qualitative claim against the exact answer. ``sufficient``: the paper claims only that its
    condition implies the exact property; where the condition is not met it claims nothing, and the part
    is ``not applicable``."""
    paper, exact = bool(paper), bool(exact)
    if sufficient and not paper:
        verdict = NA
        note = join_notes(f"the condition is not met, so it claims nothing (exact: {'yes' if exact else 'no'}"
                     f"{'; the condition is not necessary' if exact else ''})", note)
    elif paper == exact:
        verdict = "holds"
    else:
        verdict = "fails"
        note = join_notes(f"the paper says {'yes' if paper else 'no'}, the exact theory {'yes' if exact else 'no'}", note)
    return Part(label, paper, exact, measured, None if measured is None else 0.0, verdict, note,
                details=dict(details or {}), direction=direction)


def summarise(parts: list, worst: Part, what: str) -> str:
    """How a form fared in several directions, the worst named."""
    if len(parts) < 2:
        return ""
    counts = ", ".join(f"{sum(p.verdict == v for p in parts)} {v}" for v in VERDICT_ORDER
                       if any(p.verdict == v for p in parts))
    return f"{what} in {len(parts)} directions ({counts}); worst: {worst.direction}"


VERDICT_ORDER = {"fails": 0, "approximate": 1, "holds": 2, NA: 3}


def pick_worst(parts: list) -> Part:
    """The applicable part with the largest relative error, a failure first; not applicable only where all are."""
    return min(parts, key=lambda p: (VERDICT_ORDER[p.verdict], -(p.relative_error or 0.0)))


def worst_part(parts: list, label: str, what: str) -> Part:
    """Of one form judged in several directions: the worst part (:func:`pick_worst`), relabelled, with how the
    others fared in its note."""
    worst = pick_worst(parts)
    return dataclasses.replace(worst, label=label, note=join_notes(summarise(parts, worst, what), worst.note))
