"""Validated settings of an LLM run and its sizes (the flags are :mod:`noloco.cli.llm_flags`).

Imports no torch, so ``noloco --help`` stays fast.

Two kinds of setting meet here. The *outer step* (N, n, alpha, beta, gamma, momentum) is a
:class:`noloco.theory.config.OuterConfig`, resolved by :func:`noloco.theory.methods.resolve` exactly as
``noloco check`` and ``noloco simulate`` resolve it, so ``noloco``, ``diloco``, ``local`` and
``ddp`` mean the same algorithm in every command (:data:`noloco.theory.methods.METHOD_SUMMARY`).
The run *sizes* below (``--size cpu-tiny``, ``cpu-small``, ``paper``, ``gpu``, ``gpu-large``) set
the model, the data, the inner AdamW and N; the outer step comes from an outer preset of
:mod:`noloco.theory.methods` (``--preset``, as in ``noloco check``; none given: ``paper`` for the size
``paper``, else the method's default preset). Precedence: size and preset, then every flag given, then
the method's constraints; a flag that the method fixes to another value is refused.

For ``ddp`` the inner steps per outer step are only the unit of evaluation and checkpoints:
gradients are averaged at every inner step and there is no outer step.

What a run costs before it starts (memory, time) is :mod:`noloco.llm_check.resources`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field

from noloco.theory.config import OUTER_FIELDS, OuterConfig
from noloco.infra.errors import ConfigError
from noloco.infra.checks import (check_at_least, check_choice, check_divides, check_fields, check_integer, check_real,
                                  check_seed)
from noloco.llm_check.architecture import GPTConfig
from noloco.llm_check.domains import check_spec as check_domain
from noloco.llm_check.routing import ROUTINGS, check_skip_prob
from noloco.theory.methods import (METHODS, PAPER_PRESET, PRESETS as THEORY_PRESETS, check_outer, method_of, outer_from_json,
                                   resolve)

DTYPES = ("float32", "float64", "bfloat16")
REPLICA_MODES = ("auto", "batched", "loop")
SCHEDULES = ("cosine", "constant")
INNER_OPTIMIZERS = ("adamw", "sgd")


#: torch keeps a device index in 8 bits: cuda:128 would silently become cuda:-128
DEVICE_INDEX_MAX = 127


def check_device(name: str, value) -> str:
    """``cpu``, ``cuda`` or ``cuda:K`` with 0 <= K <= 127 (which GPU a torchrun rank uses:
    :func:`noloco.training.exchange.rank_device`); whether that GPU exists is the trainer's check."""
    match = re.fullmatch(r"cpu|cuda(?::(\d+))?", value) if isinstance(value, str) else None
    if not match or (match.group(1) is not None and int(match.group(1)) > DEVICE_INDEX_MAX):
        raise ConfigError(f"{name}={value!r} is not allowed; allowed: cpu, cuda or cuda:K with 0 <= K <= "
                          f"{DEVICE_INDEX_MAX}")
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
    outer: OuterConfig = field(default_factory=lambda: PAPER_PRESET.outer)
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
    mlp_hidden: int | None = None  # hidden units of each block's MLP (None: 4 x width)
    eval_every: int = 4            # outer steps between evaluations
    ckpt_every: int | None = None  # outer steps between checkpoints (None: eval_every)
    val_windows: int = 64
    seed: int = 0
    noniid: bool = False
    dtype: str = "float32"
    device: str = "cpu"
    replica_mode: str = "auto"     # batched replica-dimension model, or a loop over replicas
    compile: bool = False          # torch.compile the training step's forward and backward (a GPU's speed)
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
            "compile": (check_choice, (False, True)),
            "device": (check_device,), "routing": (check_choice, ROUTINGS),
            "domain": (_default_then, None, check_domain),
            "mlp_hidden": (_default_then, None, *_at_least(1)),
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
        return GPTConfig(ctx=self.ctx, layers=self.layers, heads=self.heads, width=self.width, stages=self.stages,
                         mlp_hidden=self.mlp_hidden)

    def tokens_per_inner_step(self) -> int:
        return self.replicas * self.batch * self.ctx

    def as_dict(self) -> dict:
        """Plain JSON data, the outer step nested under ``"outer"``."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        """Inverse of :meth:`as_dict`; also reads the flat form written before the outer step was nested
        (:func:`noloco.theory.methods.outer_from_json`)."""
        method = data.get("method", "noloco")
        outer = outer_from_json(method, data)
        names = {f.name for f in dataclasses.fields(cls)} - set(OUTER_FIELDS) - {"outer"}
        return cls(**{k: v for k, v in data.items() if k in names}, outer=outer)


# Run sizes (--size): the model, the data, the inner optimizer and N; everything but the outer step, which is
# noloco.theory.methods' (--preset, the same presets as `noloco check`).
_CPU_SMALL = dict(replicas=8, inner_steps=25, outer_steps=50, lr=3e-3, warmup=100, batch=8, ctx=64, layers=2,
                  heads=4, width=64, eval_every=5, val_windows=128)
SIZES = {
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
    # 43 M parameters, sized to fill one H100/H200 (docs/llm_check.md): 8 x 16 windows of 512 tokens a step,
    # compiled, 33 M tokens a run; one checkpoint at the end (one of this model's is several GB)
    "gpu-large": dict(replicas=8, inner_steps=50, outer_steps=10, lr=6e-4, warmup=100, batch=16, ctx=512, layers=6,
                      heads=12, width=768, eval_every=1, ckpt_every=10, val_windows=256, device="cuda",
                      dtype="bfloat16", compile=True),
}
#: the old name of SIZES (the sizes were once given as --preset)
PRESETS = SIZES
#: the outer preset (noloco.theory.methods) a size starts from when none is given (None: the method's): the
#: reference run is the paper preset's outer step
OUTER_PRESET = {"paper": "paper"}


def build(size: str | None = None, method: str | None = None, *, preset: str | None = None,
          gamma_tied: bool = False, **overrides) -> TrainConfig:
    """The run ``size`` (:data:`SIZES`), then ``overrides`` (flat: ``replicas``, ``group_size``, ``alpha``, ...
    and every other TrainConfig field; None values ignored), then the method's constraints. The outer step
    starts from the outer ``preset`` (:data:`noloco.theory.methods.PRESETS`; None: the size's
    :data:`OUTER_PRESET`, else the method's); ``gamma_tied``: gamma = beta, as the reference code has it
    (:func:`noloco.theory.methods.resolve`)."""
    if size is not None:
        check_choice("size", size, tuple(SIZES))
    if preset is not None:
        check_choice("preset", preset, tuple(THEORY_PRESETS))
    # no method given: the outer preset's, as `noloco check --preset` has it
    method = method or overrides.pop("method", None) or (THEORY_PRESETS[preset].method if preset else "noloco")
    overrides.pop("method", None)
    values = {**(SIZES[size] if size else {}), **{k: v for k, v in overrides.items() if v is not None}}
    outer_values = {k: values.pop(k, None) for k in OUTER_FIELDS}
    method, outer, _ = resolve(preset or OUTER_PRESET.get(size), method, gamma_tied=gamma_tied, **outer_values)
    return TrainConfig(method=method, outer=outer, **values)


#: validation windows per evaluation batch (the trainer and the memory estimate)
EVAL_CHUNK = 32
#: seconds a torchrun rank waits for a peer (``--timeout``) when neither the command line nor --config says
DEFAULT_TIMEOUT = 120.0


def default_log_every(cfg: TrainConfig) -> int:
    """Inner steps between live lines when ``--log-every`` is not given: one line per outer step (H inner
    steps), so every size shows a line every few seconds (the evaluations' lines come every ``eval_every``
    outer steps: every 200 inner steps with the gpu size)."""
    return cfg.inner_steps


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
    if getattr(args, "log_every", None) is not None:
        check_integer("log_every", args.log_every, "an integer >= 1 (inner steps between live lines)",
                      lambda v: v >= 1)
