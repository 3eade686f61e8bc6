"""The tuner's reports as typed records: ``noloco llm tune`` (many pilots) and ``noloco llm tune --forks`` (one
pilot and its forks), their rows, the pick and the cost.

:mod:`noloco.advice.tune` builds these records and writes them with ``to_json``; the formatters and the studies read
them as records (a report read from a file: ``from_json``). Field names are the JSON keys, in the order the tuner has
always written them. Nothing here imports torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from noloco.infra.record import JsonRecord


@dataclass(frozen=True)
class NetworkSetting(JsonRecord):
    """The network the synchronisations are costed on (:mod:`noloco.theory.comm`)."""

    latency: float
    bandwidth: float
    bytes_per_value: float


@dataclass(frozen=True)
class SkippedPilot(JsonRecord):
    """A pilot folder that could not be read, and why."""

    folder: str
    why: str


@dataclass(frozen=True)
class TuneRow(JsonRecord):
    """One piloted setting: what its pilots measured (means over seeds) and why it is excluded, if it is."""

    setting: str
    seeds: int
    method: str
    alpha: float
    beta: float
    gamma: float
    n: int
    H: int
    outer_steps: int
    excluded: list
    loss: float
    loss_se: float
    spread: float
    spread_se: float
    stability_margin: Optional[float]
    sync_seconds: float
    seconds_per_outer_step: float
    steps_to_target: Optional[float]
    time_to_target: Optional[float]
    seeds_reaching_target: int


@dataclass(frozen=True, kw_only=True)
class TuneResult(JsonRecord):
    """``noloco llm tune``: the settings ranked for the goal, the recommendation and its doubts (``skipped_pilots``
    absent from reports written before the tuner listed them)."""

    NESTED = {"network": NetworkSetting, "recommendation": TuneRow, "skipped_pilots": (list, SkippedPilot),
              "rows": (list, TuneRow)}
    OPTIONAL_KEYS = ("skipped_pilots", "promised_speedup", "promised_loss_change")

    goal: str
    reference: str
    target_loss: float
    compute_seconds_per_inner_step: float
    network: NetworkSetting
    max_spread: Optional[float]
    settings_compared: int
    recommendation: Optional[TuneRow]
    skipped_pilots: Optional[list] = None
    rows: list
    promised_speedup: Optional[float] = None
    promised_loss_change: Optional[float] = None
    not_sure: list = field(default_factory=list)


@dataclass(frozen=True)
class ForkRow(JsonRecord):
    """One setting ranked from a pilot's forks (``fork`` None: the pilot's own): its predicted final loss with the
    80 % interval, its predicted spread with the transfer's flags, and its wall time."""

    setting: str
    fork: Optional[str]
    alpha: float
    beta: float
    gamma: float
    n: int
    H: int
    outer_steps: int
    predicted: float
    low: float
    high: float
    fork_lead: float
    spread: float
    spread_flags: list
    seconds: float
    excluded: list


@dataclass(frozen=True)
class ForkCost(JsonRecord):
    """What the pilot and its forks cost, in pilot runs, against training every setting whole."""

    pilot_runs: float
    grid_runs_per_seed: int
    forks: int
    interval: str


@dataclass(frozen=True)
class ForkTuneResult(JsonRecord):
    """``noloco llm tune --forks``: the pilot's and its forks' settings ranked by predicted final loss."""

    NESTED = {"network": NetworkSetting, "recommendation": ForkRow, "rows": (list, ForkRow), "cost": ForkCost}

    pilot: str
    goal: str
    compute_seconds_per_inner_step: float
    pilot_drop: float
    network: NetworkSetting
    max_spread: Optional[float]
    settings_ranked: int
    recommendation: Optional[ForkRow]
    rows: list
    not_told_apart: list
    cost: ForkCost
