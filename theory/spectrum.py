"""Quadratic objectives described by their Hessian eigenvalues (curvatures)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from theory.config import ConfigError

#: the curvature of the one-direction quadratic when none is given
DEFAULT_CURVATURE = 1.0


@dataclass(frozen=True)
class Spectrum:
    """Curvatures lambda_k > 0 of the eigen-directions of a quadratic."""

    curvatures: tuple

    def __post_init__(self):
        values = tuple(float(v) for v in np.atleast_1d(np.asarray(self.curvatures, dtype=float)))
        if not values:
            raise ConfigError("spectrum is empty; allowed: at least one curvature > 0")
        for v in values:
            if not (v > 0 and math.isfinite(v)):
                raise ConfigError(f"curvature={v!r} is out of range; allowed: 0 < curvature < inf")
        object.__setattr__(self, "curvatures", values)

    @property
    def array(self) -> np.ndarray:
        return np.asarray(self.curvatures)

    @classmethod
    def uniform(cls, low: float, high: float, count: int) -> "Spectrum":
        """``count`` curvatures evenly spaced in [low, high]."""
        if count < 1 or not (0 < low <= high):
            raise ConfigError(f"uniform spectrum low={low}, high={high}, count={count}; allowed: 0 < low <= high, count >= 1")
        return cls(tuple(np.linspace(low, high, count)))

    @classmethod
    def power_law(cls, high: float, exponent: float, count: int) -> "Spectrum":
        """lambda_k = high * k^(-exponent), k = 1..count (a heavy-tailed Hessian spectrum)."""
        if count < 1 or not high > 0 or not exponent >= 0:
            raise ConfigError(f"power-law spectrum high={high}, exponent={exponent}, count={count}; allowed: high > 0, exponent >= 0, count >= 1")
        return cls(tuple(high * np.arange(1, count + 1, dtype=float) ** (-exponent)))

    @classmethod
    def parse(cls, text: str) -> "Spectrum":
        """``"0.1,1,10"`` (a list), ``"uniform:LOW:HIGH:COUNT"`` or ``"powerlaw:HIGH:EXPONENT:COUNT"``."""
        try:
            kind, _, rest = text.partition(":")
            if kind == "uniform":
                low, high, count = rest.split(":")
                return cls.uniform(float(low), float(high), int(count))
            if kind == "powerlaw":
                high, exponent, count = rest.split(":")
                return cls.power_law(float(high), float(exponent), int(count))
            return cls(tuple(float(v) for v in text.split(",")))
        except ValueError as err:
            if isinstance(err, ConfigError):
                raise
            raise ConfigError(
                f"spectrum={text!r} is not understood; allowed: 'L1,L2,...', 'uniform:LOW:HIGH:COUNT', "
                "'powerlaw:HIGH:EXPONENT:COUNT'") from None
