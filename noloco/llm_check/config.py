"""Validated settings of an LLM run, its presets and its command-line flags.

Imports no torch, so ``noloco --help`` stays fast.

Two kinds of setting meet here. The *outer step* (N, n, alpha, beta, gamma, momentum) is a
:class:`noloco.theory.config.OuterConfig`, resolved by :func:`noloco.theory.methods.resolve` exactly as
``noloco check`` and ``noloco simulate`` resolve it, so ``noloco``, ``diloco``, ``local`` and
``ddp`` mean the same algorithm in every command (:data:`noloco.theory.methods.METHOD_SUMMARY`).
The *model and compute* presets below (``cpu-tiny``, ``cpu-small``, ``paper``, ``gpu``) set
the model, the data, the inner AdamW and N; their outer settings come from
:mod:`noloco.theory.methods` (``paper`` from its ``paper`` preset, the others from the method's
default preset). Precedence: preset, then every flag given, then the method's constraints;
a flag that the method fixes to another value is refused.

For ``ddp`` the inner steps per outer step are only the unit of evaluation and checkpoints:
gradients are averaged at every inner step and there is no outer step.

Resources: :func:`memory_estimate` is the memory one training step needs (parameters and optimiser
states, activations kept for the backward pass, the evaluation batch, the data), calibrated on
measured peaks; a run above the budget (``--max-memory``, default half the memory available) is
refused before anything is allocated (:func:`check_memory`, a MemoryError: exit code 3).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
from dataclasses import dataclass, field

from noloco.theory.config import MOMENTUM_CONVENTIONS, OuterConfig
from noloco.infra.errors import ConfigError
from noloco.infra.checks import (check_at_least, check_choice, check_divides, check_fields, check_integer, check_real,
                                  check_seed)
from noloco.llm_check.architecture import GPTConfig
from noloco.llm_check.domains import ALL_TRAINING, NAMES as DOMAIN_NAMES, check_spec as check_domain
from noloco.llm_check.routing import ROUTINGS, check_skip_prob
from noloco.theory.methods import METHOD_SUMMARY, METHODS, PRESETS as THEORY_PRESETS, constrain, method_of, resolve

DTYPES = ("float32", "float64", "bfloat16")
REPLICA_MODES = ("auto", "batched", "loop")
SCHEDULES = ("cosine", "constant")
INNER_OPTIMIZERS = ("adamw", "sgd")
OUTER_FIELDS = tuple(f.name for f in dataclasses.fields(OuterConfig))


#: torch keeps a device index in 8 bits: cuda:128 would silently become cuda:-128
DEVICE_INDEX_MAX = 127


def check_device(name: str, value) -> str:
    """``cpu``, ``cuda`` or ``cuda:K`` with 0 <= K <= 127 (which GPU a torchrun rank uses:
    :func:`noloco.llm_check.exchange.rank_device`); whether that GPU exists is the trainer's check."""
    match = re.fullmatch(r"cpu|cuda(?::(\d+))?", value) if isinstance(value, str) else None
    if not match or (match.group(1) is not None and int(match.group(1)) > DEVICE_INDEX_MAX):
        raise ConfigError(f"{name}={value!r} is not allowed; allowed: cpu, cuda or cuda:K with 0 <= K <= "
                          f"{DEVICE_INDEX_MAX}")
    return value


def check_outer(name: str, value, method: str) -> OuterConfig:
    """An OuterConfig that the method's constraints leave unchanged."""
    if not isinstance(value, OuterConfig):
        raise ConfigError(f"{name}={value!r} is not an OuterConfig")
    fixed = constrain(method, value)[0]
    wrong = [f"{k}={getattr(value, k)!r} (it sets {getattr(fixed, k)!r})" for k in OUTER_FIELDS
             if getattr(value, k) != getattr(fixed, k)]
    if wrong:
        raise ConfigError(f"{name} conflicts with method={method!r} ({METHOD_SUMMARY[method]}): " + ", ".join(wrong))
    return value


