"""Monte Carlo of NoLoCo, DiLoCo, local SGD and data parallel: real inner steps, the
shared outer step, fresh random groups, many independent trials at once.

Arrays are (trials, N, d). Every trial is an independent run with its own partitions
and noise, so quantities averaged over trials have honest standard errors.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from quadratic.inner import InnerOptimizer, learning_rates
from quadratic.names import METHODS, OBJECTIVES, OPTIMIZERS, SCHEDULES, SPLITS
from quadratic.objectives import build
from theory.config import ConfigError, InnerConfig, OuterConfig
from theory.outer import outer_step
from theory.partitions import group_mean, random_permutations

SCHEMA_VERSION = 1
#: a run is divergent when any |phi - optimum| exceeds this many times its initial scale
GROWTH_BOUND = 1e6


@dataclass(frozen=True)
class SimConfig:
    """Everything a simulation depends on (its hash is the cache key)."""

    outer: OuterConfig = OuterConfig()
    inner: InnerConfig = InnerConfig()
    objective: str = "quadratic"
    curvatures: tuple = (1.0,)
    rotate: bool = False
    zeta: float = 0.0              # spread of the replicas' optima (quadratic heterogeneity)
    split: str = "shared"          # data objectives: shared, iid, label, kmeans
    batch_size: int = 0            # 0: full-shard gradient; else minibatch rows with replacement
    l2: float = 1e-2
    optimizer: str = "sgd"
    inner_momentum: float = 0.9
    schedule: str = "constant"
    warmup: int = 0
    decay_time: float = 50.0
    method: str = "noloco"
    trials: int = 200
    outer_steps: int = 200
    burn_in: int | None = None     # steps before the stationary window; None: half the run
    start: float = 1.0             # initial phi = optimum + start (every coordinate)
    init_spread: float = 0.0       # std of independent initial offsets per replica (made zero-mean)
    seed: int = 0

    def __post_init__(self):
        checks = [
            ("objective", self.objective in OBJECTIVES, ", ".join(OBJECTIVES)),
            ("split", self.split in SPLITS, ", ".join(SPLITS)),
            ("optimizer", self.optimizer in OPTIMIZERS, ", ".join(OPTIMIZERS)),
            ("schedule", self.schedule in SCHEDULES, ", ".join(SCHEDULES)),
            ("method", self.method in METHODS, ", ".join(METHODS)),
            ("trials", isinstance(self.trials, int) and self.trials >= 2, "an integer >= 2"),
            ("outer_steps", isinstance(self.outer_steps, int) and self.outer_steps >= 1, "an integer >= 1"),
            ("batch_size", isinstance(self.batch_size, int) and self.batch_size >= 0, "an integer >= 0"),
            ("zeta", self.zeta >= 0, ">= 0"),
            ("l2", self.l2 >= 0, ">= 0"),
            ("init_spread", self.init_spread >= 0, ">= 0"),
            ("seed", isinstance(self.seed, int) and self.seed >= 0, "an integer >= 0"),
            ("burn_in", self.burn_in is None or 0 <= self.burn_in < self.outer_steps,
             f"0 <= burn_in < outer_steps={self.outer_steps}"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)!r} is not allowed; allowed: {allowed}")
        object.__setattr__(self, "curvatures", tuple(float(v) for v in self.curvatures))

    def effective(self) -> tuple[OuterConfig, InnerConfig]:
        """The method as a configuration: DiLoCo n = N, local n = 1, data parallel
        H = 1, n = N, alpha = 0, beta = 1, gamma = 0."""
        o, i = self.outer, self.inner
        if self.method == "diloco":
            o = dataclasses.replace(o, group_size=o.replicas)
        elif self.method == "local":
            o = dataclasses.replace(o, group_size=1)
        elif self.method == "ddp":
            o = dataclasses.replace(o, group_size=o.replicas, alpha=0.0, beta=1.0, gamma=0.0)
            i = dataclasses.replace(i, steps=1)
        return o, i

    @property
    def window_start(self) -> int:
        return self.outer_steps // 2 if self.burn_in is None else self.burn_in

    def as_dict(self) -> dict:
        return asdict(self)

    def key(self) -> str:
        """Hash of the configuration and of the code that produces the result."""
        digest = hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode())
        root = Path(__file__).resolve().parent.parent
        for path in sorted((root / "quadratic").glob("*.py")) + [
                root / "theory" / name for name in ("outer.py", "partitions.py", "numeric.py", "symbolic.py")]:
            digest.update(path.read_bytes())
        return digest.hexdigest()[:24]


class _Moments:
    """Mean and standard error over trials, accumulated step by step."""

    def __init__(self):
        self.mean, self.se = [], []

    def add(self, values):  # values: (trials, ...)
        self.mean.append(values.mean(0))
        self.se.append(values.std(0, ddof=1) / np.sqrt(len(values)))

    def as_dict(self):
        return {"mc": np.array(self.mean).tolist(), "se": np.array(self.se).tolist()}


@dataclass
class Run:
    """Raw simulation output (per step: mean over trials and its standard error)."""

    config: SimConfig
    eigvals: np.ndarray             # Hessian at the optimum, ascending
    eigvecs: np.ndarray
    mean_distance: _Moments = field(default_factory=_Moments)   # E[mean_i phi_i - x*] in eigen-coordinates
    spread: _Moments = field(default_factory=_Moments)          # sum over coordinates of mean_i (phi_i - phi_bar)^2
    loss_at_mean: _Moments = field(default_factory=_Moments)    # global loss at the average weights
    loss_replicas: _Moments = field(default_factory=_Moments)   # global loss averaged over replicas
    spread_trials: list = field(default_factory=list)           # per step: the spread of every trial
    window_spread: np.ndarray | None = None                     # per trial: spread averaged over the window
    diverged_at: int | None = None
    divergence_reason: str = ""
    steps_done: int = 0
    objective: object = None


def simulate(cfg: SimConfig, *, progress: bool = False) -> Run:
    """Run ``cfg.trials`` independent trials of ``cfg.outer_steps`` outer steps."""
    try:  # the matrices are small: BLAS threads only spin, and on a busy machine badly
        from threadpoolctl import threadpool_limits
    except ImportError:
        return _simulate(cfg, progress)
    with threadpool_limits(1):
        return _simulate(cfg, progress)


def _simulate(cfg: SimConfig, progress: bool) -> Run:
    from tqdm import tqdm

    outer, inner = cfg.effective()
    T, N, H = cfg.trials, outer.replicas, inner.steps
    obj = build(cfg, np.random.default_rng([cfg.seed, 1]))
    rng = np.random.default_rng([cfg.seed, 2])
    eigvals, eigvecs = np.linalg.eigh(obj.hessian())
    run = Run(cfg, eigvals, eigvecs, objective=obj)

    phi = np.broadcast_to(obj.optimum + cfg.start, (T, N, obj.dim)).copy()
    if cfg.init_spread:  # offsets with zero mean over replicas: the mean stays at the start
        offsets = cfg.init_spread * rng.standard_normal(phi.shape)
        phi += offsets - offsets.mean(1, keepdims=True)
    delta = np.zeros_like(phi)
    theta, grad, noise = (np.empty_like(phi) for _ in range(3))
    optimizer = InnerOptimizer(cfg.optimizer, phi.shape, momentum=cfg.inner_momentum)
    lrs = learning_rates(cfg.schedule, inner.lr, cfg.outer_steps * H, warmup=cfg.warmup, decay_time=cfg.decay_time)
    bound = GROWTH_BOUND * max(1.0, abs(cfg.start), cfg.init_spread, inner.noise)
    window = np.zeros(T)

    def record(t):
        mean = phi.mean(1)
        # deviations from replica 0, not from the rounded mean: identical replicas give exactly 0
        dev = phi - phi[:, :1]
        dev_mean = dev.mean(1)
        spread = np.einsum("tnd,tnd->t", dev, dev) / N - np.einsum("td,td->t", dev_mean, dev_mean)
        run.mean_distance.add((mean - obj.optimum) @ eigvecs)
        run.spread.add(spread)
        run.spread_trials.append(spread)
        run.loss_at_mean.add(obj.loss(mean))
        run.loss_replicas.add(obj.loss(phi).mean(1))
        if t >= cfg.window_start:
            window[:] += spread

    record(0)
    k = 0
    for t in tqdm(range(1, cfg.outer_steps + 1), desc=f"simulate {cfg.method}", unit="step",
                  disable=not progress, leave=False):
        theta[...] = phi
        for _ in range(H):
            obj.grad(theta, rng, out=grad)
            if inner.noise:
                rng.standard_normal(out=noise)
                noise *= inner.noise
                grad += noise
            optimizer.step(theta, grad, lrs[k])
            k += 1
        progress_ = np.subtract(theta, phi, out=theta)  # theta is rebuilt from phi next step
        perm = random_permutations(rng, (T,), N)
        phi, delta = outer_step(phi, delta, group_mean(phi, perm, outer.group_size),
                                group_mean(progress_, perm, outer.group_size), **outer.rule())
        run.steps_done = t
        distance = np.abs(phi - obj.optimum)
        if not np.isfinite(phi).all() or distance.max() > bound:
            run.diverged_at = t
            run.divergence_reason = ("NaN or inf in the weights" if not np.isfinite(phi).all()
                                     else f"|phi - optimum| = {distance.max():.3g} exceeds the bound {bound:.3g}")
            break
        record(t)
    if run.diverged_at is None:
        run.window_spread = window / (cfg.outer_steps - cfg.window_start + 1)
    return run
