"""Predicted against measured replica spread of real NoLoCo training.

Model (:mod:`theory.numeric`, flat-direction limit): along a direction the loss
barely curves, one inner phase moves a replica by pure noise, ``c -> 0`` and
``Var(eps) = s2``. The stationary spread is then
``sqrt(stationary_variance(alpha, beta, gamma, 0, s2, N, n))``. For AdamW the
per-step update has size ~lr whatever the gradient scale, and H noisy steps add up
like a random walk, so ``s2 = k * lr^2 * H``; the one unknown constant ``k`` is
fitted on the reference run (its row is marked ``fitted``: its ratio is 1 by
construction), and every other run of the sweep (gamma, n, N, alpha, inner lr changed
one at a time) is a prediction. Measured: the root mean square of ``weight_std`` over
the evaluations of the second half of the run (constant inner lr, so the spread
settles), with its standard error (:func:`theory.stats.rms_se`).

Next to it, with no fitted constant: :func:`llm_check.predict.predict` on each run's own
measured inputs (``inputs.jsonl``: c, s2, rho, drift per tensor and outer step), the RMS of its
predicted weight_std over the same evaluations (``predicted_zero_constant``, ``ratio_zero_constant``
= measured / predicted; the reference run is a prediction there too).
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from llm_check.config import TrainConfig, build
from theory.config import check_choice
from theory.io import SCHEMA_VERSION, write_json
from theory.methods import PRESETS as THEORY_PRESETS
from theory.numeric import stationary_variance
from theory.stats import rms_se

# the reference run: the paper's outer step (N 8, pairs, alpha 0.5, beta = gamma = 0.7, heavy-ball)
_BASE = dict(method="noloco", **asdict(THEORY_PRESETS["paper"].outer), schedule="constant", warmup=20, lr=1e-3,
             inner_steps=10, weight_decay=0.0)
_SWEEP = [("reference", {}), ("gamma", {"gamma": 0.35}), ("gamma", {"gamma": 1.0}),
          ("n", {"group_size": 4}), ("n", {"group_size": 8}), ("N", {"replicas": 4}),
          ("N", {"replicas": 16}), ("alpha", {"alpha": 0.0}), ("alpha", {"alpha": 0.8}),
          ("inner lr", {"lr": 5e-4}), ("inner lr", {"lr": 2e-3})]
PRESETS = {
    "cpu-tiny": (dict(_BASE, replicas=4, outer_steps=6, eval_every=1, batch=2, ctx=16, layers=1, heads=2,
                      width=16, val_windows=4, warmup=5, inner_steps=3),
                 [("reference", {}), ("gamma", {"gamma": 0.35}), ("n", {"group_size": 4})]),
    "cpu-small": (dict(_BASE, outer_steps=40, eval_every=2, batch=4, ctx=64, layers=2, heads=4, width=64,
                       val_windows=8), _SWEEP),
    "gpu": (dict(_BASE, outer_steps=60, eval_every=2, batch=16, ctx=256, layers=6, heads=8, width=384,
                 val_windows=32, inner_steps=20, device="cuda"), _SWEEP),
}


@dataclass
class Row:
    factor: str
    changes: dict
    fitted: bool  # the reference run, on which k is fitted: not a prediction
    replicas: int
    group_size: int
    alpha: float
    gamma: float
    lr: float
    predicted: float
    measured: float
    stderr: float
    ratio: float
    val_loss_avg_model: float
    # no fitted constant: llm_check.predict on the run's own measured inputs (inputs.jsonl), RMS over the
    # same evaluations as ``measured``
    predicted_zero_constant: float | None = None
    ratio_zero_constant: float | None = None


def measure(metrics: list[dict], outer_steps: int) -> tuple[float, float]:
    """RMS weight_std over the second half of the run, and its standard error."""
    return rms_se([m["weight_std"] for m in metrics if m["outer_step"] > outer_steps / 2])


def _ratio(measured: float, predicted: float) -> float:
    return measured / predicted if predicted > 0 else (1.0 if measured == 0 else float("inf"))


def zero_constant(run_dir: Path) -> float | None:
    """RMS over the second half of the run of :func:`llm_check.predict.predict`'s weight_std (no
    fitted constant; None without inputs.jsonl)."""
    from llm_check.predict import predict

    report = predict(run_dir)
    last = report["rows"][-1]["outer_step"] if report["rows"] else 0
    values = [r["predicted"] for r in report["rows"] if r["outer_step"] > last / 2 and r["predicted"] is not None]
    return rms_se(values)[0] if values else None


def unit_variance(cfg: TrainConfig) -> float:
    """Predicted stationary variance for s2 = lr^2 * H (k = 1), flat direction (c = 0)."""
    o = cfg.outer
    return float(stationary_variance(o.alpha, o.beta, o.gamma, 0.0, cfg.lr ** 2 * cfg.inner_steps,
                                     o.replicas, o.group_size, o.momentum))


def run_sweep(preset: str, out: str | Path, device: str | None = None, progress: bool | None = None,
              threads: int | None = None, overwrite: bool = False, max_memory=None) -> dict:
    """Train every run of the preset's sweep under ``out``, fit k on the reference run, predict the
    others; the report is also written to ``out/validate.json``. A bar only when stderr is a terminal.
    Before the first run: every config, every run folder (locked; one that holds a run needs
    ``overwrite``) and every memory estimate. A run that diverges ends the sweep: the report then
    has ``"diverged"`` (its message) and no rows."""
    from contextlib import ExitStack

    from tqdm import tqdm

    from llm_check.config import check_memory
    from llm_check.train import Trainer, check_run_dir, read_metrics, set_threads
    from theory.io import RunLock, output_dir

    check_choice("preset", preset, tuple(PRESETS))
    base, sweep = PRESETS[preset]
    base = dict(base, **({"device": device} if device else {}))
    configs = [build(**{**base, **changes}) for _, changes in sweep]  # all checked before the first run
    set_threads(threads)
    for cfg in configs:
        check_memory(cfg, max_memory)
    progress = sys.stderr.isatty() if progress is None else progress
    out = output_dir(out)
    folders = [out / f"run{i:02d}" for i in range(len(configs))]
    runs = []
    with ExitStack() as locks:
        for where in folders:
            output_dir(where)
            locks.enter_context(RunLock(where))
            check_run_dir(where, overwrite=overwrite, how="replace the sweep with --overwrite, or give another --out")
        for (factor, changes), cfg, where in tqdm(list(zip(sweep, configs, folders)), desc=f"validate {preset}",
                                                  unit="run", disable=not progress):
            result = Trainer(cfg, where, progress=False, max_memory=max_memory).run(overwrite=overwrite)
            if result.get("diverged"):
                report = {"schema_version": SCHEMA_VERSION, "preset": preset, "base": base, "rows": [],
                          "diverged": f"{where.name} ({factor} {changes}): {result['diverged']['message']}"}
                write_json(out / "validate.json", report, indent=2)
                return report
            metrics = read_metrics(where / "metrics.jsonl")
            runs.append((factor, changes, cfg, *measure(metrics, cfg.outer_steps), result, zero_constant(where)))
    _, _, ref_cfg, ref_measured, _, ref_result, _ = runs[0]
    k = ref_measured ** 2 / unit_variance(ref_cfg)  # the one fitted constant
    rows = []
    for i, (factor, changes, cfg, measured, se, result, zero) in enumerate(runs):
        predicted = math.sqrt(k * unit_variance(cfg))
        rows.append(Row(factor, changes, i == 0, cfg.replicas, cfg.outer.group_size, cfg.outer.alpha,
                        cfg.outer.gamma, cfg.lr, predicted, measured, se, _ratio(measured, predicted),
                        result["final"]["val_loss_avg_model"], zero,
                        None if zero is None else _ratio(measured, zero)))
    report = {"schema_version": SCHEMA_VERSION, "preset": preset, "base": base, "noise_constant_k": k,
              "model": "flat direction (c = 0), s2 = k lr^2 H, k fitted on the reference run",
              "model_zero_constant": "llm_check.predict (long-run noise model) on each run's measured inputs",
              **{key: ref_result[key] for key in ("corpus_sha256", "python", "torch", "n_params",
                                                    "unigram_entropy")},
              "rows": [asdict(r) for r in rows]}
    write_json(out / "validate.json", report, indent=2)
    return report


def format_table(report: dict) -> str:
    if report.get("diverged"):
        return f"noloco llm validate --preset {report['preset']}: a run diverged: {report['diverged']}"
    lines = [f"noloco llm validate --preset {report['preset']}: stationary weight std, flat-direction theory "
             f"(k = {report['noise_constant_k']:.4g} fitted on the reference run)",
             f"{'factor':<10} {'change':<18} {'predicted':>10} {'measured':>10} {'+-se':>9} {'ratio':>6} {'val loss':>8} "
             f"{'zero-const':>10} {'ratio':>6}"]
    for row in report["rows"]:
        r = {k: math.nan if v is None else v for k, v in row.items()}  # strict JSON wrote NaN/inf as null
        change = ", ".join(f"{k}={v:g}" for k, v in r["changes"].items()) or "-"
        ratio = "fit" if r.get("fitted", r["factor"] == "reference") else f"{r['ratio']:.2f}"
        zero = r.get("predicted_zero_constant", math.nan)  # absent in files written before the meter
        zero_ratio = r.get("ratio_zero_constant", math.nan)
        lines.append(f"{r['factor']:<10} {change:<18} {r['predicted']:>10.3e} {r['measured']:>10.3e} "
                     f"{r['stderr']:>9.1e} {ratio:>6} {r['val_loss_avg_model']:>8.3f} {zero:>10.3e} {zero_ratio:>6.2f}")
    return "\n".join(lines)