def _at_least(low: int):
    return (check_at_least, low)


#: counts beyond which a run cannot be made: its steps (1e9 inner steps take a month at 3 ms each) and the
#: blocks of its model (each listed by name, far beyond any model this toolkit trains)
MAX_STEPS, MAX_LAYERS = 10**9, 10_000


def _count(name: str, value, most: int) -> int:
    return check_integer(name, value, f"an integer 1 <= {name} <= {most:,}".replace(",", "_"), lambda v: 1 <= v <= most)


def _counted(most: int):
    return (_count, most)


def _default_then(name: str, value, default, checker, *args):
    """``default`` when ``value`` is None, else ``checker(name, value, *args)``."""
    return default if value is None else checker(name, value, *args)


@dataclass(frozen=True)
class TrainConfig:
    method: str = "noloco"
    outer: OuterConfig = field(default_factory=lambda: THEORY_PRESETS["paper"].outer)
    inner_steps: int = 25          # H
    outer_steps: int = 40
    lr: float = 2e-3               # inner AdamW peak learning rate
    min_lr_frac: float = 0.1       # cosine floor, as a fraction of lr
    warmup: int = 100              # inner steps
    schedule: str = "cosine"       # cosine | constant (after warmup)
    weight_decay: float = 0.1
    adam_beta2: float = 0.95       # inner AdamW's second-moment decay (the reference: plain Adam, 0.999)
    inner_optimizer: str = "adamw"  # adamw | sgd (plain SGD: the inner optimiser the quadratic theory assumes)
    clip: float = 1.0              # per-replica gradient norm clip (0: off)
    batch: int = 8                 # windows per replica per inner step
    ctx: int = 64
    layers: int = 2
    heads: int = 4
    width: int = 64
    eval_every: int = 4            # outer steps between evaluations
    ckpt_every: int | None = None  # outer steps between checkpoints (None: eval_every)
    val_windows: int = 64
    seed: int = 0
    noniid: bool = False
    dtype: str = "float32"
    device: str = "cpu"
    replica_mode: str = "auto"     # batched replica-dimension model, or a loop over replicas
    stages: int = 1                # pipeline stages, each with N replicas (noloco.llm_check.routing)
    routing: str = "fixed"         # fixed chains, or a random replica of each stage per microbatch
    skip_prob: float = 0.0         # probability that a microbatch skips a middle stage
    outer_dtype: str = "same"      # dtype of the outer state phi and its momentum ("same": --dtype)
    domain: str | None = None      # train and validate on these domains only (noloco.llm_check.domains); None: all text

    def __post_init__(self):
        method = check_choice("method", self.method, METHODS)
        check_fields(self, {
            "outer": (check_outer, method),
            "inner_steps": _counted(MAX_STEPS), "outer_steps": _counted(MAX_STEPS), "batch": _at_least(1),
            "ctx": _at_least(2), "layers": _counted(MAX_LAYERS), "heads": _at_least(1), "width": _at_least(1),
            "eval_every": _at_least(1),
            "val_windows": _at_least(1), "seed": (check_seed,),
            "ckpt_every": (_default_then, self.eval_every, *_at_least(1)),
            "lr": (check_real, "0 < lr < inf", lambda v: 0 < v < math.inf),
            "min_lr_frac": (check_real, "0 <= min_lr_frac <= 1", lambda v: 0 <= v <= 1),
            "weight_decay": (check_real, "0 <= weight_decay < inf", lambda v: 0 <= v < math.inf),
            "adam_beta2": (check_real, "0 <= adam_beta2 < 1", lambda v: 0 <= v < 1),
            "outer_dtype": (check_choice, ("same",) + DTYPES), "inner_optimizer": (check_choice, INNER_OPTIMIZERS),
            "clip": (check_real, "0 <= clip < inf (0 turns clipping off)", lambda v: 0 <= v < math.inf),
            "schedule": (check_choice, SCHEDULES), "dtype": (check_choice, DTYPES),
            "replica_mode": (check_choice, REPLICA_MODES), "noniid": (check_choice, (False, True)),
            "device": (check_device,), "routing": (check_choice, ROUTINGS),
            "domain": (_default_then, None, check_domain),
        })
        total = self.total_inner_steps
        if total > MAX_STEPS:
            raise ConfigError(f"outer_steps * inner_steps = {total} is out of range; allowed: at most {MAX_STEPS:.0e} "
                              "inner steps in all (at 3 ms a step, 35 days)")
        check_fields(self, {  # rules that depend on fields checked above
            "heads": (check_divides, "width", self.width),
            # noloco.theory.schedules: the warm-up must end inside the run
            "warmup": (check_integer, f"an integer 0 <= warmup < outer_steps * inner_steps = {total}",
                       lambda v: v == 0 or 0 < v < total),
            "stages": (check_integer, f"an integer 1 <= stages <= layers + 2 = {self.layers + 2} (each stage "
                                      f"holds the embedding, a block or the head)", lambda v: 1 <= v <= self.layers + 2),
        })
        check_skip_prob(self.skip_prob, self.stages)
        if self.stages > 1 and self.replica_mode == "loop":
            raise ConfigError(f"stages={self.stages} needs the batched replica mode (a microbatch visits replicas "
                              f"of several stages); not replica_mode='loop'")

    @property
    def replicas(self) -> int:
        return self.outer.replicas

    @property
    def synchronous(self) -> bool:
        """Gradients averaged at every inner step and no outer step (data parallel)."""
        return method_of(self.method).synchronous

    @property
    def total_inner_steps(self) -> int:
        return self.outer_steps * self.inner_steps

    def inner_lr(self, step):
        """The inner learning rate at inner step(s) ``step`` (:func:`noloco.theory.schedules.learning_rate`)."""
        from noloco.theory.schedules import learning_rate

        return learning_rate(step, self.schedule, self.lr, self.total_inner_steps, warmup=self.warmup,
                             floor=self.min_lr_frac)

    def model(self) -> GPTConfig:
        return GPTConfig(ctx=self.ctx, layers=self.layers, heads=self.heads, width=self.width, stages=self.stages)

    def tokens_per_inner_step(self) -> int:
        return self.replicas * self.batch * self.ctx

    def as_dict(self) -> dict:
        """Plain JSON data, the outer step nested under ``"outer"``."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        """Inverse of :meth:`as_dict`; also reads the flat form written before the outer step was
        nested (replicas, group_size, alpha, ... at the top). There the method's constraints were
        applied when the run used them (diloco and ddp ignored group_size, ddp every outer field),
        so they are applied here too: the result is the setting that old run really trained with."""
        data = dict(data)
        method = data.get("method", "noloco")
        if "outer" in data:
            outer = OuterConfig(**data.pop("outer"))
        else:
            old = {k: data.pop(k) for k in OUTER_FIELDS if k in data}
            N = old.get("replicas", OuterConfig.replicas)
            old["group_size"] = method_of(method).group_size(N) or old.get("group_size")
            outer = constrain(method, OuterConfig(**old))[0]
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names}, outer=outer)


# Model and compute presets: N and everything but the outer step (that comes from noloco.theory.methods).
_CPU_SMALL = dict(replicas=8, inner_steps=25, outer_steps=50, lr=3e-3, warmup=100, batch=8, ctx=64, layers=2,
                  heads=4, width=64, eval_every=5, val_windows=128)
PRESETS = {
    "cpu-tiny": dict(replicas=4, inner_steps=5, outer_steps=6, lr=3e-3, warmup=5, batch=4, ctx=32,
                     layers=1, heads=2, width=32, eval_every=2, val_windows=16),
    "cpu-small": _CPU_SMALL,
    # NoLoCo reference inner settings on the cpu-small model (docs/llm_check.md): H 50, plain Adam 6e-4
    # (betas 0.9, 0.999, no weight decay), clip 1, cosine with warm-up to lr/10; the outer step is
    # noloco.theory.methods.PRESETS["paper"]. The reference keeps the outer state in bfloat16: --outer-dtype bfloat16
    "paper": {**_CPU_SMALL, "inner_steps": 50, "outer_steps": 30, "lr": 6e-4, "schedule": "cosine", "warmup": 100,
              "eval_every": 3, "weight_decay": 0.0, "adam_beta2": 0.999, "clip": 1.0, "min_lr_frac": 0.1},
    "gpu": dict(replicas=8, inner_steps=50, outer_steps=40, lr=1e-3, warmup=200, batch=32, ctx=256, layers=6,
                heads=8, width=384, eval_every=4, val_windows=256, device="cuda", dtype="bfloat16"),
}
#: the noloco.theory.methods preset whose outer settings an llm preset starts from (None: the method's default)
OUTER_PRESET = {"paper": "paper"}


def build(preset: str | None = None, method: str | None = None, **overrides) -> TrainConfig:
    """The llm preset, then ``overrides`` (flat: ``replicas``, ``group_size``, ``alpha``, ... and
    every other TrainConfig field; None values ignored), then the method's constraints."""
    if preset is not None:
        check_choice("preset", preset, tuple(PRESETS))
    method = method or overrides.pop("method", None) or "noloco"
    overrides.pop("method", None)
    values = {**(PRESETS[preset] if preset else {}), **{k: v for k, v in overrides.items() if v is not None}}
    outer_values = {k: values.pop(k, None) for k in OUTER_FIELDS}
    method, outer, _ = resolve(OUTER_PRESET.get(preset), method, **outer_values)
    return TrainConfig(method=method, outer=outer, **values)


