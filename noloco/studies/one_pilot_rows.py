"""The one-pilot and tune-fresh studies' reports as typed records: what ``one_pilot.json`` and ``tune_fresh.json``
hold.

:mod:`noloco.studies.one_pilot` and :mod:`noloco.studies.tune_fresh` build these records and write them with
``to_json``; the tables read them (a report read from a file: ``from_json``). Field names are the JSON keys in the
order the studies have always written them: a judged pick's fields sit between a row's head and its tail, which the
classes below get by listing their parts as bases, tail first (a dataclass orders fields from the last base on).
Nothing here imports torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from noloco.infra.record import JsonRecord


@dataclass(frozen=True, kw_only=True)
class TransferRow(JsonRecord):
    """One transfer of the study: ``--as`` from the pilot to the target (and the fork's prediction where the
    target was forked), each against the target's measured spread (the transfer's diagnostics are absent from
    reports written before the transfer gave them)."""

    OPTIONAL_KEYS = ("fork_ratio", "fork_flags", "fork_verdict")

    family: str
    seed: int
    axis: str
    pilot: str
    target: str
    measured: float
    as_ratio: float
    as_flags: list
    pilot_replay_ratio: Optional[float] = None
    decay_factor: Optional[float] = None
    pilot_decay_factor: Optional[float] = None
    tilt: Optional[float] = None
    as_verdict: str
    fork_ratio: Optional[float] = None
    fork_flags: Optional[list] = None
    fork_verdict: Optional[str] = None


@dataclass(frozen=True)
class RankedSetting(JsonRecord):
    """A setting as the tuner ranked it from the pilot's forks."""

    setting: str
    predicted: float
    low: float
    high: float
    spread: float
    seconds: float


@dataclass(frozen=True)
class JudgedHead(JsonRecord):
    """Which family's pilot of which seed, judged on which seed's settings trained whole."""

    family: str
    pilot_seed: int
    judged_seed: int


@dataclass(frozen=True, kw_only=True)
class PickJudgement(JsonRecord):
    """The tuner's pick against the settings trained whole with another seed (:func:`~noloco.studies.one_pilot.
    judge_pick`); every field but ``pick`` absent where the pick was not trained yet."""

    NESTED = {"ranked": (list, RankedSetting)}

    pick: str
    predicted: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    measured: Optional[float] = None
    rank: Optional[int] = None
    settings: Optional[int] = None
    best: Optional[str] = None
    best_loss: Optional[float] = None
    median_loss: Optional[float] = None
    not_told_apart: Optional[int] = None
    better_than_median: Optional[bool] = None
    within_interval_of_best: Optional[bool] = None
    inside_interval: Optional[bool] = None
    cost_pilot_runs: Optional[float] = None
    ranked: Optional[list] = None

    def judgement(self) -> dict:
        """The judgement's own fields, to build a study's row from."""
        return {k: getattr(self, k) for k in PickJudgement._names()}


@dataclass(frozen=True, kw_only=True)
class _GridRuns(JsonRecord):
    grid_runs: int


@dataclass(frozen=True, kw_only=True)
class OnePilotTuner(_GridRuns, PickJudgement, JudgedHead):
    """A one-pilot study's tuner row: the head, the judgement, the grid's runs."""


@dataclass(frozen=True, kw_only=True)
class _FreshHead(JsonRecord):
    complete: bool
    missing: list
    grid_runs: int
    pilot_drop: float


@dataclass(frozen=True, kw_only=True)
class _FreshTail(JsonRecord):
    inside_own_interval: Optional[list] = None
    holds: Optional[bool] = None


@dataclass(frozen=True, kw_only=True)
class FreshTuner(_FreshTail, PickJudgement, _FreshHead, JudgedHead):
    """A tune-fresh row: the head, whether the grid is complete, the judgement (the pick only where it was not
    trained yet), how many settings fell inside their own intervals, and the verdict (None: not judged)."""

    OPTIONAL_KEYS = tuple(k for k in PickJudgement._names() if k != "pick") + ("inside_own_interval",)


@dataclass(frozen=True)
class LossRow(JsonRecord):
    """A forked setting's predicted final loss against its whole run of the same seed."""

    family: str
    seed: int
    setting: str
    measured: float
    predicted: float
    low: float
    high: float
    fork_lead: float
    pilot_final: float
    inside: bool


@dataclass(frozen=True)
class OnePilotSummary(JsonRecord):
    """The verdicts counted."""

    fork: dict
    as_on_forked_axes: dict
    as_all: dict
    claimed_with_forks: int
    loss_inside_interval: int
    loss_predictions: int
    tuner_holds: int
    tuner_judgements: int


@dataclass(frozen=True)
class StudyRules(JsonRecord):
    """The rules a study's verdicts follow, as written before its runs were trained."""

    OPTIONAL_KEYS = ("spread_tolerance",)

    spread_tolerance: Optional[float] = None
    tuner: str = ""


@dataclass(frozen=True)
class LossModel(JsonRecord):
    """The fork's loss model the fresh seeds judge: its gain and its interval per unit of the pilot's drop."""

    gain: float
    interval_per_drop: list


@dataclass(frozen=True)
class OnePilotReport(JsonRecord):
    """``one_pilot.json``."""

    NESTED = {"rules": StudyRules, "transfers": (list, TransferRow), "tuner": (list, OnePilotTuner),
              "losses": (list, LossRow), "summary": OnePilotSummary}

    schema: str
    rules: StudyRules
    families: list
    seeds: list
    fork_at: int
    fork_len: int
    transfers: list
    tuner: list
    losses: list
    summary: OnePilotSummary


@dataclass(frozen=True)
class FreshReport(JsonRecord):
    """``tune_fresh.json``."""

    NESTED = {"rules": StudyRules, "model": LossModel, "tuner": (list, FreshTuner)}

    schema: str
    rules: StudyRules
    model: LossModel
    families: list
    pilot_seed: int
    judged_seed: int
    tuner: list
    holds: int
    judged: int
