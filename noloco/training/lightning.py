"""NoLoCo in Lightning's ``Trainer`` (the ``pytorch_lightning`` package): a ``Callback`` that runs the outer step
of :class:`noloco.OuterOptimizer` every H optimizer steps, one replica per rank of Lightning's DDP strategy.

As in Hugging Face's Trainer (:mod:`noloco.training.hf`), DDP would all-reduce the gradients at every backward
and keep every rank identical: when training begins the callback sets the wrapped model's
``require_backward_grad_sync`` and ``require_forward_param_sync`` to False (what DDP's ``no_sync()`` sets and
restores, so Lightning's gradient accumulation leaves them False); DDP's construction has already broadcast rank
0's weights, so the replicas start equal. Lightning saves checkpoints from rank 0 only, while every rank's replica
is its own, so a resumed fit is refused rather than restarted from rank 0's weights.
"""

from __future__ import annotations

import os

from noloco.infra.errors import ConfigError, require_extra, warn

require_extra("pytorch_lightning", "pytorch-lightning", "lightning",
              "noloco.training.lightning (the Lightning callback)")

import pytorch_lightning as pl  # noqa: E402  (after the check that names the extra)

from noloco.training.callbacks import check_observe, check_settings, keep_gradients_local  # noqa: E402
from noloco.training.outer_optimizer import OuterOptimizer, torch_optimizer  # noqa: E402