# ------------------------------------------------------------------ flags

_OUTER_HELP = {
    "replicas": "number of replicas N (under torchrun: the number of processes)",
    "group_size": "group size n, dividing N (noloco; diloco and ddp set n = N, local n = 1)",
    "alpha": "outer momentum, 0 <= alpha < 1 (local and ddp set 0)",
    "beta": "outer learning rate on the group-mean progress (local and ddp set 1)",
    "gamma": "pull towards the group-mean weights (diloco, local and ddp set 0)",
}
_FLAG_HELP = {
    "inner_steps": "inner steps H per outer step (ddp: steps between evaluations)", "outer_steps": "outer steps",
    "lr": "inner AdamW peak learning rate", "min_lr_frac": "cosine floor as a fraction of lr",
    "warmup": "warm-up inner steps (fewer than outer_steps * inner_steps)", "weight_decay": "AdamW weight decay",
    "adam_beta2": "inner AdamW second-moment decay beta2 (beta1 is 0.9; paper preset 0.999)",
    "clip": "per-replica gradient norm clip (0: off)", "batch": "windows per replica per inner step",
    "ctx": "context length (bytes)", "layers": "transformer blocks", "heads": "attention heads",
    "width": "model width", "eval_every": "outer steps between evaluations (metrics.jsonl rows)",
    "ckpt_every": "outer steps between checkpoints (default: --eval-every); a checkpoint is also written "
                  "at the end and at --stop-after",
    "val_windows": "validation windows", "seed": "seed of initialisation, data and groups",
    "device": "cpu, cuda or cuda:K; under torchrun give cuda: each rank uses cuda:LOCAL_RANK",
    "stages": "pipeline stages S, each with N replicas: the embedding, blocks and head split into S consecutive "
              "parts (1 to layers + 2; S > 1 unties the head from the embedding); under torchrun S x N processes",
    "skip_prob": "probability that a microbatch skips each middle stage (stages >= 3; 0: never)",
}


