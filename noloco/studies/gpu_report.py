"""The summary of one device session of ``noloco/benchmarks/gpu_large.sh``: from the folder it wrote (its
``OUT``), the numbers docs/llm_check.md quotes, as one JSON document (docs/data/gpu_large.json).

``python -m noloco.studies.gpu_report OUT [--out FILE]``. Per run: the final validation losses, weight_std,
wall time and the training loop's tokens/s (the median of its live lines after the first outer step, which
holds the compilation; evaluations and checkpoints are left out of those lines), and for every run with a
spread Pearson's r of weight_std and theta_std with the learning rate over its evaluations (the paper: 0.91 to
0.97); the benchmark's and the outer step's results as the device wrote them; the predictions run there.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from noloco.advice.run_rows import MetricsRow, RunResult
from noloco.infra.files import read_json, write_json
from noloco.infra.record import JsonRecord
from noloco.studies.paper import pearson

#: a live line of ``noloco llm train`` ("noloco N=8: 100/600 inner steps ...; train loss ..., 1,234 tok/s, ...")
LIVE = re.compile(r"^(\w+) N=\d+: (\d+)/(\d+) inner steps.*train loss [\d.]+, lr [\d.e+-]+, ([\d,]+) tok/s")


def live_rates(log: str) -> dict[str, list[list[float]]]:
    """{"seed S" section of the log: {method: [tokens/s of each live line after the first outer step]}}."""
    sections, current = {}, "start"
    for line in log.splitlines():
        if line.startswith("== "):
            current = line[3:].rsplit(" ", 1)[0]
            continue
        m = LIVE.match(line)
        if m:
            method, step = m.group(1), int(m.group(2))
            sections.setdefault(current, {}).setdefault(method, []).append((step, float(m.group(4).replace(",", ""))))
    return sections


def _runs(out: Path, into: Path) -> Path:
    with tarfile.open(out / "runs_large.tar.gz") as tar:
        tar.extractall(into, filter="data")
    return into


@dataclass(frozen=True)
class Setting(JsonRecord):
    """What the summary reads of a run's setting (:meth:`RunResult.setting`, the outer step's fields flat)."""

    method: str
    seed: int
    alpha: float
    inner_steps: int


@dataclass(frozen=True)
class Evaluation(JsonRecord):
    """One evaluation of a run, as the summary keeps it."""

    outer_step: int
    lr: Optional[float]
    weight_std: Optional[float]
    theta_std: Optional[float]
    val_loss_avg_model: Optional[float]
    val_loss_replicas_mean: Optional[float]


@dataclass(frozen=True)
class PearsonLr(JsonRecord):
    """Pearson's r of the spreads with the learning rate over a run's evaluations."""

    weight_std: float
    theta_std: float


@dataclass(frozen=True)
class RunSummary(JsonRecord):
    """One run of the session: how it ended, the loop's steady tokens/s, its evaluations and, for a run with a
    spread, the spreads' correlation with the learning rate."""

    NESTED = {"evaluations": (list, Evaluation), "pearson_lr": PearsonLr}
    OPTIONAL_KEYS = ("pearson_lr",)

    folder: str
    method: str
    seed: int
    alpha: float
    outer_steps_done: Optional[int]
    tokens: Optional[int]
    wall_s: Optional[float]
    val_loss_avg_model: Optional[float]
    val_loss_replicas_mean: Optional[float]
    weight_std: Optional[float]
    theta_std: Optional[float]
    loop_tokens_per_s_median: Optional[float]
    evaluations: list
    pearson_lr: Optional[PearsonLr] = None


@dataclass(frozen=True)
class GpuSummary(JsonRecord):
    """gpu_large.json: the session's environment, its runs and the predictions run there; the benchmarks' results
    and the test runs' closing lines are kept in ``extra`` by file stem, as the device wrote them."""

    NESTED = {"runs": (list, RunSummary)}

    env: Optional[str]
    runs: list
    predictions: dict = field(default_factory=dict)


def summarise_run(folder: Path, name: str, rates: dict) -> RunSummary:
    """The run in ``folder`` (``name`` relative to the runs), ``rates``: its section's live tokens/s by method."""
    result = RunResult.from_json(read_json(folder / "result.json"))
    rows = [MetricsRow.from_json(json.loads(line)) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    cfg, final = Setting.from_json(result.setting()), result.final or MetricsRow(outer_step=0)
    steady = [r for step, r in rates.get(cfg.method, []) if step > cfg.inner_steps]  # after the first phase, which compiles
    pearson_lr = None
    if any(r.weight_std for r in rows):
        lr = [r.lr for r in rows]
        pearson_lr = PearsonLr(weight_std=pearson([r.weight_std for r in rows], lr),
                               theta_std=pearson([r.theta_std for r in rows], lr))
    return RunSummary(
        folder=name, method=cfg.method, seed=cfg.seed, alpha=cfg.alpha, outer_steps_done=result.outer_steps_done,
        tokens=result.run.tokens, wall_s=result.run.wall_s, val_loss_avg_model=final.val_loss_avg_model,
        val_loss_replicas_mean=final.val_loss_replicas_mean, weight_std=final.weight_std, theta_std=final.theta_std,
        loop_tokens_per_s_median=statistics.median(steady) if steady else None,
        evaluations=[Evaluation(outer_step=r.outer_step, lr=r.lr, weight_std=r.weight_std, theta_std=r.theta_std,
                                val_loss_avg_model=r.val_loss_avg_model,
                                val_loss_replicas_mean=r.val_loss_replicas_mean) for r in rows],
        pearson_lr=pearson_lr)


def summarise(out: Path) -> GpuSummary:
    out = Path(out)
    log = (out / "log.txt").read_text() if (out / "log.txt").exists() else ""
    rates = live_rates(log)
    env = (out / "env.txt").read_text().strip() if (out / "env.txt").exists() else None
    docs = {path.stem: read_json(path) for path in sorted(out.glob("bench_large*.json"))
            + sorted(out.glob("outer_large*.json"))}
    for path in sorted(out.glob("tests*.txt")):  # pytest's closing lines: each failure and the counts
        docs[path.stem] = [line for line in path.read_text().splitlines()
                           if line.startswith(("FAILED", "ERROR")) or re.match(r"^\d+ (passed|failed)", line)]
    summaries, predictions = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        runs = _runs(out, Path(tmp)) if (out / "runs_large.tar.gz").exists() else None
        for folder in sorted(runs.glob("**/result.json")) if runs else ():
            folder = folder.parent
            top = folder.relative_to(runs).parts[0]  # sS, or sS-alphaA for the run --as is checked on
            section = f"train alpha {top.split('alpha')[1]}" if "alpha" in top else f"train seed {top[1:]}"
            summaries.append(summarise_run(folder, str(folder.relative_to(runs)), rates.get(section, {})))
        for path in sorted(runs.glob("predict-*.json")) if runs else ():
            text = path.read_text().strip()
            predictions[path.stem] = json.loads(text) if text else None
    # the file's key order: the environment, the devices' documents, then the runs and the predictions
    return GpuSummary(env=env, runs=summaries, predictions=predictions, extra=docs,
                      order=("env", *docs, "runs", "predictions"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m noloco.studies.gpu_report", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="the OUT folder of noloco/benchmarks/gpu_large.sh")
    parser.add_argument("--out", default=None, help="write the summary here (default: print it)")
    args = parser.parse_args(argv)
    summary = summarise(Path(args.folder))
    if args.out:
        write_json(args.out, summary, indent=1)
    else:
        print(json.dumps(summary.to_json(), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
