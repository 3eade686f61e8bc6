"""The validated settings of one simulation (:class:`SimConfig`): the outer and inner settings, the objective,
the inner mode, trials, steps and seed (:mod:`noloco.quadratic.simulator` runs it)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from noloco.quadratic.names import DTYPES, INNER_MODES, METHODS, OBJECTIVES, OPTIMIZERS, SCHEDULES, SPLITS
from noloco.infra.errors import ConfigError
from noloco.theory.config import InnerConfig, OuterConfig
from noloco.infra.checks import (check_choice, check_fields, check_flag, check_instance, check_integer, check_real,
                                 check_scale, check_seed)
from noloco.theory.methods import constrain
from noloco.theory.schedules import learning_rate, learning_rates
from noloco.theory.spectrum import DEFAULT_CURVATURE, Spectrum

_FINITE = "a finite number"
_NON_NEGATIVE = "0 <= value < inf"


def _non_negative(v):
    return 0 <= v < math.inf


@dataclass(frozen=True)
class SimConfig:
    """Everything a simulation depends on: the request its cache entry is keyed by.

    :func:`noloco.simulate` builds one from its arguments and returns it in ``Simulation.config``; the
    Monte Carlo (:mod:`noloco.quadratic.simulator`) takes it whole. ``curvatures=None`` means "not given":
    :data:`noloco.theory.spectrum.DEFAULT_CURVATURE` for the quadratic; a data objective takes its Hessian
    from the data.

    Args:
        outer: the :class:`noloco.OuterConfig`. inner: the :class:`noloco.InnerConfig`.
        objective: ``"quadratic"`` or a convex problem on packaged data (``noloco simulate --help``).
        curvatures: the quadratic's curvatures (a tuple), or None. rotate: rotate its eigenbasis.
        zeta: spread of the replicas' optima. split: how data objectives are shared across replicas.
        batch_size: minibatch rows per inner step (0: full gradient). l2: L2 term of the data objectives.
        optimizer: the inner optimizer (``"sgd"``, momentum or Adam). inner_momentum: its momentum.
        schedule, warmup, decay_time: the inner learning rate's schedule.
        method: ``"noloco"``, ``"diloco"``, ``"local"`` or ``"ddp"``.
        trials: independent trials, >= 2. outer_steps: per trial, >= 1. burn_in: outer steps before the
            stationary window (None: half the run).
        start: initial offset of every coordinate from the optimum. init_spread: std of independent
            initial offsets per replica. seed: the random seed.
        inner_mode: ``"auto"``, ``"exact"`` or ``"explicit"``. dtype: of the simulated weights.

    Returns:
        The frozen configuration; ``as_dict()`` is its cache key's data.

    Raises:
        ConfigError: a value out of range, or a combination that does not fit the objective
            (``curvatures`` or ``zeta`` with a data objective, a data ``split`` of the quadratic,
            ``inner_mode='exact'`` where the inner phase has no closed form).

    Examples:
        >>> import noloco
        >>> cfg = noloco.SimConfig(trials=8, outer_steps=20, curvatures=(0.5, 1.0))
        >>> cfg.method, cfg.outer.group_size, cfg.inner_mode
        ('noloco', 2, 'auto')
        >>> noloco.SimConfig(objective="diabetes", curvatures=(1.0,))
        Traceback (most recent call last):
        ...
        noloco.infra.errors.ConfigError: ...
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
    inner_mode: str = "auto"       # exact, explicit, or auto (exact wherever it is exact)
    dtype: str = "float64"         # of the weights; float32 only on the quadratic's eigenbasis

    def __post_init__(self):
        check_instance("outer", self.outer, OuterConfig, "an OuterConfig (noloco.resolve gives one)")
        check_instance("inner", self.inner, InnerConfig, "an InnerConfig (noloco.resolve gives one)")
        check_fields(self, {
            "objective": (check_choice, OBJECTIVES),
            "split": (check_choice, SPLITS),
            "optimizer": (check_choice, OPTIMIZERS),
            "schedule": (check_choice, SCHEDULES),
            "method": (check_choice, METHODS),
            "inner_mode": (check_choice, INNER_MODES),
            "dtype": (check_choice, DTYPES),
            "trials": (check_integer, "an integer >= 2", lambda v: v >= 2),
            "outer_steps": (check_integer, "an integer >= 1", lambda v: v >= 1),
            "batch_size": (check_integer, "an integer >= 0", lambda v: v >= 0),
            "seed": (check_seed,),
            "zeta": (check_scale,),
            "l2": (check_real, _NON_NEGATIVE, _non_negative),
            "init_spread": (check_scale,),
            "start": (check_real, _FINITE, math.isfinite),
            "inner_momentum": (check_real, "0 <= inner_momentum < 1", lambda v: 0 <= v < 1),
            "decay_time": (check_real, "0 < decay_time < inf", lambda v: 0 < v < math.inf),
            "warmup": (check_integer, "an integer >= 0", lambda v: v >= 0),
        })
        check_flag("rotate", self.rotate)  # 'no' would rotate, and key the cache on 'no'
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
        obstacle = self.exact_obstacle()
        if self.inner_mode == "exact" and obstacle:
            raise ConfigError(f"inner_mode='exact' {obstacle}; allowed there: inner_mode='explicit' or 'auto'")
        if self.dtype == "float32" and not self.eigenbasis:
            raise ConfigError(f"dtype='float32' needs the quadratic objective without rotation (or with "
                              f"inner_mode='exact'); objective={self.objective!r}, rotate={self.rotate!r}")

    def exact_obstacle(self) -> str:
        """Why the exact inner phase would not be exact for this setting ('' where it is)."""
        if self.objective != "quadratic":
            return f"needs the quadratic objective (objective={self.objective!r} takes data gradients)"
        if self.optimizer != "sgd":
            return f"needs inner SGD (optimizer={self.optimizer!r} carries state through the inner steps)"
        return ""

    @property
    def inner_law(self) -> str:
        """The inner phase actually simulated: ``exact`` or ``explicit``."""
        if self.inner_mode == "auto":
            return "explicit" if self.exact_obstacle() else "exact"
        return self.inner_mode

    @property
    def eigenbasis(self) -> bool:
        """True when the run is simulated direction by direction in the quadratic's eigenbasis
        (streamed over directions): the quadratic without rotation, or any quadratic in exact mode.
        Otherwise the weights are simulated in their own coordinates, all directions at once."""
        return self.objective == "quadratic" and (not self.rotate or self.inner_law == "exact")

    def effective(self) -> tuple[OuterConfig, InnerConfig]:
        """The outer and inner settings with the method's constraints (:mod:`noloco.theory.methods`)."""
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
