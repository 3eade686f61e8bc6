"""NoLoCo in Hugging Face's ``Trainer``: a ``TrainerCallback`` that runs the outer step of
:class:`noloco.training.outer_optimizer.OuterOptimizer` every H optimizer steps, one replica per rank.

Under torchrun the Trainer wraps the model in ``DistributedDataParallel`` (through accelerate), which
all-reduces the gradients at every backward: every rank would hold the same model and NoLoCo would be
data parallel. When training begins the callback sets the wrapped model's ``require_backward_grad_sync``
(and ``require_forward_param_sync``) to False, the flags DDP's own ``no_sync()`` sets (and restores,
so the Trainer's gradient accumulation, which enters ``no_sync``, leaves them False): the reducer is
never armed, so a backward runs no collective at all and every rank's gradient is its own. DDP's
construction still broadcast rank 0's weights, so the replicas start equal, as the outer step needs.
It also sets ``args.average_tokens_across_devices`` to False: each replica's loss is the mean over its
own tokens (the default all-gathers the token count at every step and rescales each rank's loss by its
share, which is right for one averaged gradient, not for replicas).

Checkpoints: the Trainer saves the model and the optimizer from rank 0 only, but under NoLoCo every
rank's weights and inner optimizer state are its own. ``on_save`` writes, per rank, next to the
Trainer's files, ``noloco-rank{R}.pt``: the outer state, this replica's weights and its inner optimizer
state; a resumed run loads them when training begins (after the Trainer loaded rank 0's).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from noloco.infra.errors import ConfigError, DataError, require_extra, warn
from noloco.infra.files import atomic_write, open_run_file

require_extra("transformers", "transformers", "hf", "noloco.training.hf (the Hugging Face Trainer callback)")

from transformers import TrainerCallback  # noqa: E402  (after the check that names the extra)
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR  # noqa: E402

from noloco.training.callbacks import check_observe, check_settings, keep_gradients_local  # noqa: E402
from noloco.training.outer_optimizer import OuterOptimizer, torch_optimizer  # noqa: E402

#: the file each rank writes into a Trainer checkpoint folder
STATE_FILE = "noloco-rank{rank}.pt"


@dataclass(frozen=True)
class RankState:
    """One rank's checkpoint as :meth:`NoLoCoCallback.on_save` writes it: the step and three state_dicts."""

    global_step: int
    model: dict
    optimizer: dict
    outer: dict

#: the Trainer's learning-rate schedules the advice models (the others need observer_options={"schedule": ...})
SCHEDULES = {"constant": "constant", "constant_with_warmup": "constant", "cosine": "cosine"}


