"""The ensemble study's report that its figure reads from docs/data, as a typed record.

``hdee.json`` (``noloco llm ensemble``) is read once at the file edge with ``from_json`` (a wrong shape is a
DataError, the figure's "no study" placeholder) and written back with ``to_json`` unchanged, so the figure's
data stays the file's. Only what the figure reads is named; the rest is kept in ``extra``. The paper GPT and
routing studies' reports are :mod:`noloco.studies.reports`, beside the studies that write them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from noloco.infra.record import JsonRecord
from noloco.studies.reports import Estimate


@dataclass(frozen=True)
class MissingStudy(JsonRecord):
    """A study figure's data when the study's file is absent or of another shape: its path and what is wrong
    (the figure draws a placeholder naming both)."""

    path: str
    missing: str

    @classmethod
    def of(cls, data: dict) -> MissingStudy | None:
        """The record of a study figure's data when it says the study is missing, else None."""
        return cls.from_json(data) if "missing" in data else None


# ------------------------------------------------------------------ hdee.json


@dataclass(frozen=True)
class Communication(JsonRecord):
    """What one configuration sends during training."""

    bytes_per_replica: float


@dataclass(frozen=True)
class Domain(JsonRecord):
    name: str
    held_out: bool


@dataclass(frozen=True)
class HdeeSettings(JsonRecord):
    """The study's configurations (in the order drawn) and seeds."""

    configs: list
    seeds: list


@dataclass(frozen=True)
class Budget(JsonRecord):
    """The training FLOPs every configuration gets."""

    flops: float


@dataclass(frozen=True)
class HdeeReport(JsonRecord):
    """``hdee.json``: the domain-expert ensemble against the single-model methods at equal training FLOPs."""

    NESTED = {"per_domain": (dict, (dict, Estimate)), "averages": (dict, (dict, Estimate)),
              "communication": (dict, Communication), "domains": (list, Domain), "settings": HdeeSettings,
              "budget": Budget}

    per_domain: dict
    averages: dict
    communication: dict
    settings: HdeeSettings
    evaluated: list
    domains: list
    budget: Optional[Budget] = None