def _run_schedule(trainer, optimizer, inner_steps: int, options: dict) -> dict:
    """The observer's description of the inner phase, from the Trainer and its optimizer; ``options`` (the
    user's) win. A learning-rate scheduler cannot be read, so it must be described."""
    if trainer.lr_scheduler_configs and "schedule" not in options:
        raise ConfigError("a learning-rate scheduler is configured, which NoLoCoLightningCallback cannot read: give "
                          "observer_options={'schedule': 'cosine', 'warmup': W} (or 'constant') for the advice to "
                          "read it as the closest")
    group = optimizer.param_groups[0]
    total = trainer.estimated_stepping_batches
    if total == float("inf") and "outer_steps" not in options:
        raise ConfigError("the Trainer has no max_steps or max_epochs: give observer_options={'outer_steps': T}")
    lr = group.get("initial_lr", group["lr"])  # edge: torch's param_groups
    outer_steps = max(1, int(total) // inner_steps) if total != float("inf") else None
    beta2 = group["betas"][1] if "betas" in group else None  # edge: torch's param_groups
    described = dict(lr=lr, schedule="constant",
                     inner_optimizer="adamw" if "adam" in type(optimizer).__name__.lower() else "sgd",
                     outer_steps=outer_steps, adam_beta2=beta2)
    # Observer's keyword arguments: what the Trainer cannot tell is left to the Observer's defaults
    return {**{k: v for k, v in described.items() if v is not None}, **options}


class NoLoCoLightningCallback(pl.Callback):
    """NoLoCo in Lightning's ``Trainer``: every ``inner_steps`` (H) optimizer steps, the outer step.

    Each rank of Lightning's DDP strategy (``strategy="ddp"``, or torchrun) is one replica: when training begins
    the callback stops DDP's gradient all-reduce and builds the :class:`noloco.OuterOptimizer` (``callback.outer``)
    over the LightningModule's trainable parameters, its inner optimizer the Trainer's. In a script::

        trainer = pl.Trainer(strategy="ddp", devices=4, max_steps=1000,
                             callbacks=[NoLoCoLightningCallback(inner_steps=50, observe="my-run")])
        trainer.fit(module, data)

    Args:
        observe: a run folder: a :class:`noloco.Observer` measures the run into it (rank 0 writes it; lr,
            optimizer and outer steps read from the Trainer and its optimizer; the schedule constant unless
            ``observer_options`` says otherwise); the mean training loss of each inner phase goes into its
            metrics; ``callback.observer`` is it.
        observer_options: the Observer's other keywords, e.g. ``{"sample": 1024}`` or ``{"schedule": "cosine"}``.
        **settings: :class:`noloco.OuterOptimizer`'s (``inner_steps``, ``method``, ``preset``, ``group_size``,
            ``alpha``, ``beta``, ``gamma``, ``momentum``, ``seed``, ``outer_dtype``, ``wire_dtype``,
            ``timeout``); checked now, the group size against N when training begins.

    Returns:
        The callback; ``callback.outer`` is the OuterOptimizer once training has begun (None before).

    Raises:
        ConfigError: a setting out of range or not the callback's; when training begins: no process group, a
            strategy other than DDP (FSDP and DeepSpeed shard one model across the ranks), more than one
            optimizer, a resumed fit, or a scheduler the observer cannot read.
    """

    def __init__(self, *, observe: str | os.PathLike | None = None, observer_options: dict | None = None,
                 **settings):
        check_settings("NoLoCoLightningCallback", settings, "Trainer")
        check_observe(observe, observer_options)
        self.settings, self.observe, self.observer_options = settings, observe, dict(observer_options or {})
        self.outer: OuterOptimizer | None = None
        self.observer = None  # the noloco.Observer once training has begun, with observe=FOLDER
        self._steps = 0  # the Trainer's optimizer steps counted so far
        self._losses: list[float] = []  # this inner phase's training losses

    def on_train_start(self, trainer, pl_module):
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise ConfigError("NoLoCoLightningCallback needs one replica per torch.distributed rank, and this Trainer "
                              "runs in one process: give the Trainer strategy='ddp' and devices=N (or use torchrun)")
        if not keep_gradients_local(trainer.strategy.model):
            raise ConfigError(f"NoLoCoLightningCallback under {type(trainer.strategy).__name__}: NoLoCo needs a whole "
                              f"replica on every rank, trained on its own gradients (strategy='ddp')")
        if trainer.global_step > 0:
            raise ConfigError("a resumed fit: Lightning's checkpoint holds rank 0's replica only, and every rank would "
                              "go on from it; NoLoCoLightningCallback starts from step 0")
        if len(trainer.optimizers) != 1:
            raise ConfigError(f"{len(trainer.optimizers)} optimizers: NoLoCoLightningCallback takes the one inner "
                              f"optimizer of configure_optimizers()")
        self.outer = OuterOptimizer(pl_module, **self.settings)
        # the Trainer's steps are counted here (on_train_batch_end), so the optimizer is not hooked, only read:
        # its Adam state is what `noloco llm predict --gap` needs from the observer's folder
        self.outer.inner_optimizer = torch_optimizer(trainer.optimizers[0])
        total, h = trainer.estimated_stepping_batches, self.outer.inner_steps
        if total != float("inf") and int(total) % h:
            warn(f"{int(total)} optimizer steps is not a multiple of inner_steps={h}: the last {int(total) % h} "
                 f"steps end without an outer step")
        if self.observe is not None:
            from noloco.training.observer import Observer

            options = _run_schedule(trainer, self.outer.inner_optimizer, h, self.observer_options)
            self.observer = Observer(self.outer, self.observe, **options)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs  # edge: Lightning's step outputs
        if self.observer is not None and loss is not None:
            # automatic optimization hands back the loss divided by the accumulation, as it was backpropagated
            scale = trainer.accumulate_grad_batches if pl_module.automatic_optimization else 1
            self._losses.append(float(loss) * scale)
        while self._steps < trainer.global_step:  # one per optimizer step (gradient accumulation counts once)
            self._steps += 1
            if self.outer.step() and self._losses:
                self.observer.log(self.outer.outer_done, train_loss=sum(self._losses) / len(self._losses))
                self._losses = []

    def on_train_end(self, trainer, pl_module):
        if self.observer is not None:
            self.observer.close()  # the last spread, the Adam state, result.json finished