def add_train_arguments(parser: argparse.ArgumentParser, methods_list: bool = False) -> None:
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        help="model and compute: cpu-tiny: smoke run < 1 min; cpu-small: N = 8 comparison on a "
                             "2-core CPU; paper: NoLoCo reference outer (theory preset paper) and inner settings; "
                             "gpu: one H100/H200. The outer step comes from the method unless given")
    parser.add_argument("--method", default=None,
                        help=("the algorithm" + (" (a comma-separated list runs each): " if methods_list else ": "))
                        + "; ".join(f"{m}: {METHOD_SUMMARY[m]}" for m in METHODS)
                        + ". diloco starts from alpha 0.3, beta 0.7, heavy-ball (theory preset diloco)"
                        + (" (default: ddp,diloco,noloco with --preset cpu-small, else noloco)" if methods_list else ""))
    for name in _OUTER_HELP:
        parser.add_argument("--" + name.replace("_", "-"), type=type(getattr(OuterConfig, name)), default=None,
                            help=_OUTER_HELP[name])
    parser.add_argument("--momentum", choices=MOMENTUM_CONVENTIONS, default=None,
                        help="outer momentum convention: heavy-ball (reference code) or nesterov")
    for f in dataclasses.fields(TrainConfig):
        if f.name not in ("method", "outer", "noniid", "schedule", "dtype", "replica_mode", "routing", "outer_dtype",
                          "inner_optimizer", "domain"):
            parser.add_argument("--" + f.name.replace("_", "-"), type=int if f.default is None else type(f.default),
                                default=None, help=_FLAG_HELP[f.name])
    parser.add_argument("--schedule", choices=SCHEDULES, default=None,
                        help="inner learning rate after the warm-up: cosine to min_lr_frac * lr, or constant")
    parser.add_argument("--dtype", choices=DTYPES, default=None, help="parameter and compute dtype")
    parser.add_argument("--inner-optimizer", choices=INNER_OPTIMIZERS, default=None,
                        help="inner optimiser: adamw (default; its state carries over outer steps) or plain sgd "
                             "(no momentum; --weight-decay is then an L2 term; needs a much larger --lr)")
    parser.add_argument("--outer-dtype", choices=("same",) + DTYPES, default=None,
                        help="dtype of the outer state (phi and the outer momentum), rounded to it after every "
                             "outer step; the reference keeps it in bfloat16 (default: same as --dtype)")
    parser.add_argument("--replica-mode", choices=REPLICA_MODES, default=None,
                        help="batched replica-dimension model, a loop over replicas, or auto (batched)")
    parser.add_argument("--routing", choices=ROUTINGS, default=None,
                        help="with --stages > 1: fixed (replica r of every stage forms one model) or random (every "
                             "microbatch visits a random replica of each stage after the first, a fresh "
                             "permutation per stage, step and batch position)")
    parser.add_argument("--domain", default=None,
                        help=f"train and validate on these domains of the corpus only: one of {', '.join(DOMAIN_NAMES)}, "
                             f"a comma-separated list, or {ALL_TRAINING} (every domain not held out); "
                             f"noloco.llm_check.domains, docs/hdee.md")
    parser.add_argument("--noniid", action="store_true", default=None,
                        help="non-IID shards: each replica reads different source files")
    parser.add_argument("--out", required=True,
                        help="output directory (metrics.jsonl, checkpoints, result.json); one that holds a run "
                             "needs --resume or --overwrite, and a folder in use by a live run is refused")
    parser.add_argument("--resume", action="store_true", help="continue from OUT's last checkpoint")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run in OUT (its metrics, checkpoints and result.json are deleted)")
    parser.add_argument("--stop-after", type=int, default=None,
                        help="stop after this many outer steps, as if interrupted, with a checkpoint "
                             "(resume with --resume)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default torch's; 1 is much faster on a shared, busy CPU)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait for a peer in distributed mode before failing")
    parser.add_argument("--max-memory", default=None, metavar="SIZE",
                        help="memory budget of a run, e.g. 8G, 500M or bytes (default: half the memory "
                             "available, or 90%% of the GPU's free memory); a run whose estimate is above it "
                             "is refused before it starts")


