"""The study figures' placeholder record, for a study file that is absent or of another shape.

The studies' reports the figures read are beside the studies that write them: the paper GPT and routing
studies' in :mod:`noloco.studies.reports`, the ensemble's (``hdee.json``) in
:mod:`noloco.studies.ensemble.records`."""

from __future__ import annotations

from dataclasses import dataclass

from noloco.infra.record import JsonRecord


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
