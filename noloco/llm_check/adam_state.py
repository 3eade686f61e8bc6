"""What the loss-gap advice (:mod:`noloco.advice.gap`) reads from a harness checkpoint: the inner AdamW's
bias-corrected second moment, summed over the weights as ``sum_j mean_i sqrt(vhat_ij)``."""

from __future__ import annotations

from pathlib import Path

import torch

from noloco.infra.errors import DataError
from noloco.infra.files import open_run_file


def second_moment_root(path: str | Path, beta2: float) -> tuple[int, float]:
    """``(outer step, sum over the weights of the replica-mean sqrt(vhat))`` of the checkpoint at ``path``;
    a DataError for a missing, damaged or foreign file."""
    path = Path(path)
    try:
        with open_run_file(path, "give back the checkpoint `noloco llm train` wrote") as handle:  # a pipe would block
            state = torch.load(handle, map_location="cpu", weights_only=True)
        opt = state["opt"]["state"]  # edge: AdamW's state_dict
        step = int(state["outer_step"])  # edge: the checkpoint's dict, as torch.load reads it
        root = 0.0
        for entry in opt.values():
            count = float(entry["step"])  # edge: torch's AdamW state per parameter
            vhat = entry["exp_avg_sq"].double() / (1 - beta2 ** count)  # edge: torch's AdamW state
            root += float(vhat.sqrt().sum()) / vhat.shape[0]  # summed over the weights, averaged over the replicas
    except FileNotFoundError:
        raise DataError(f"{path} is missing: the gap is predicted from a checkpoint's optimiser state") from None
    except DataError:
        raise  # not a regular file (open_run_file): its own line
    except Exception as err:  # damaged bytes or a foreign file: torch raises almost anything
        raise DataError(f"{path} is not a checkpoint of this toolkit with an optimiser state ({err})") from None
    if not (root >= 0 and root < float("inf")):  # a negative second moment, a NaN: not what AdamW keeps
        raise DataError(f"{path}: its optimiser state gives a second-moment sum of {root!r}; expected a finite "
                        "number >= 0 (a damaged checkpoint)")
    return step, root