def check_threads(threads) -> int:
    """Torch CPU threads: 1 to 4 per CPU (far more oversubscribes for nothing; torch crashes at ~10^5)."""
    most = 4 * (os.cpu_count() or 1)
    return check_integer("threads", threads, f"an integer in 1..{most} (4 per CPU)", lambda v: 1 <= v <= most)


def check_run_flags(args) -> None:
    """The run flags beside the config: --resume and --overwrite exclude each other; --stop-after,
    --threads and --timeout in range (ConfigError, exit 2)."""
    if getattr(args, "resume", False) and getattr(args, "overwrite", False):
        raise ConfigError("--resume continues the run in OUT and --overwrite replaces it; give one of them")
    if getattr(args, "stop_after", None) is not None:
        check_integer("stop_after", args.stop_after, "an integer >= 1", lambda v: v >= 1)
    if getattr(args, "threads", None) is not None:
        check_threads(args.threads)
    if getattr(args, "timeout", None) is not None:
        check_real("timeout", args.timeout, "0 < timeout < inf (seconds)", lambda v: 0 < v < math.inf)


def config_from_args(args, method: str | None = None) -> TrainConfig:
    names = (*OUTER_FIELDS, *(f.name for f in dataclasses.fields(TrainConfig) if f.name not in ("method", "outer")))
    if method is None and args.method is not None:
        method = check_choice("method", args.method.strip(), METHODS)
    check_run_flags(args)
    return build(args.preset, method, **{k: getattr(args, k, None) for k in names})


