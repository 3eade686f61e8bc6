"""A seeded study's runs: one seed's finished run as a typed record, and a curve's mean over seeds.

The paper GPT and routing studies train (or reuse) every run through :func:`train_seed` and read its rows as
:class:`noloco.advice.run_rows.MetricsRow`, so their statistics name fields, not keys."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from noloco.advice.run_rows import MetricsRow, RunResult
from noloco.infra.errors import DataError
from noloco.infra.files import read_jsonl
from noloco.llm_check.config import TrainConfig
from noloco.studies.reports import Estimate
from noloco.theory.stats import mean_se


@dataclass(frozen=True)
class SeedRun:
    """One seed's finished run: the settings it was trained with, its folder, result.json and metrics rows."""

    config: TrainConfig
    folder: Path
    result: RunResult
    rows: list  # MetricsRow

    def curve(self, pick) -> np.ndarray:
        """``pick(row)`` at every evaluation."""
        return np.asarray([pick(r) for r in self.rows], dtype=float)


def train_seed(cfg: TrainConfig, where: Path, threads: int | None, required: tuple) -> SeedRun:
    """The finished run of ``cfg`` in ``where``, reused or trained; a diverged run, or metrics rows without
    ``required``, are a DataError."""
    from noloco.llm_check.divergence import Diverged
    from noloco.llm_check.train import train_or_reuse

    result = RunResult.from_json(train_or_reuse(cfg, where, threads))
    if result.diverged:
        raise DataError(f"{where}: {Diverged.from_json(result.diverged).message}")
    rows = read_jsonl(where / "metrics.jsonl", required=required)
    return SeedRun(cfg, where, result, [MetricsRow.from_json(r) for r in rows])


def band(per_seed) -> Estimate:
    """The mean over seeds and its standard error, element by element (a number becomes a list of one)."""
    mean, se = mean_se(np.asarray(per_seed, dtype=float), axis=0)
    return Estimate(mean=np.atleast_1d(mean).tolist(), se=np.atleast_1d(se).tolist())
