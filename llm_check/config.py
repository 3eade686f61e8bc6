"""Validated settings of an LLM run, its presets and its command-line flags.

Imports no torch, so ``noloco --help`` stays fast. Precedence: preset, then the
method's defaults, then every flag given explicitly.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields

from theory.config import MOMENTUM_CONVENTIONS, ConfigError, OuterConfig

METHODS = ("ddp", "diloco", "noloco", "local")
DTYPES = ("float32", "float64", "bfloat16")
REPLICA_MODES = ("auto", "batched", "loop")


@dataclass(frozen=True)
class TrainConfig:
    method: str = "noloco"
    replicas: int = 8
    group_size: int = 2            # ignored by ddp / diloco (n = N) and local (n = 1)
    alpha: float = 0.5
    beta: float = 0.7
    gamma: float = 0.7
    momentum: str = "heavy-ball"
    inner_steps: int = 25          # H
    outer_steps: int = 40
    lr: float = 2e-3               # inner AdamW peak learning rate
    min_lr_frac: float = 0.1       # cosine floor, as a fraction of lr
    warmup: int = 100              # inner steps
    schedule: str = "cosine"       # cosine | constant (after warmup)
    weight_decay: float = 0.1
    clip: float = 1.0              # per-replica gradient norm clip (0: off)
    batch: int = 8                 # windows per replica per inner step
    ctx: int = 64
    layers: int = 2
    heads: int = 4
    width: int = 64
    eval_every: int = 4            # outer steps between evaluations (and checkpoints)
    val_windows: int = 64
    seed: int = 0
    noniid: bool = False
    dtype: str = "float32"
    device: str = "cpu"
    replica_mode: str = "auto"     # batched replica-dimension model, or a loop over replicas

    def __post_init__(self):
        if self.method not in METHODS:
            raise ConfigError(f"method={self.method!r} is not allowed; allowed: {', '.join(METHODS)}")
        for name, low in (("inner_steps", 1), ("outer_steps", 1), ("batch", 1), ("ctx", 2), ("layers", 1),
                          ("heads", 1), ("width", 1), ("eval_every", 1), ("val_windows", 1), ("warmup", 0),
                          ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name}={value!r} is out of range; allowed: an integer >= {low}")
        if self.width % self.heads:
            raise ConfigError(f"width={self.width} must be divisible by heads={self.heads}")
        for name, ok, allowed in (("lr", self.lr > 0, "lr > 0"),
                                  ("min_lr_frac", 0 <= self.min_lr_frac <= 1, "0 <= min_lr_frac <= 1"),
                                  ("weight_decay", self.weight_decay >= 0, "weight_decay >= 0"),
                                  ("clip", self.clip >= 0, "clip >= 0 (0 turns clipping off)")):
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r} is out of range; allowed: {allowed}")
        for name, value, allowed in (("schedule", self.schedule, ("cosine", "constant")),
                                     ("dtype", self.dtype, DTYPES), ("replica_mode", self.replica_mode, REPLICA_MODES)):
            if value not in allowed:
                raise ConfigError(f"{name}={value!r} is not allowed; allowed: {', '.join(allowed)}")
        self.outer()  # validates N, n, alpha, beta, gamma, momentum

    @property
    def n(self) -> int:
        return {"ddp": self.replicas, "diloco": self.replicas, "local": 1}.get(self.method, self.group_size)

    def outer(self) -> OuterConfig:
        return OuterConfig(replicas=self.replicas, group_size=self.n, alpha=self.alpha, beta=self.beta,
                           gamma=self.gamma, momentum=self.momentum)

    def model(self):
        from llm_check.model import GPTConfig

        return GPTConfig(ctx=self.ctx, layers=self.layers, heads=self.heads, width=self.width)

    def tokens_per_inner_step(self) -> int:
        return self.replicas * self.batch * self.ctx

    def as_dict(self) -> dict:
        return asdict(self)


# DiLoCo as the paper's comparison runs it; local = no synchronisation (phi <- theta).
METHOD_DEFAULTS = {
    "diloco": {"alpha": 0.3, "beta": 0.7, "gamma": 0.0},
    "local": {"alpha": 0.0, "beta": 1.0, "gamma": 0.0},
    "ddp": {},
    "noloco": {},
}

_CPU_SMALL = dict(replicas=8, group_size=2, inner_steps=25, outer_steps=50, lr=3e-3, warmup=100,
                  batch=8, ctx=64, layers=2, heads=4, width=64, eval_every=5, val_windows=128)
PRESETS = {
    "cpu-tiny": dict(replicas=4, inner_steps=5, outer_steps=6, lr=3e-3, warmup=5, batch=4, ctx=32,
                     layers=1, heads=2, width=32, eval_every=2, val_windows=16),
    "cpu-small": _CPU_SMALL,
    # NoLoCo reference configuration (pairs, H 50, alpha 0.5, beta = gamma = 0.7, Adam 6e-4,
    # cosine with warmup) on the cpu-small model
    "paper": {**_CPU_SMALL, "group_size": 2, "inner_steps": 50, "outer_steps": 30, "alpha": 0.5, "beta": 0.7,
              "gamma": 0.7, "lr": 6e-4, "schedule": "cosine", "warmup": 100, "eval_every": 3},
    "gpu": dict(replicas=8, group_size=2, inner_steps=50, outer_steps=40, lr=1e-3, warmup=200, batch=32,
                ctx=256, layers=6, heads=8, width=384, eval_every=4, val_windows=256, device="cuda",
                dtype="bfloat16"),
}


def build(preset: str | None = None, method: str | None = None, **overrides) -> TrainConfig:
    """Preset, then the method's defaults, then ``overrides`` (None values ignored)."""
    values = dict(PRESETS[preset]) if preset else {}
    method = method or overrides.pop("method", None) or "noloco"
    if method not in METHODS:
        raise ConfigError(f"method={method!r} is not allowed; allowed: {', '.join(METHODS)}")
    values.update(METHOD_DEFAULTS[method])
    values.update({k: v for k, v in overrides.items() if v is not None})
    return TrainConfig(method=method, **values)