def configs_from_args(args) -> list[TrainConfig]:
    """One validated config per method of ``--method a,b,...`` (default: ddp,diloco,noloco for
    the cpu-small comparison, else noloco), all built before any run starts."""
    text = ("ddp,diloco,noloco" if args.preset == "cpu-small" else "noloco") if args.method is None else args.method
    return [config_from_args(args, check_choice("method", m.strip(), METHODS)) for m in text.split(",")]


# ------------------------------------------------------------------ memory

#: fraction of the free GPU memory a run may use by default (on CPU: noloco.infra.budget's share of MemAvailable)
GPU_MEMORY_FRACTION = 0.9
# Calibration (measured peak resident memory of training steps and an evaluation, torch 2.13 CPU,
# float32, flash attention: memory linear in ctx; docs/reliability.md): bytes per element, per token.
_ACTIVATION_PER_WIDTH_LAYER = 40   # values kept per token, per unit of width, per block
_ACTIVATION_PER_VOCAB = 6          # logits, their softmax and gradients per token
_EVAL_PER_VOCAB, _EVAL_PER_WIDTH = 4, 8
_STATE_COPIES = 12                 # parameters, gradients, AdamW's two moments, phi, delta, outer-step temporaries
EVAL_CHUNK = 32                    # validation windows per evaluation batch (noloco.llm_check.train)


def memory_estimate(cfg: TrainConfig, replicas: int | None = None) -> dict:
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
    # noloco.llm_check.measure: two float64 buffers per parameter and replica, where one process holds them all
    meter = 2 * 8 * R * n_params if R >= 2 and not cfg.synchronous else 0
    parts = {"parameters_and_optimizer": state, "activations": max(step, evaluation), "data": data,
             "spread_meter": meter}
    return {**parts, "total": sum(parts.values())}


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


def check_memory(cfg: TrainConfig, max_memory=None, replicas: int | None = None, share: int = 1) -> dict:
    """The estimate of :func:`memory_estimate`; a :class:`noloco.infra.budget.BudgetError` (a MemoryError:
    exit 3) naming it, its parts, the budget and the flags to change when it is above the budget."""
    from noloco.infra.budget import BudgetError, human

    estimate = memory_estimate(cfg, replicas)
    limit, how = memory_budget(max_memory, cfg.device, share)
    if limit is not None and estimate["total"] > limit:
        parts = ", ".join(f"{k.replace('_', ' ')} {human(v)}" for k, v in estimate.items() if k != "total")
        raise BudgetError(f"{cfg.method}: a training step needs about {human(estimate['total'])} ({parts}), above "
                          f"the budget of {human(limit)} ({how}); lower --batch, --ctx, --width, --layers, "
                          f"--replicas or --val-windows, or raise --max-memory")
    return estimate