def _run_schedule(args, state, inner_steps: int) -> dict:
    """The observer's description of the inner schedule, from the Trainer's arguments."""
    kind = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    optim = str(getattr(args.optim, "value", args.optim))
    return {"outer_steps": max(1, state.max_steps // inner_steps), "lr": args.learning_rate,
            "schedule": SCHEDULES.get(kind, kind), "warmup": args.get_warmup_steps(state.max_steps),
            "inner_optimizer": "adamw" if "adam" in optim else "sgd", "adam_beta2": args.adam_beta2}


class NoLoCoCallback(TrainerCallback):
    """NoLoCo in Hugging Face's ``Trainer``: every ``inner_steps`` (H) optimizer steps, the outer step.

    Each torch.distributed rank (started by torchrun; the Trainer starts the group) is one replica: when
    training begins the callback stops DDP's gradient all-reduce, so every rank trains its own replica, and
    builds the :class:`noloco.OuterOptimizer` (``callback.outer``) on the Trainer's optimizer. It saves and
    resumes every rank's outer state and weights with the Trainer's checkpoints (``noloco-rank{R}.pt``).
    In a script::

        trainer = Trainer(model=model, args=args, train_dataset=data)
        trainer.add_callback(NoLoCoCallback(trainer, inner_steps=50))
        trainer.train()

    Args:
        trainer: the ``transformers.Trainer`` it is added to (its wrapped model is where the gradient
            all-reduce is stopped).
        resume_from: the checkpoint folder of a resumed run when it is not
            ``args.output_dir/checkpoint-STEP`` (the one ``trainer.train(resume_from_checkpoint=True)`` picks).
        observe: a run folder: a :class:`noloco.Observer` measures the run into it (rank 0 writes it; the
            schedule, lr, warm-up, outer steps and optimizer read from the Trainer's arguments); the
            Trainer's logged ``loss`` goes into its metrics; ``callback.observer`` is it.
        observer_options: the Observer's other keywords, e.g. ``{"sample": 1024}``.
        **settings: :class:`noloco.OuterOptimizer`'s (``inner_steps``, ``method``, ``preset``, ``group_size``,
            ``alpha``, ``beta``, ``gamma``, ``momentum``, ``seed``, ``outer_dtype``, ``wire_dtype``,
            ``timeout``); checked now, the group size against N when training begins.

    Returns:
        The callback; ``callback.outer`` is the OuterOptimizer once training has begun (None before).

    Raises:
        ConfigError: a setting out of range or not the callback's (``replicas``, ``stages``: the ranks are
            the replicas), a trainer that is not a ``transformers.Trainer``, DeepSpeed or FSDP, or no
            process group when training begins.
        DataError: a resumed run whose per-rank state is missing or of another step.

    Examples:
        >>> import noloco
        >>> noloco.NoLoCoCallback(object(), inner_steps=50)
        Traceback (most recent call last):
        ...
        noloco.infra.errors.ConfigError: trainer=object is not a transformers.Trainer...
        >>> noloco.NoLoCoCallback(object(), replicas=4)
        Traceback (most recent call last):
        ...
        noloco.infra.errors.ConfigError: replicas= is not a setting of NoLoCoCallback: ...
    """

    def __init__(self, trainer, *, resume_from: str | os.PathLike | None = None,
                 observe: str | os.PathLike | None = None, observer_options: dict | None = None, **settings):
        check_settings("NoLoCoCallback", settings, "Trainer")
        if not hasattr(trainer, "model_wrapped"):
            raise ConfigError(f"trainer={type(trainer).__name__} is not a transformers.Trainer: "
                              f"NoLoCoCallback(trainer, inner_steps=...) takes the Trainer it is added to")
        self.trainer, self.settings, self.resume_from = trainer, settings, resume_from
        check_observe(observe, observer_options)
        self.observe, self.observer_options = observe, dict(observer_options or {})
        kind = str(getattr(trainer.args.lr_scheduler_type, "value", trainer.args.lr_scheduler_type))
        if observe is not None and kind not in SCHEDULES and "schedule" not in self.observer_options:
            raise ConfigError(f"lr_scheduler_type={kind!r} is not a schedule the advice models "
                              f"({', '.join(SCHEDULES)}): train with one of them, or give observer_options="
                              f"{{'schedule': 'cosine'}} (or 'constant') for the advice to read it as the closest")
        self.outer: OuterOptimizer | None = None
        self.observer = None  # the noloco.Observer once training has begun, with observe=FOLDER
        self.local: bool | None = None  # whether DDP's gradient sync was stopped (None: not begun)

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        import torch.distributed as dist

        trainer = self.trainer
        if getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
            raise ConfigError("NoLoCoCallback under DeepSpeed or FSDP: these shard one model across the ranks, "
                              "while NoLoCo needs a whole replica on every rank (plain DDP under torchrun)")
        if not (dist.is_available() and dist.is_initialized()):
            raise ConfigError("NoLoCoCallback needs one replica per torch.distributed rank, and this Trainer "
                              "runs in one process: start the script with torchrun --nproc-per-node N")
        self.local = keep_gradients_local(trainer.model_wrapped)
        # each replica's loss is the mean over its own tokens: no all-gather of the token count at every
        # step (a global collective) and no rescaling of a rank's gradient by its share of the tokens
        args.average_tokens_across_devices = False
        if state.global_step > 0:  # resumed: every rank's own weights and inner state, not rank 0's
            saved = self._load(args, state)
            model.load_state_dict(saved.model)
            optimizer.load_state_dict(saved.optimizer)
        self.outer = OuterOptimizer(model, **self.settings)
        # the Trainer's steps are counted here (on_step_end), so the optimizer is not hooked, only read: its
        # Adam state is what `noloco llm predict --gap` needs from the observer's folder
        self.outer.inner_optimizer = torch_optimizer(optimizer)
        if state.global_step > 0:
            self.outer.load_state_dict(saved.outer)
        if state.max_steps % self.outer.inner_steps:
            warn(f"max_steps={state.max_steps} is not a multiple of inner_steps={self.outer.inner_steps}: the "
                 f"last {state.max_steps % self.outer.inner_steps} steps end without an outer step")
        if self.observe is not None:
            from noloco.training.observer import Observer

            self.observer = Observer(self.outer, self.observe, **{**_run_schedule(args, state, self.outer.inner_steps),
                                                                    **self.observer_options})

    def on_step_end(self, args, state, control, **kwargs):
        self.outer.step()  # counts one inner step; the H-th of a phase runs the outer step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.observer is not None and logs and "loss" in logs:
            self.observer.log(self.outer.outer_done, train_loss=logs["loss"])  # edge: Hugging Face's logs

    def on_train_end(self, args, state, control, **kwargs):
        if self.observer is not None:
            self.observer.close()  # the last spread, the Adam state, result.json finished

    def on_save(self, args, state, control, model=None, optimizer=None, **kwargs):
        import torch.distributed as dist

        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        saved = {"global_step": state.global_step, "outer": self.outer.state_dict(),
                 "model": model.state_dict(), "optimizer": optimizer.state_dict()}
        atomic_write(os.path.join(folder, STATE_FILE.format(rank=dist.get_rank())),
                     lambda tmp: torch.save(saved, tmp))

    def _load(self, args, state) -> RankState:
        import torch.distributed as dist

        folder = self.resume_from or os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        path = os.path.join(folder, STATE_FILE.format(rank=dist.get_rank()))
        if not os.path.isfile(path):
            raise DataError(f"{path} is missing: the run resumes at step {state.global_step} but that checkpoint "
                            f"holds no NoLoCo state for this rank (without it every rank would go on from rank "
                            f"0's weights); give NoLoCoCallback(..., resume_from=FOLDER) for another folder")
        with open_run_file(path, "give the checkpoint folder the Trainer wrote") as handle:  # type and size first
            saved = torch.load(handle, map_location="cpu", weights_only=True)
        if saved.get("global_step") != state.global_step:
            raise DataError(f"{path} was written at step {saved.get('global_step')}, the run resumes at step "
                            f"{state.global_step}")
        return RankState(saved["global_step"], saved["model"], saved["optimizer"], saved["outer"])
