"""What the spread costs in loss: the gap between the replicas' mean validation loss and the averaged model's,
predicted from a checkpoint with nothing fitted (docs/advice.md, "The loss side").

In a direction that the inner Adam phase relaxes, a replica sits at the small-step equilibrium of Adam's step
lr / sqrt(v): its variance about the local optimum is lr sigma^2 / (2 kappa sqrt(v)) for curvature kappa and
gradient noise sigma^2. The outer step multiplies that variance by R1, the exact stationary spread of the
exchangeable recursion at c = 1 per unit noise (:func:`noloco.theory.exchangeable.stationary_spread`), and the
loss pays kappa / 2 times it: R1 lr sigma^2 / (4 sqrt(v)), the same for every relaxed direction whatever its
curvature. With sigma^2 ~ v (Adam's second moment is the gradient's, noise included) that is::

    gap = R1 / 4 * lr * sum_j mean_i sqrt(vhat_ij)

summed over every weight j, averaged over the replicas i, vhat the bias-corrected second moment of the
checkpoint's optimiser and lr the mean rate of the last phase. The spread's own size (weight_std) does not
enter: the flat directions that dominate it cost little, so the gap is not proportional to weight_std^2.
"""

from __future__ import annotations

import math
from pathlib import Path

from noloco.infra.errors import DataError
from noloco.infra.files import open_run_file
from noloco.theory import exchangeable


def equipartition_gap(run_dir) -> dict:
    """The predicted gap at the run's checkpoint, the measured one at the evaluation of the same outer step
    (``val_loss_replicas_mean - val_loss_avg_model``; None where no evaluation is at that step) and their ratio."""
    import torch

    from noloco.llm_check.forecast import schedule_functionals
    from noloco.llm_check.predict import read_run

    run = read_run(run_dir)
    cfg, outer = run["config"], run["outer"]
    path = Path(run_dir) / "ckpt.pt"
    if cfg.inner_optimizer != "adamw":
        raise DataError(f"{run_dir}: the equipartition gap needs the inner AdamW's second moment; this run's "
                        f"inner optimiser is {cfg.inner_optimizer}")
    try:
        with open_run_file(path, "give back the checkpoint `noloco llm train` wrote") as handle:  # a pipe would block
            state = torch.load(handle, map_location="cpu", weights_only=True)
        opt = state["opt"]["state"]
        step = int(state["outer_step"])
    except FileNotFoundError:
        raise DataError(f"{path} is missing: the gap is predicted from a checkpoint's optimiser state") from None
    except DataError:
        raise  # not a regular file (open_run_file): its own line
    except Exception as err:  # damaged bytes or a foreign file: torch raises almost anything
        raise DataError(f"{path} is not a checkpoint of this toolkit with an optimiser state ({err})") from None
    if step < 1:
        raise DataError(f"{path} is at outer step 0: no phase has run yet")
    root = 0.0
    for entry in opt.values():
        count = float(entry["step"])
        vhat = entry["exp_avg_sq"].double() / (1 - cfg.adam_beta2 ** count)
        root += float(vhat.sqrt().sum()) / vhat.shape[0]  # summed over the weights, averaged over the replicas
    rate = float(schedule_functionals(cfg)["L1"][step - 1] / cfg.inner_steps)
    r1 = exchangeable.stationary_spread(outer, 1.0, 1.0)
    predicted = r1 / 4 * rate * root
    row = next((m for m in run["metrics"] if int(m["outer_step"]) == step), None)
    measured = None
    if row and row.get("val_loss_replicas_mean") is not None and row.get("val_loss_avg_model") is not None:
        measured = float(row["val_loss_replicas_mean"] - row["val_loss_avg_model"])
    return {"run": str(run_dir), "outer_step": step, "r1": r1, "rate": rate, "sum_sqrt_v": root,
            "predicted": predicted, "measured": measured, "val_windows": cfg.val_windows,
            "ratio": predicted / measured if measured and measured > 0 and math.isfinite(predicted) else None,
            "fitted_constants": 0}


def format_gap(report: dict) -> str:
    fmt = lambda x: "-" if x is None else f"{x:.4g}"  # noqa: E731
    return (f"{report['run']}: at outer step {report['outer_step']}, the loss gap between the replicas and their "
            f"average, predicted R1/4 * lr * sum sqrt(v) = {report['r1']:.4g}/4 * {report['rate']:.4g} * "
            f"{report['sum_sqrt_v']:.4g} = {fmt(report['predicted'])} nats; measured {fmt(report['measured'])} "
            f"({report['val_windows']} validation windows); predicted / measured {fmt(report['ratio'])}; "
            "fitted constants 0")
