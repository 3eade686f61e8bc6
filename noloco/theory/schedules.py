"""Learning-rate schedules of the inner optimizer, one definition for the quadratic
simulator and the LLM trainer (numpy, so it works on one step or on all of them)."""

from __future__ import annotations

import math

import numpy as np

from noloco.infra.errors import ConfigError
from noloco.infra.checks import check_choice

SCHEDULES = ("constant", "cosine", "inverse")


def learning_rate(step, schedule: str, lr: float, total: int, *, warmup: int = 0, floor: float = 0.0,
                  decay_time: float = 1.0):
    """Learning rate at inner step(s) ``step`` (0-based) of a run of ``total`` inner steps.

    Every schedule starts with a linear warm-up ``lr * (k + 1) / warmup`` over ``warmup`` steps.
    constant: then ``lr``. cosine: then from ``lr`` down to ``floor * lr`` along half a cosine
    over the remaining steps. inverse: ``lr / (1 + k / decay_time)``, the 1/t schedule under
    which SGD's noise vanishes. Returns a float for a scalar step, an array otherwise.
    """
    check_choice("schedule", schedule, SCHEDULES)
    if not 0 <= warmup < max(total, 1) and warmup:
        raise ConfigError(f"warmup={warmup} is out of range; allowed: 0 <= warmup < total inner steps ({total})")
    if schedule == "inverse" and not decay_time > 0:
        raise ConfigError(f"decay_time={decay_time} is out of range; allowed: > 0")
    k = np.asarray(step, dtype=float)
    if schedule == "constant":
        after = np.full_like(k, lr)
    elif schedule == "cosine":
        done = np.clip((k - warmup) / max(total - warmup, 1), 0, 1)
        after = floor * lr + 0.5 * (lr - floor * lr) * (1 + np.cos(math.pi * done))
    else:
        after = lr / (1.0 + k / decay_time)
    rate = np.where(k < warmup, lr * (k + 1) / max(warmup, 1), after)
    return float(rate) if rate.ndim == 0 else rate


def learning_rates(schedule: str, lr: float, total: int, **options) -> np.ndarray:
    """The learning rate of every inner step ``0 .. total - 1``."""
    return np.asarray(learning_rate(np.arange(total), schedule, lr, total, **options), dtype=float)
