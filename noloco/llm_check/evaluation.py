"""A one-process run's checkpoint evaluated with middle pipeline stages left out of every path
(``noloco llm evaluate OUT --remove 1,2``, docs/routing.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from noloco.advice.run_rows import RunResult
from noloco.infra.errors import ConfigError, DataError
from noloco.infra.files import read_json
from noloco.infra.record import JsonRecord


@dataclass(frozen=True)
class StageEvaluation(JsonRecord):
    """A checkpoint's validation losses with the middle stages ``removed`` left out of every path."""

    removed: list
    stages: int
    outer_step: int
    val_loss_avg_model: Optional[float]
    val_loss_per_replica: list
    weight_std: Optional[float]


def evaluate_run(out: str | Path, removed=(), threads: int | None = None) -> StageEvaluation:
    """The validation losses of the model in ``out``'s checkpoint (a one-process run) with the middle
    stages ``removed`` (stage numbers, or their comma-separated text) left out of every path. A ConfigError
    for a stage that is not a middle stage."""
    from noloco.llm_check.config import TrainConfig
    from noloco.llm_check.lifecycle import Lifecycle, run_folder
    from noloco.llm_check.routing import middle_stages
    from noloco.llm_check.trainer import Trainer, set_threads  # torch: imported where a run is evaluated

    if isinstance(removed, str):
        try:
            removed = [int(v) for v in removed.split(",") if v.strip()]
        except ValueError:
            raise ConfigError(f"--remove {removed!r}: give stage numbers, e.g. 1,2") from None

    out = Path(out)
    result = read_json(out / "result.json", required=("config",))
    try:
        cfg = TrainConfig.from_dict(RunResult.from_json(result).config)
    except (ConfigError, TypeError, KeyError, AttributeError) as err:
        raise DataError(f"{out / 'result.json'} holds settings this version cannot read ({err})") from None
    middle = middle_stages(cfg.stages)
    removed = sorted(set(removed))
    wrong = [s for s in removed if s not in middle]
    if wrong:
        raise ConfigError(f"stages {wrong} cannot be removed: the run has {cfg.stages} stages and only the middle "
                          f"ones ({', '.join(map(str, middle)) or 'none'}) hold nothing but residual blocks")
    if not (out / "ckpt.pt").exists():
        raise DataError(f"{out} has no ckpt.pt (a torchrun run keeps one checkpoint per rank: evaluate a "
                        f"one-process run)")
    set_threads(threads)
    trainer = Trainer(cfg, out, progress=False)
    Lifecycle(trainer, run_folder(out, lock=False)).load()
    row = trainer.evaluate(removed=tuple(removed))
    return StageEvaluation(removed=removed, stages=cfg.stages, outer_step=trainer.outer_done,
                           **{k: row[k] for k in ("val_loss_avg_model", "val_loss_per_replica", "weight_std")})


def format_evaluation(report: StageEvaluation) -> str:
    return (f"stages {report.stages}, removed {report.removed or 'none'}, outer step {report.outer_step}: "
            f"val loss (replica-mean model) {report.val_loss_avg_model:.4f}, per replica "
            + " ".join(f"{v:.4f}" for v in report.val_loss_per_replica))