# ------------------------------------------------------------------ flags

_FLAG_HELP = {
    "replicas": "number of replicas N", "group_size": "group size n for noloco (divides N)",
    "alpha": "outer momentum", "beta": "outer learning rate on the group-mean progress",
    "gamma": "pull towards the group-mean weights", "inner_steps": "inner steps H per outer step",
    "outer_steps": "outer steps", "lr": "inner AdamW peak learning rate",
    "min_lr_frac": "cosine floor as a fraction of lr", "warmup": "warm-up inner steps",
    "weight_decay": "AdamW weight decay", "clip": "per-replica gradient norm clip (0: off)",
    "batch": "windows per replica per inner step", "ctx": "context length (bytes)",
    "layers": "transformer blocks", "heads": "attention heads", "width": "model width",
    "eval_every": "outer steps between evaluations and checkpoints", "val_windows": "validation windows",
    "seed": "seed of initialisation, data and groups", "device": "cpu or cuda",
}


def add_train_arguments(parser: argparse.ArgumentParser, methods_list: bool = False) -> None:
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        help="cpu-tiny: smoke run < 1 min; cpu-small: N = 8 comparison on a 2-core CPU; "
                             "paper: NoLoCo reference outer/inner settings; gpu: one H100/H200")
    parser.add_argument("--method", default=None,
                        help=f"one of {', '.join(METHODS)}" + (" or a comma-separated list" if methods_list else ""))
    for f in fields(TrainConfig):
        if f.name in ("method", "noniid", "momentum", "schedule", "dtype", "replica_mode"):
            continue
        flag = "--" + f.name.replace("_", "-")
        parser.add_argument(flag, type=type(f.default), default=None, help=_FLAG_HELP.get(f.name))
    parser.add_argument("--momentum", choices=MOMENTUM_CONVENTIONS, default=None)
    parser.add_argument("--schedule", choices=("cosine", "constant"), default=None)
    parser.add_argument("--dtype", choices=DTYPES, default=None)
    parser.add_argument("--replica-mode", choices=REPLICA_MODES, default=None,
                        help="batched replica-dimension model, a loop over replicas, or auto (batched)")
    parser.add_argument("--noniid", action="store_true", default=None,
                        help="non-IID shards: each replica reads different source files")
    parser.add_argument("--out", required=True, help="output directory (metrics.jsonl, checkpoints, result.json)")
    parser.add_argument("--resume", action="store_true", help="continue from OUT's last checkpoint")
    parser.add_argument("--stop-after", type=int, default=None,
                        help="stop after this many outer steps, as if interrupted (resume with --resume)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default torch's; 1 is much faster on a shared, busy CPU)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait for a peer in distributed mode before failing")


def config_from_args(args, method: str | None = None) -> TrainConfig:
    names = [f.name for f in fields(TrainConfig) if f.name != "method"]
    return build(args.preset, method or args.method, **{k: getattr(args, k, None) for k in names})
