"""Quadratic objectives described by their Hessian eigenvalues (curvatures).

A spectrum is a list of curvatures, or a generated one (``uniform:`` and ``powerlaw:``) of
any size: a generated spectrum of more than :data:`MATERIALISED` directions keeps only its
rule, and :meth:`Spectrum.chunks` yields its values a block at a time, so that totals over
10^8 directions take bounded memory. The values are the same however they are produced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np

from noloco.infra.errors import ConfigError

#: the curvature of the one-direction quadratic when none is given
DEFAULT_CURVATURE = 1.0
#: generated spectra up to this size also hold their values as a tuple (``curvatures``)
MATERIALISED = 1_000_000
#: directions per chunk of :meth:`Spectrum.chunks`
CHUNK = 1 << 16
KINDS = ("list", "uniform", "powerlaw")
#: the most directions a generated spectrum may have: `noloco check` evaluates about 1e7 a second on one
#: core (76 to 160 ns a direction, docs/performance.md), so 1e10 is 15 to 30 minutes; 1e20 would be millennia
MAX_COUNT = 10**10


def _check_count(kind: str, count: int) -> int:
    if not 1 <= count <= MAX_COUNT:
        raise ConfigError(f"{kind} spectrum count={count} is out of range; allowed: 1 <= count <= {MAX_COUNT:.0e} "
                          "(at about 1e7 directions a second, 1e10 already takes 15 to 30 minutes)")
    return int(count)


@dataclass(frozen=True)
class Spectrum:
    """Curvatures lambda_k > 0 of the eigen-directions of a quadratic, the objective the theory is exact on.

    ``Spectrum((0.1, 1.0))`` is a list; :meth:`uniform` and :meth:`power_law` generate one of up to
    10^10 directions and :meth:`parse` reads the command line's form. A generated spectrum above
    :data:`MATERIALISED` directions keeps only its rule and yields its values in chunks, so totals take
    bounded memory.

    Args:
        curvatures: a number or a sequence of numbers > 0 (for ``kind="list"``).
        kind: ``"list"``, ``"uniform"`` or ``"powerlaw"`` (set by the generators).
        params: the generator's parameters. size: the number of directions (set for you).

    Returns:
        The frozen spectrum; ``count`` directions, ``curvatures`` their values (None above
        :data:`MATERIALISED`).

    Raises:
        ConfigError: an empty list, a value that is not a number > 0 and finite, or a count out of range.

    Examples:
        >>> import noloco
        >>> noloco.Spectrum((0.1, 1.0)).count
        2
        >>> noloco.Spectrum.uniform(0.1, 1.0, 5).curvatures
        (0.1, 0.325, 0.55, 0.775, 1.0)
        >>> noloco.Spectrum.parse("powerlaw:1:1:4").curvatures
        (1.0, 0.5, 0.3333333333333333, 0.25)
    """

    curvatures: tuple | None = None
    kind: str = "list"
    params: tuple = ()
    size: int = 0

    def __post_init__(self):
        if self.kind == "list":
            try:
                if self.curvatures is None:  # numpy reads None as nan: named here, not as 'curvature=nan'
                    raise TypeError
                values = tuple(float(v) for v in np.atleast_1d(np.asarray(self.curvatures, dtype=float)))
            except (TypeError, ValueError):  # 'x', a nested or ragged list: named, not numpy's message
                shown = repr(self.curvatures)
                raise ConfigError(f"curvatures={shown if len(shown) <= 60 else shown[:57] + '...'} are not numbers; "
                                  "allowed: curvatures > 0 (a number or a list of them)") from None
            if not values:
                raise ConfigError("spectrum is empty; allowed: at least one curvature > 0")
            for v in values:
                if not (v > 0 and math.isfinite(v)):
                    raise ConfigError(f"curvature={v!r} is out of range; allowed: 0 < curvature < inf")
            object.__setattr__(self, "curvatures", values)
            object.__setattr__(self, "size", len(values))
        elif self.size <= MATERIALISED and self.curvatures is None:
            object.__setattr__(self, "curvatures", tuple(float(v) for v in self.array))

    @property
    def count(self) -> int:
        """Number of directions."""
        return self.size

    @property
    def low(self) -> float:
        if self.kind == "uniform":
            return self.params[0]
        if self.kind == "powerlaw":
            return self._powerlaw(np.array([self.size], dtype=float))[0]
        return min(cast(tuple, self.curvatures))  # a list spectrum's are always set

    @property
    def high(self) -> float:
        if self.kind == "list":
            return max(cast(tuple, self.curvatures))
        return self.params[1] if self.kind == "uniform" else self.params[0]

    def _uniform(self, k: np.ndarray) -> np.ndarray:
        """Values at 0-based positions k, as ``np.linspace(low, high, size)`` computes them."""
        low, high = self.params
        if self.size == 1:
            return np.full(k.shape, low)
        values = k * ((high - low) / (self.size - 1)) + low
        values[k == self.size - 1] = high
        return values

    def _powerlaw(self, k1: np.ndarray) -> np.ndarray:
        """Values at 1-based positions k1: high * k^(-exponent)."""
        high, exponent = self.params
        return high * k1 ** (-exponent)

    def chunks(self, size: int = CHUNK):
        """The curvatures in order, as numpy arrays of at most ``size`` values."""
        for start in range(0, self.size, size):
            stop = min(self.size, start + size)
            if self.kind == "list":
                yield np.asarray(cast(tuple, self.curvatures)[start:stop], dtype=float)
            elif self.kind == "uniform":
                yield self._uniform(np.arange(start, stop, dtype=float))
            else:
                yield self._powerlaw(np.arange(start + 1, stop + 1, dtype=float))

    @property
    def array(self) -> np.ndarray:
        """Every curvature as one array (``size`` x 8 bytes)."""
        return np.concatenate(list(self.chunks())) if self.size else np.zeros(0)

    def values(self) -> tuple:
        """Every curvature as a tuple (what :class:`noloco.quadratic.sim_config.SimConfig` takes)."""
        return self.curvatures if self.curvatures is not None else tuple(float(v) for v in self.array)

    @classmethod
    def uniform(cls, low: float, high: float, count: int) -> "Spectrum":
        """``count`` curvatures evenly spaced in [low, high] (the values of ``np.linspace``)."""
        if count < 1 or not (0 < low <= high < math.inf):
            raise ConfigError(f"uniform spectrum low={low}, high={high}, count={count}; allowed: 0 < low <= high, count >= 1")
        return cls(None, "uniform", (float(low), float(high)), _check_count("uniform", count))

    @classmethod
    def power_law(cls, high: float, exponent: float, count: int) -> "Spectrum":
        """lambda_k = high * k^(-exponent), k = 1..count (a heavy-tailed Hessian spectrum)."""
        if count < 1 or not 0 < high < math.inf or not 0 <= exponent < math.inf:
            raise ConfigError(f"power-law spectrum high={high}, exponent={exponent}, count={count}; allowed: high > 0, exponent >= 0, count >= 1")
        spectrum = cls(None, "powerlaw", (float(high), float(exponent)), _check_count("power-law", count))
        if not spectrum.low > 0:
            raise ConfigError(f"power-law spectrum high={high}, exponent={exponent}, count={count}: the smallest "
                              f"curvature underflows to {spectrum.low!r}; allowed: curvatures > 0")
        return spectrum

    @classmethod
    def parse(cls, text: str) -> "Spectrum":
        """``"0.1,1,10"`` (a list), ``"uniform:LOW:HIGH:COUNT"`` or ``"powerlaw:HIGH:EXPONENT:COUNT"``."""
        if not isinstance(text, str):  # None or a number: named, not an AttributeError (Spectrum(...) takes numbers)
            raise ConfigError(f"spectrum={text!r} is {type(text).__name__}; expected a string such as "
                              "'uniform:LOW:HIGH:COUNT' (noloco.Spectrum([1.0]) takes numbers)")
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
