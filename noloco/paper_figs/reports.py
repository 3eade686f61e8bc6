"""The measured studies' reports that the figures read from docs/data, as typed records.

``paper_gpt.json`` (``noloco llm study paper``), ``routing.json`` (``noloco llm study routing``) and ``hdee.json``
(``noloco llm ensemble``): each read once at the file edge with ``from_json`` (a wrong shape is a DataError, the
figure's "no study" placeholder) and written back with ``to_json`` unchanged, so the figure's data stays the
file's. Only what the figures read is named; the rest of each report is kept in ``extra``. The studies that
write these live in the studies layer; their readers live here, beside the only code that reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from noloco.infra.record import JsonRecord


@dataclass(frozen=True)
class Estimate(JsonRecord):
    """A mean over seeds with its standard error (each a number, or a list of them per step or stage)."""

    mean: Any = None
    se: Any = None
    values: Optional[list] = None
    perplexity: Optional[float] = None


# ------------------------------------------------------------------ paper_gpt.json


@dataclass(frozen=True)
class Fig3b(JsonRecord):
    """The paper's Fig 3B: the weight spread against the learning rate over inner steps."""

    NESTED = {"weight_std_normalised": Estimate, "pearson": (dict, Estimate)}

    dp: int
    step: list
    lr: list
    warmup: int
    weight_std_normalised: Estimate
    pearson: dict
    paper_pearson: list
    pp: Optional[int] = None


@dataclass(frozen=True)
class PaperFig4(JsonRecord):
    """The paper's own reading of its Fig 4."""

    weight_std_ratio: float
    perplexity_ratio_max: float


@dataclass(frozen=True)
class Fig4(JsonRecord):
    """The paper's Fig 4: random over fixed routing, the spread's and the perplexity's ratios."""

    NESTED = {"weight_std_ratio": Estimate, "perplexity_ratio": Estimate, "paper": PaperFig4}

    dp: int
    pp: int
    step: list
    weight_std_ratio: Estimate
    perplexity_ratio: Estimate
    paper: PaperFig4


@dataclass(frozen=True)
class MethodCell(JsonRecord):
    """One method in one cell of Table 2: its final perplexity over seeds."""

    NESTED = {"perplexity": Estimate}

    perplexity: Estimate


@dataclass(frozen=True)
class Table2Cell(JsonRecord):
    """One (DP, PP) cell of Table 2, a :class:`MethodCell` per method."""

    NESTED = {"ddp": MethodCell, "diloco": MethodCell, "noloco": MethodCell}

    dp: int
    pp: int
    ddp: MethodCell
    diloco: MethodCell
    noloco: MethodCell


@dataclass(frozen=True)
class Table2(JsonRecord):
    NESTED = {"cells": (list, Table2Cell)}

    cells: list


@dataclass(frozen=True)
class PaperGptReport(JsonRecord):
    """``paper_gpt.json``: the paper's GPT experiments in miniature."""

    NESTED = {"fig3b": Fig3b, "fig4": Fig4, "table2": Table2}

    fig3b: Fig3b
    fig4: Fig4
    table2: Table2
    settings: dict


# ------------------------------------------------------------------ routing.json


@dataclass(frozen=True)
class RoutingRatio(JsonRecord):
    """One variant: its spread per stage, random over fixed routing, and its loss change."""

    NESTED = {"theta_std_random_over_fixed": Estimate, "val_loss_random_minus_fixed": Estimate}

    theta_std_random_over_fixed: Estimate
    val_loss_random_minus_fixed: Estimate


@dataclass(frozen=True)
class Skipping(JsonRecord):
    """One skip probability: the validation loss of the whole model and with half of the middle stages removed."""

    NESTED = {"val_loss": Estimate, "val_loss_half_removed": Estimate}

    val_loss: Estimate
    val_loss_half_removed: Estimate


@dataclass(frozen=True)
class RoutingSettings(JsonRecord):
    stages: int
    replicas: int


@dataclass(frozen=True)
class RoutingReport(JsonRecord):
    """``routing.json``: random against fixed routing per variant, and stage skipping per probability."""

    NESTED = {"settings": RoutingSettings, "ratios": (dict, RoutingRatio), "skipping": (dict, Skipping)}

    settings: RoutingSettings
    ratios: dict
    skipping: dict


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
