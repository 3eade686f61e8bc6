"""Monte Carlo of NoLoCo, DiLoCo, local SGD and data parallel: real inner steps, the
shared outer step, fresh random groups, many independent trials at once.

Arrays are (trials, N, d). Every trial is an independent run with its own partitions
and noise, so quantities averaged over trials have honest standard errors.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, field

import numpy as np

from quadratic.inner import InnerOptimizer
from quadratic.names import METHODS, OBJECTIVES, OPTIMIZERS, SCHEDULES, SPLITS
from quadratic.objectives import build
from theory.config import (ConfigError, InnerConfig, OuterConfig, check_choice, check_fields, check_integer,
                           check_real)
from theory.methods import constrain
from theory.outer import outer_step
from theory.partitions import group_mean, random_permutations
from theory.schedules import learning_rate, learning_rates
from theory.spectrum import DEFAULT_CURVATURE, Spectrum
from theory.stats import mean_se

#: a run is divergent when any |phi - optimum| exceeds this many times its initial scale
GROWTH_BOUND = 1e6

_FINITE = "a finite number"
_NON_NEGATIVE = "0 <= value < inf"


def _non_negative(v):
    return 0 <= v < math.inf


@dataclass(frozen=True)
class SimConfig:
    """Everything a simulation depends on (the request its cache entry is keyed by).

    Validated at construction: a bad value raises :class:`ConfigError` naming the field,
    the value and the allowed range, as do combinations that do not fit the objective
    (``curvatures`` or ``zeta`` with a data objective, a data ``split`` of the quadratic).
    ``curvatures=None`` means "not given": :data:`theory.spectrum.DEFAULT_CURVATURE` for the
    quadratic; a data objective takes its Hessian from the data.
    """

    outer: OuterConfig = OuterConfig()
    inner: InnerConfig = InnerConfig()
    objective: str = "quadratic"
    curvatures: tuple | None = None
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
        check_fields(self, {
            "objective": (check_choice, OBJECTIVES),
            "split": (check_choice, SPLITS),
            "optimizer": (check_choice, OPTIMIZERS),
            "schedule": (check_choice, SCHEDULES),
            "method": (check_choice, METHODS),
            "trials": (check_integer, "an integer >= 2", lambda v: v >= 2),
            "outer_steps": (check_integer, "an integer >= 1", lambda v: v >= 1),
            "batch_size": (check_integer, "an integer >= 0", lambda v: v >= 0),
            "seed": (check_integer, "an integer >= 0", lambda v: v >= 0),
            "zeta": (check_real, _NON_NEGATIVE, _non_negative),
            "l2": (check_real, _NON_NEGATIVE, _non_negative),
            "init_spread": (check_real, _NON_NEGATIVE, _non_negative),
            "start": (check_real, _FINITE, math.isfinite),
            "inner_momentum": (check_real, "0 <= inner_momentum < 1", lambda v: 0 <= v < 1),
            "decay_time": (check_real, "0 < decay_time < inf", lambda v: 0 < v < math.inf),
            "warmup": (check_integer, "an integer >= 0", lambda v: v >= 0),
        })
        if self.burn_in is not None:  # None: half the run
            check_fields(self, {"burn_in": (check_integer, f"0 <= burn_in < outer_steps={self.outer_steps}",
                                            lambda v: 0 <= v < self.outer_steps)})
        # the schedule's own range checks (warmup shorter than the run)
        learning_rate(0, self.schedule, self.inner.lr, self.outer_steps * self.effective()[1].steps,
                      warmup=self.warmup, decay_time=self.decay_time)
        if self.objective == "quadratic":
            curvatures = (DEFAULT_CURVATURE,) if self.curvatures is None else self.curvatures
            object.__setattr__(self, "curvatures", Spectrum(curvatures).curvatures)  # validated there
            if self.split != "shared":
                raise ConfigError(f"split={self.split!r} needs a data objective; a quadratic's heterogeneity is zeta")
        else:
            if self.curvatures is not None:
                raise ConfigError(f"curvatures={self.curvatures!r} describe the quadratic; "
                                  f"objective={self.objective!r} takes its Hessian from the data")
            if self.zeta:
                raise ConfigError(f"zeta={self.zeta!r} applies to the quadratic objective; data objectives "
                                  "are made heterogeneous by split")

    def effective(self) -> tuple[OuterConfig, InnerConfig]:
        """The outer and inner settings with the method's constraints (:mod:`theory.methods`)."""
        return constrain(self.method, self.outer, self.inner)

    @property
    def window_start(self) -> int:
        return self.outer_steps // 2 if self.burn_in is None else self.burn_in

    def as_dict(self) -> dict:
        return asdict(self)

    def learning_rates(self) -> np.ndarray:
        """The inner learning rate of every inner step of the run, shape (outer_steps, H)."""
        H = self.effective()[1].steps
        return learning_rates(self.schedule, self.inner.lr, self.outer_steps * H, warmup=self.warmup,
                              decay_time=self.decay_time).reshape(self.outer_steps, H)


class _Moments:
    """Mean and standard error over trials, accumulated step by step."""

    def __init__(self):
        self.mean, self.se = [], []

    def add(self, values):  # values: (trials, ...)
        mean, se = mean_se(values)
        self.mean.append(mean)
        self.se.append(se)

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
    """Run ``cfg.trials`` independent trials of ``cfg.outer_steps`` outer steps; ``progress``
    shows a tqdm bar when stderr is a terminal."""
    try:  # the matrices are small: BLAS threads only spin, and on a busy machine badly
        from threadpoolctl import threadpool_limits
    except ImportError:
        return _simulate(cfg, progress)
    with threadpool_limits(1):
        return _simulate(cfg, progress)


def _simulate(cfg: SimConfig, progress: bool) -> Run:
    from tqdm import tqdm

    outer, inner = cfg.effective()
    trials, N, H = cfg.trials, outer.replicas, inner.steps
    obj = build(cfg, np.random.default_rng([cfg.seed, 1]))
    rng = np.random.default_rng([cfg.seed, 2])
    eigvals, eigvecs = np.linalg.eigh(obj.hessian())
    run = Run(cfg, eigvals, eigvecs, objective=obj)

    phi = np.broadcast_to(obj.optimum + cfg.start, (trials, N, obj.dim)).copy()
    if cfg.init_spread:  # offsets with zero mean over replicas: the mean stays at the start
        offsets = cfg.init_spread * rng.standard_normal(phi.shape)
        phi += offsets - offsets.mean(1, keepdims=True)
    outer_momentum = np.zeros_like(phi)
    theta, grad, noise = (np.empty_like(phi) for _ in range(3))
    optimizer = InnerOptimizer(cfg.optimizer, phi.shape, momentum=cfg.inner_momentum)
    lrs = cfg.learning_rates().ravel()
    bound = GROWTH_BOUND * max(1.0, abs(cfg.start), cfg.init_spread, inner.noise)
    window = np.zeros(trials)

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
                  disable=not (progress and sys.stderr.isatty()), leave=False):
        theta[...] = phi
        for _ in range(H):
            obj.grad(theta, rng, out=grad)
            if inner.noise:
                rng.standard_normal(out=noise)
                noise *= inner.noise
                grad += noise
            optimizer.step(theta, grad, lrs[k])
            k += 1
        delta_theta = np.subtract(theta, phi, out=theta)  # theta is rebuilt from phi next step
        perm = random_permutations(rng, (trials,), N)
        phi, outer_momentum = outer_step(phi, outer_momentum, group_mean(phi, perm, outer.group_size),
                                         group_mean(delta_theta, perm, outer.group_size), **outer.rule())
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
