"""What a run writes, as typed records: a metrics.jsonl row, an inputs.jsonl row, result.json.

The one definition of the run folder's rows (docs/run_folder.md); every reader goes through
``MetricsRow.from_json`` / ``InputsRow.from_json`` / ``RunResult.from_json`` and writes with ``to_json``, so the
keys are spelled here only. Each is a :class:`noloco.infra.record.JsonRecord`: field names are the JSON keys, a
key a row lacks is None, keys the record does not name (a user's ``Observer.log`` fields) are kept in ``extra``,
and ``to_json(from_json(d)) == d``. Nothing here imports torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from noloco.infra.record import JsonRecord


@dataclass(frozen=True)
class MetricsRow(JsonRecord):
    """A metrics.jsonl row: one evaluation (the harness) or one outer step (the observer)."""

    outer_step: int
    step: Optional[int] = None
    tokens: Optional[int] = None
    train_loss: Optional[float] = None
    train_loss_per_replica: Optional[list] = None
    val_loss_avg_model: Optional[float] = None
    val_loss_per_replica: Optional[list] = None
    val_loss_replicas_mean: Optional[float] = None
    perplexity: Optional[float] = None
    weight_std: Optional[float] = None
    theta_std: Optional[float] = None
    tokens_per_s: Optional[float] = None
    lr: Optional[float] = None
    weight_std_per_stage: Optional[list] = None  # a staged run's spreads, stage by stage
    theta_std_per_stage: Optional[list] = None


@dataclass(frozen=True)
class SampleErrors(JsonRecord):
    """A sampled group's standard errors (:func:`noloco.training.sample.standard_errors`); zeros where the tensor
    was taken whole."""

    spread: Optional[float] = None
    c: Optional[float] = None
    s2: Optional[float] = None


@dataclass(frozen=True)
class GroupInputs(JsonRecord):
    """One tensor group's measured inputs at an outer step (:data:`noloco.training.measure.ROW_KEYS`), and the
    observer's additions: the coordinates sampled and their standard errors, or c's over every coordinate."""

    NESTED = {"se": SampleErrors}
    OPTIONAL_KEYS = ("sampled", "se", "c_se")

    numel: Optional[int] = None
    spread: Optional[float] = None
    progress_var: Optional[float] = None
    c: Optional[float] = None
    s2: Optional[float] = None
    lag1_cov: Optional[float] = None
    rho: Optional[float] = None
    sum_var: Optional[float] = None
    drift_var: Optional[float] = None
    s2_noise: Optional[float] = None
    rho_noise: Optional[float] = None
    sampled: Optional[int] = None
    se: Optional[SampleErrors] = None
    c_se: Optional[float] = None


@dataclass(frozen=True)
class InputsRow(JsonRecord):
    """An inputs.jsonl row: the theory's inputs measured at one outer step, per tensor group."""

    NESTED = {"groups": (dict, GroupInputs)}

    outer_step: int
    steps: Optional[int] = None
    replicas: Optional[int] = None
    groups: Optional[dict] = None


@dataclass(frozen=True)
class RunPart(JsonRecord):
    """result.json's ``part`` (this process's share since it last started) or ``run`` (the whole run)."""

    inner_steps: Optional[int] = None
    tokens: Optional[int] = None
    wall_s: Optional[float] = None
    tokens_per_s: Optional[float] = None
    resumed: Optional[bool] = None
    from_step: Optional[int] = None


@dataclass(frozen=True)
class AdamSecondMoment(JsonRecord):
    """result.json's ``adam_second_moment`` (written by the observer when its run closes with an inner AdamW):
    ``sum_sqrt_v`` = sum_j mean_i sqrt(vhat_ij) at outer step ``outer_step`` (the loss gap's input)."""

    sum_sqrt_v: Optional[float] = None
    outer_step: int = 0


@dataclass(frozen=True)
class RunResult(JsonRecord):
    """result.json: the run's settings (``config``, as the harness or the observer wrote them) and how it ended."""

    NESTED = {"part": RunPart, "run": RunPart, "final": MetricsRow}
    OPTIONAL_KEYS = ("adam_second_moment", "flags")

    config: dict
    schema_version: Optional[int] = None
    format: Optional[str] = None
    format_version: Optional[int] = None
    n_params: Optional[int] = None
    outer_steps_done: Optional[int] = None
    finished: Optional[bool] = None
    wall_s: Optional[float] = None
    world_size: Optional[int] = None
    rank: Optional[int] = None
    replicas: Optional[int] = None
    torch: Optional[str] = None
    part: Optional[RunPart] = None
    run: Optional[RunPart] = None
    final: Optional[MetricsRow] = None
    corpus_sha256: Optional[str] = None
    python: Optional[str] = None
    unigram_entropy: Optional[float] = None
    checkpoint_outer_step: Optional[int] = None
    diverged: Optional[dict] = None
    # kept as written: a damaged value is the gap's to name (noloco.advice.gap), not every reader's to refuse
    adam_second_moment: Optional[dict] = None
    flags: Optional[list] = None  # the observer's early warnings (noloco.training.early_warning.Flag)

    def second_moment(self) -> Optional[AdamSecondMoment]:
        """The observer's second moment, None where absent or not an object."""
        saved = self.adam_second_moment
        return AdamSecondMoment.from_json(saved) if isinstance(saved, dict) else None

    def setting(self) -> dict:
        """The settings with the outer step's flattened in (``replicas``, ``alpha``, ... beside ``lr``)."""
        cfg = dict(self.config)
        outer = cfg.pop("outer", {})
        return {**cfg, **outer}
