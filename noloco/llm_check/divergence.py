"""Divergence tracking: the first non-finite training loss, weight, outer momentum, optimizer state or
validation loss stops a run, and every rank of a torchrun run learns the earliest one (one small
all-gather at evaluations and checkpoints), so that they stop together.

A divergence is a :class:`Diverged` record, written into result.json's ``diverged`` with its message.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from noloco.advice.run_rows import MetricsRow
from noloco.infra.record import JsonRecord

if TYPE_CHECKING:
    import torch

#: what a divergence can be found in, in the order it is checked
QUANTITIES = ("training loss", "weights", "outer momentum", "optimizer state", "validation loss")


def first_bad(x: torch.Tensor) -> int | None:
    """Index along dimension 0 of the first slice of ``x`` holding a non-finite value, or None."""
    import torch  # here, so that the run's divergence record reads without torch

    if x.dim() == 0:
        return None if bool(torch.isfinite(x)) else 0
    bad = ~torch.isfinite(x.reshape(x.shape[0], -1)).all(1)
    return int(bad.nonzero()[0, 0]) if bool(bad.any()) else None


@dataclass(frozen=True)
class Diverged(JsonRecord):
    """Where a run first diverged: ``inner_step`` None outside the inner phase, ``replica`` a global index (None:
    the averaged model), ``quantity`` one of :data:`QUANTITIES`, ``tensor`` None for a loss, ``value`` as text;
    result.json adds the checkpoint kept and the message."""

    OPTIONAL_KEYS = ("checkpoint_outer_step", "checkpoint", "message")

    outer_step: int
    inner_step: Optional[int]
    replica: Optional[int]
    quantity: str
    tensor: Optional[str]
    value: str = "nan"
    checkpoint_outer_step: Optional[int] = None
    checkpoint: Optional[str] = None
    message: Optional[str] = None


def message(d: Diverged) -> str:
    """One line: where the run diverged and which checkpoint is kept (``checkpoint_outer_step``,
    ``checkpoint`` of ``d``)."""
    inner = f" (inner step {d.inner_step})" if d.inner_step is not None else ""
    tensor = f" {d.tensor}" if d.tensor else ""
    who = f"replica {d.replica}'s" if d.replica is not None else "the averaged model's"
    kept = (f"the last finite checkpoint (outer step {d.checkpoint_outer_step}) is kept in {d.checkpoint}"
            if d.checkpoint_outer_step is not None else "no checkpoint had been written")
    return (f"diverged at outer step {d.outer_step}{inner}: {who} {d.quantity}{tensor} is not finite "
            f"({d.value}); {kept}")


class Divergence:
    """The first divergence seen by this process's replicas (``replicas``: their global indices)."""

    def __init__(self, replicas: list[int]):
        self.replicas = replicas
        self.first: Diverged | None = None

    def record(self, outer_step: int, inner_step: int | None, replica: int | None, quantity: str,
               tensor: str | None = None, value=float("nan")) -> None:
        """Keep the first divergence (``replica`` indexes this process's replicas; None: the averaged model)."""
        if self.first is None:
            self.first = Diverged(outer_step=outer_step, inner_step=inner_step,
                                  replica=None if replica is None else self.replicas[replica], quantity=quantity,
                                  tensor=tensor, value=str(float(value)))

    def check_losses(self, loss: torch.Tensor, outer_step: int, inner_step: int) -> None:
        r = first_bad(loss)
        if r is not None:
            self.record(outer_step, inner_step, r, "training loss", None, loss[r].item())

    def check_tensors(self, outer_step: int, parts) -> None:
        """``parts``: ``(quantity, {name: tensor with the replicas along dimension 0})`` in checking order."""
        for quantity, tensors in parts:
            for name, x in tensors.items():
                r = first_bad(x)
                if r is not None:
                    bad = x[r][~x[r].isfinite()].flatten()[0].item()
                    return self.record(outer_step, None, r, quantity, name, bad)

    def check_evaluation(self, outer_step: int, row: MetricsRow) -> None:
        """A non-finite validation loss of a replica (its index in ``row`` is global) or of the averaged model."""
        per, avg = row.val_loss_per_replica or [], row.val_loss_avg_model
        bad = [i for i, v in enumerate(per) if not v == v or abs(v) == float("inf")]
        if bad or avg is None or not abs(avg) < float("inf"):  # None: how strict JSON writes a non-finite value
            value = per[bad[0]] if bad else avg
            if self.first is None:
                self.first = Diverged(outer_step=outer_step, inner_step=None, replica=bad[0] if bad else None,
                                      quantity="validation loss", tensor=None, value=str(value))

    def synchronise(self, exchange, names: list[str]) -> bool:
        """Whether any replica has diverged; under torchrun every rank learns the earliest divergence of any
        rank (one all-gather), so that all stop at the same outer step. ``names``: every tensor name."""
        if exchange.world_size > 1:
            d = self.first
            mine = ([1.0, d.outer_step, -1 if d.inner_step is None else d.inner_step,
                     -1 if d.replica is None else d.replica, QUANTITIES.index(d.quantity),
                     names.index(d.tensor) if d.tensor in names else -1] if d else [0.0] * 6)
            every = exchange.agree(mine)
            seen = [every[i:i + 6] for i in range(0, len(every), 6) if every[i] > 0]
            if seen:
                _, outer, inner, replica, quantity, tensor = min(seen, key=lambda v: (v[1], v[2]))
                first = Diverged(outer_step=int(outer), inner_step=None if inner < 0 else int(inner),
                                 replica=None if replica < 0 else int(replica), quantity=QUANTITIES[int(quantity)],
                                 tensor=names[int(tensor)] if tensor >= 0 else None)
                self.first = dataclasses.replace(first, value=d.value if d and d.replica == first.replica else "nan")
        return self.first is not None
