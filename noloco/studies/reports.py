"""The paper GPT and routing studies' reports as typed records: what ``paper_gpt.json`` and ``routing.json`` hold.

The studies build these records and write them with ``to_json``; the tables and the figures read them, a file
once, with ``from_json`` (a wrong shape is a DataError). Field names are the JSON keys and a record made in code
writes its fields in their declared order, so the files are what the studies wrote before they were typed.
Nothing here imports torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from noloco.infra.record import JsonRecord


@dataclass(frozen=True)
class Estimate(JsonRecord):
    """A mean over seeds with its standard error (each a number, or a list of them per step or stage)."""

    OPTIONAL_KEYS = ("values", "perplexity")

    mean: Any = None
    se: Any = None
    values: Optional[list] = None
    perplexity: Optional[float] = None


@dataclass(frozen=True)
class Trend(JsonRecord):
    """A paired per-seed difference judged by a rule fixed before the study ran (``below`` only where the rule
    has a second verdict)."""

    OPTIONAL_KEYS = ("below",)

    mean: float
    se: float
    values: list
    holds: bool
    below: Optional[bool] = None
    rule: str = ""


# ------------------------------------------------------------------ paper_gpt.json


@dataclass(frozen=True)
class PaperSettings(JsonRecord):
    """The study's plan and the model it trained."""

    quick: bool
    seeds: list
    preset: str
    inner_steps: int
    outer_steps: int
    warmup: int
    lr: float
    val_windows: int
    layers: int
    width: int
    heads: int
    ctx: int
    adam_beta2: float
    weight_decay: float
    clip: float
    min_lr_frac: float
    schedule: str
    n_params: int
    global_batch: int
    tokens_per_run: int
    dp: list
    pp: list
    noloco_outer: dict
    runs: int
    torch: Optional[str] = None
    python: Optional[str] = None


@dataclass(frozen=True)
class Correlations(JsonRecord):
    """Pearson r with the learning rate over seeds: of weight_std (after the outer step) and theta_std (before)."""

    NESTED = {"weight_std": Estimate, "theta_std": Estimate}

    weight_std: Estimate
    theta_std: Estimate


@dataclass(frozen=True)
class Fig3b(JsonRecord):
    """The paper's Fig 3B: the weight spread against the learning rate over inner steps."""

    NESTED = {"weight_std_normalised": Estimate, "weight_std": Estimate, "final_over_max": Estimate,
              "pearson": Correlations, "pearson_by_setting": (dict, Correlations)}

    dp: int
    pp: int
    warmup: int
    step: list
    lr: list
    weight_std_normalised: Estimate
    weight_std: Estimate
    peak_step: list
    final_over_max: Estimate
    pearson: Correlations
    pearson_by_setting: dict
    paper_pearson: list


@dataclass(frozen=True)
class ByRouting(JsonRecord):
    """One curve with fixed and with random routing."""

    NESTED = {"fixed": Estimate, "random": Estimate}

    fixed: Estimate
    random: Estimate


@dataclass(frozen=True)
class Peak(JsonRecord):
    step: int
    mean: float
    se: float


@dataclass(frozen=True)
class PaperFig4(JsonRecord):
    """The paper's own reading of its Fig 4."""

    weight_std_ratio: float
    perplexity_ratio_max: float


@dataclass(frozen=True)
class Fig4(JsonRecord):
    """The paper's Fig 4: random over fixed routing, the spread's and the perplexity's ratios (per stage: None
    with one stage)."""

    NESTED = {"weight_std_ratio": Estimate, "perplexity_ratio": Estimate, "weight_std_ratio_per_stage": Estimate,
              "weight_std": ByRouting, "perplexity": ByRouting, "weight_std_ratio_second_half": Estimate,
              "weight_std_ratio_second_half_per_stage": Estimate, "perplexity_ratio_final": Estimate,
              "perplexity_ratio_max": Peak, "paper": PaperFig4}

    dp: int
    pp: int
    step: list
    weight_std_ratio: Estimate
    perplexity_ratio: Estimate
    weight_std_ratio_per_stage: Optional[Estimate]
    weight_std: ByRouting
    perplexity: ByRouting
    weight_std_ratio_second_half: Estimate
    weight_std_ratio_second_half_per_stage: Optional[Estimate]
    perplexity_ratio_final: Estimate
    perplexity_ratio_max: Peak
    paper: PaperFig4


@dataclass(frozen=True)
class MethodCell(JsonRecord):
    """One method in one cell of Table 2: its routing and final values over seeds."""

    NESTED = {"perplexity": Estimate, "val_loss_replicas_mean": Estimate, "val_loss_avg_model": Estimate}

    routing: str
    perplexity: Estimate
    val_loss_replicas_mean: Estimate
    val_loss_avg_model: Estimate


@dataclass(frozen=True)
class PaperCell(JsonRecord):
    """The paper's Table 2 at one (DP, PP): its accelerators and perplexity per method on Reddit and C4."""

    accelerators: int
    reddit: dict
    c4: dict


