"""What a training run costs before it starts: the memory one step needs (:func:`memory_estimate`, calibrated on
measured peaks; a run above the budget, ``--max-memory`` or by default half the memory available, is refused
before anything is allocated: :func:`check_memory`, a MemoryError, exit 3) and its time on the project's CPU
(:func:`time_estimate`)."""

from __future__ import annotations

from dataclasses import dataclass

from noloco.infra.record import JsonRecord
from noloco.llm_check.config import EVAL_CHUNK, TrainConfig

#: fraction of the free GPU memory a run may use by default (on CPU: noloco.infra.budget's share of MemAvailable)
GPU_MEMORY_FRACTION = 0.9
# Calibration (measured peak resident memory of training steps and an evaluation, torch 2.13 CPU,
# float32, flash attention: memory linear in ctx; docs/reliability.md): bytes per element, per token.
_ACTIVATION_PER_WIDTH_LAYER = 40   # values kept per token, per unit of width, per block
_ACTIVATION_PER_VOCAB = 6          # logits, their softmax and gradients per token
_EVAL_PER_VOCAB, _EVAL_PER_WIDTH = 4, 8
_STATE_COPIES = 12                 # parameters, gradients, AdamW's two moments, phi, delta, outer-step temporaries


@dataclass(frozen=True)
class MemoryEstimate(JsonRecord):
    """The bytes of one training step, by part, and ``total``, their sum."""

    parameters_and_optimizer: int
    activations: int
    data: float
    spread_meter: int
    total: float

    def parts(self) -> dict:
        """The parts by name (``total`` not among them)."""
        return {"parameters_and_optimizer": self.parameters_and_optimizer, "activations": self.activations,
                "data": self.data, "spread_meter": self.spread_meter}


def memory_estimate(cfg: TrainConfig, replicas: int | None = None) -> MemoryEstimate:
    """Bytes one training step of ``cfg`` needs with ``replicas`` replicas in this process (default
    all; 1 under torchrun), by part; ``total`` is their sum. The batch of a step and the evaluation's
    batch are alive at different times, so the larger of the two counts."""
    R = cfg.replicas if replicas is None else replicas
    C, L, T, V = cfg.width, cfg.layers, cfg.ctx, 256
    size = {"float64": 8, "float32": 4, "bfloat16": 2}[cfg.dtype]
    n_params = cfg.model().n_params()
    state = _STATE_COPIES * R * n_params * size
    tokens = R * cfg.batch * T
    step = tokens * (_ACTIVATION_PER_WIDTH_LAYER * C * L + _ACTIVATION_PER_VOCAB * V) * max(size, 4)
    loop = cfg.replica_mode == "loop"
    if loop:  # one replica at a time
        step //= max(R, 1)
    eval_tokens = R * min(EVAL_CHUNK, cfg.val_windows) * T
    evaluation = eval_tokens * (_EVAL_PER_VOCAB * V + _EVAL_PER_WIDTH * C) * max(size, 4)
    data = 3 * 13e6 + cfg.val_windows * (T + 1) * 9  # the corpus and its shards, the validation windows
    # noloco.training.measure: two float64 buffers per parameter and replica, where one process holds them all
    meter = 2 * 8 * R * n_params if R >= 2 and not cfg.synchronous else 0
    activations = max(step, evaluation)
    return MemoryEstimate(parameters_and_optimizer=state, activations=activations, data=data, spread_meter=meter,
                          total=sum((state, activations, data, meter)))


def memory_budget(max_memory=None, device: str = "cpu", share: int = 1) -> tuple[int | None, str]:
    """``(bytes, how it was set)``: ``--max-memory`` when given (:func:`noloco.infra.budget.parse_size`),
    else on CPU :func:`noloco.infra.budget.default_budget` divided among ``share`` processes on this host
    (torchrun ranks), on a GPU :data:`GPU_MEMORY_FRACTION` of its free memory (None without a GPU:
    the trainer then says there is none)."""
    from noloco.infra import budget

    if max_memory is not None:
        return budget.parse_size(max_memory), "--max-memory"
    if str(device).startswith("cuda"):
        try:
            import torch

            free = torch.cuda.mem_get_info(torch.device(device))[0]
        except Exception:  # noqa: BLE001 - no usable GPU here: Trainer refuses the device (exit 2)
            return None, ""
        return int(GPU_MEMORY_FRACTION * free), f"{GPU_MEMORY_FRACTION:.0%} of the {budget.human(free)} free on {device}"
    share = max(int(share), 1)
    return budget.default_budget() // share, (f"{budget.DEFAULT_FRACTION:.0%} of the memory available"
                                              + (f", shared by {share} processes" if share > 1 else ""))


# ------------------------------------------------------------------ time

#: one training run's cost on the project's 2-core machine, one torch thread (fitted to the `llm validate`
#: sweeps of docs/llm_check.md: cpu-small, 51 runs in 17 min 45 s, about 21 s a run; cpu-tiny, 6 runs in about
#: 10 s): seconds to start a run (data, model, files), seconds per inner step besides its arithmetic, and
#: floating-point operations a second (6 per parameter and token for a training step, 2 for an evaluation).
RUN_SECONDS, STEP_SECONDS, CPU_FLOPS = 1.0, 0.02, 5e10


def time_estimate(cfg: TrainConfig) -> float | None:
    """Seconds one run of ``cfg`` takes on the project's CPU; None on a GPU, where no cost was measured."""
    if cfg.device != "cpu":
        return None
    P, attention = cfg.model().n_params(), cfg.layers * cfg.ctx * cfg.width
    tokens = cfg.total_inner_steps * cfg.replicas * cfg.batch * cfg.ctx
    evaluations = cfg.outer_steps // cfg.eval_every + 1
    eval_tokens = evaluations * cfg.val_windows * cfg.ctx * cfg.replicas
    flops = tokens * 6 * (P + attention) + eval_tokens * 2 * (P + attention)
    return RUN_SECONDS + cfg.total_inner_steps * STEP_SECONDS + flops / CPU_FLOPS


#: dense bfloat16 peak FLOP/s of the GPUs whose model FLOPs utilisation is reported (matched in the device's name)
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def peak_flops(device: str) -> float | None:
    """The peak of :data:`PEAK_FLOPS` of ``device``'s GPU; None on a CPU or a GPU not listed."""
    if not str(device).startswith("cuda"):
        return None
    import torch

    name = torch.cuda.get_device_name(torch.device(device))
    return next((v for k, v in PEAK_FLOPS.items() if k in name), None)


def check_memory(cfg: TrainConfig, max_memory=None, replicas: int | None = None, share: int = 1) -> MemoryEstimate:
    """The estimate of :func:`memory_estimate`; a :class:`noloco.infra.budget.BudgetError` (a MemoryError:
    exit 3) naming it, its parts, the budget and the flags to change when it is above the budget."""
    from noloco.infra.budget import BudgetError, human

    estimate = memory_estimate(cfg, replicas)
    limit, how = memory_budget(max_memory, cfg.device, share)
    if limit is not None and estimate.total > limit:
        parts = ", ".join(f"{k.replace('_', ' ')} {human(v)}" for k, v in estimate.parts().items())
        raise BudgetError(f"{cfg.method}: a training step needs about {human(estimate.total)} ({parts}), above "
                          f"the budget of {human(limit)} ({how}); lower --batch, --ctx, --width, --layers, "
                          f"--replicas or --val-windows, or raise --max-memory")
    return estimate