@dataclass(frozen=True)
class Table2Cell(JsonRecord):
    """One (DP, PP) cell of Table 2, a :class:`MethodCell` per method, and noloco against diloco."""

    NESTED = {"paper": PaperCell, "ddp": MethodCell, "diloco": MethodCell, "noloco": MethodCell,
              "noloco_minus_diloco": Trend}

    dp: int
    pp: int
    paper: Optional[PaperCell]
    ddp: MethodCell
    diloco: MethodCell
    noloco: MethodCell
    noloco_minus_diloco: Trend

    def method(self, name: str) -> MethodCell:
        """The cell of method ``name`` (one of the study's table methods)."""
        return {"ddp": self.ddp, "diloco": self.diloco, "noloco": self.noloco}[name]


@dataclass(frozen=True)
class GapToDdp(JsonRecord):
    """One method at one PP: its gap to ddp, in percent, per DP, and whether it grows with DP."""

    NESTED = {"gap_percent": (list, Estimate), "steps": (list, Estimate), "largest_minus_smallest": Trend}

    method: str
    pp: int
    dp: list
    gap_percent: list
    steps: list
    largest_minus_smallest: Trend


@dataclass(frozen=True)
class ConfiguredRun(JsonRecord):
    """A method as the paper configured it, with its final values (DiLoCo names beta and the outer steps,
    NoLoCo its group size)."""

    NESTED = {"perplexity": Estimate, "val_loss_avg_model": Estimate}
    OPTIONAL_KEYS = ("beta", "outer_steps", "group_size")

    alpha: float
    beta: Optional[float] = None
    inner_steps: int = 0
    outer_steps: Optional[int] = None
    group_size: Optional[int] = None
    routing: str = ""
    perplexity: Optional[Estimate] = None
    val_loss_avg_model: Optional[Estimate] = None


@dataclass(frozen=True)
class PaperConfigs(JsonRecord):
    """The paper's DiLoCo and NoLoCo configurations at one (DP, PP), equal tokens."""

    NESTED = {"diloco": ConfiguredRun, "noloco": ConfiguredRun, "noloco_minus_diloco": Trend}

    dp: int
    pp: int
    diloco: ConfiguredRun
    noloco: ConfiguredRun
    noloco_minus_diloco: Trend


@dataclass(frozen=True)
class Table2(JsonRecord):
    NESTED = {"cells": (list, Table2Cell), "gap_to_ddp": (dict, GapToDdp), "paper_configs": PaperConfigs}

    cells: list
    gap_to_ddp: dict
    paper_configs: PaperConfigs


@dataclass(frozen=True)
class PaperGptReport(JsonRecord):
    """``paper_gpt.json``: the paper's GPT experiments in miniature."""

    NESTED = {"settings": PaperSettings, "fig3b": Fig3b, "fig4": Fig4, "table2": Table2}

    schema: str
    settings: PaperSettings
    train_wall_s: float
    this_call_s: float
    fig3b: Fig3b
    fig4: Fig4
    table2: Table2


# ------------------------------------------------------------------ routing.json


@dataclass(frozen=True)
class RoutingSettings(JsonRecord):
    """The runs' shared settings (the cpu-small preset, then these), the seeds and what was removed."""

    replicas: int
    layers: int
    heads: int
    width: int
    ctx: int
    batch: int
    inner_steps: int
    outer_steps: int
    warmup: int
    eval_every: int
    val_windows: int
    stages: int
    seeds: list
    skip_probs: list
    removed_halves: list


@dataclass(frozen=True)
class Spread(JsonRecord):
    """One run name's spread per stage over the second half, and its final losses, over seeds."""

    NESTED = {"theta_std_per_stage": Estimate, "weight_std_per_stage": Estimate, "val_loss_avg_model": Estimate,
              "val_loss_replicas": Estimate}

    theta_std_per_stage: Estimate
    weight_std_per_stage: Estimate
    val_loss_avg_model: Estimate
    val_loss_replicas: Estimate


@dataclass(frozen=True)
class RoutingRatio(JsonRecord):
    """One variant: its spread per stage, random over fixed routing, and its loss change."""

    NESTED = {"theta_std_random_over_fixed": Estimate, "val_loss_random_minus_fixed": Estimate}

    theta_std_random_over_fixed: Estimate
    val_loss_random_minus_fixed: Estimate


@dataclass(frozen=True)
class Curve(JsonRecord):
    """One run name's spread over training, the mean over seeds."""

    outer_step: list
    theta_std: list
    theta_std_per_stage: list


@dataclass(frozen=True)
class Skipping(JsonRecord):
    """One skip probability: the validation loss of the whole model and with half of the middle stages removed."""

    NESTED = {"val_loss": Estimate, "val_loss_half_removed": Estimate, "increase": Estimate}

    val_loss: Estimate
    val_loss_half_removed: Estimate
    increase: Optional[Estimate] = None


@dataclass(frozen=True)
class RoutingReport(JsonRecord):
    """``routing.json``: random against fixed routing per variant, and stage skipping per probability."""

    NESTED = {"settings": RoutingSettings, "spread": (dict, Spread), "ratios": (dict, RoutingRatio),
              "curves": (dict, Curve), "skipping": (dict, Skipping)}

    schema: str
    settings: RoutingSettings
    spread: dict
    ratios: dict
    curves: dict
    skipping: dict
