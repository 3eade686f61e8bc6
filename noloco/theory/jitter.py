"""Compute-time jitter and heterogeneous hardware, and the closed forms of idle time they give.

A replica's compute time per outer step is ``slowdown * X`` with X ~ :class:`Jitter` (mean 1). A
global barrier (DiLoCo) waits every step for the slowest of N; a NoLoCo group for the slowest of its
n members. :func:`expected_max` is the expectation of such a maximum; the idle fractions that
follow from it in closed form are here, and the event simulation of everything else is
:mod:`noloco.quadratic.idle`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from noloco.infra.checks import check_choice, check_positive, check_real
from noloco.infra.errors import ConfigError
from noloco.theory.comm import check_group, check_replicas
from noloco.theory.draws import fast_gamma, fast_normal

JITTER_KINDS = ("lognormal", "gamma")
#: the smallest non-zero coefficient of variation: gamma's shape 1 / cv^2 and the quadrature of the expected
#: maximum stay well conditioned (at 1e-300 the shape overflows; below about 1e-100 the quadrature warns)
CV_MIN = 1e-6


@dataclass(frozen=True)
class Jitter:
    """Per-outer-step compute time multiplier: mean 1, coefficient of variation ``cv``.
    ``lognormal`` (sigma^2 = ln(1 + cv^2)) or ``gamma`` (shape 1 / cv^2); cv = 0 is no
    jitter."""

    kind: str = "lognormal"
    cv: float = 0.1

    def __post_init__(self):
        check_choice("jitter", self.kind, JITTER_KINDS)
        object.__setattr__(self, "cv", check_real(
            "jitter_cv", self.cv, f"jitter_cv = 0 (no jitter) or {CV_MIN:g} <= jitter_cv <= 10 (below {CV_MIN:g} the "
            "compute time is constant to 6 digits: give 0)", lambda v: v == 0 or CV_MIN <= v <= 10))

    def dist(self):
        """The frozen scipy distribution (mean 1), or None when cv = 0."""
        from scipy import stats

        if self.cv == 0:
            return None
        if self.kind == "lognormal":
            s2 = math.log1p(self.cv ** 2)
            return stats.lognorm(s=math.sqrt(s2), scale=math.exp(-s2 / 2))
        return stats.gamma(a=1 / self.cv ** 2, scale=self.cv ** 2)

    def sample(self, rng: np.random.Generator, out: np.ndarray, scratch=None) -> np.ndarray:
        """Fill the float32 or float64 array ``out`` with draws and return it: lognormal from
        :func:`noloco.theory.draws.fast_normal` with its fine tail, since the barrier waits for the
        maximum of N draws, which the coarse tail biases low (by 2.8 to 5.5 standard errors at
        N = 10^7); gamma from :func:`noloco.theory.draws.fast_gamma` (the same fine tail underneath).
        ``scratch``: ``fast_normal``'s."""
        if self.cv == 0:
            out.fill(1.0)
        elif self.kind == "lognormal":
            s2 = math.log1p(self.cv ** 2)
            fast_normal(rng, out, math.sqrt(s2), scratch, fine_tail=True)
            out += out.dtype.type(-s2 / 2)
            np.exp(out, out=out)
        else:
            fast_gamma(rng, 1 / self.cv ** 2, out, self.cv ** 2, scratch)
        return out


@dataclass(frozen=True)
class Hardware:
    """Heterogeneous hardware: classes of replicas, each a (fraction, slowdown) pair;
    a replica of slowdown s needs s times the base compute time. Default: one class."""

    classes: tuple = ((1.0, 1.0),)

    def __post_init__(self):
        classes = tuple((float(f), float(s)) for f, s in self.classes)
        if not classes:
            raise ConfigError("hardware=() is empty; allowed: one or more fraction:slowdown pairs")
        for f, s in classes:
            check_real("hardware fraction", f, "0 < fraction <= 1", lambda v: 0 < v <= 1)
            check_positive("hardware slowdown", s)
        total = sum(f for f, _ in classes)
        if abs(total - 1) > 1e-9:
            raise ConfigError(f"hardware fractions sum to {total!r}; allowed: fractions summing to 1")
        object.__setattr__(self, "classes", classes)

    @classmethod
    def parse(cls, text: str) -> "Hardware":
        """``'0.75:1,0.25:1.5'`` -> ``Hardware(((0.75, 1.0), (0.25, 1.5)))``."""
        try:
            pairs = [tuple(float(x) for x in item.split(":")) for item in text.split(",")]
        except ValueError:
            pairs = [()]
        if any(len(pair) != 2 for pair in pairs):
            raise ConfigError(f"hardware={text!r} is malformed; allowed: comma-separated fraction:slowdown pairs")
        return cls(tuple(pairs))

    @property
    def homogeneous(self) -> bool:
        return len({s for _, s in self.classes}) == 1

    def counts(self, replicas: int) -> np.ndarray:
        """Replicas per class for N replicas (largest remainder rounding)."""
        N = check_replicas(replicas)
        exact = np.array([f for f, _ in self.classes]) * N
        counts = np.floor(exact).astype(int)
        counts[np.argsort(counts - exact)[: N - counts.sum()]] += 1
        return counts

    def slowdowns(self, replicas: int) -> np.ndarray:
        """Per-replica slowdown factor, classes in consecutive blocks."""
        return np.repeat([s for _, s in self.classes], self.counts(replicas))


# ---------------------------------------------------------------- closed forms

def expected_max(jitter: Jitter, slowdowns, counts) -> float:
    """E[max] of independent compute times, ``counts[c]`` of them distributed as
    ``slowdowns[c] * X`` with X ~ ``jitter``:
    ``E[max] = int_0^inf (1 - prod_c F(x / s_c)^{k_c}) dx`` (Y >= 0), integrated with
    scipy.integrate.quad. For one class this is the expectation of the top order
    statistic, ``int x k F(x)^(k-1) f(x) dx`` (David & Nagaraja 2003, sec. 2.1).
    """
    from scipy.integrate import quad

    s = np.asarray(slowdowns, float)
    k = np.asarray(counts, float)
    keep = k > 0
    s, k = s[keep], k[keep]
    dist = jitter.dist()
    if dist is None:
        return float(s.max())
    total = k.sum()
    lo = float(s.min() * dist.ppf(1e-12))
    hi = float(s.max() * dist.isf(1e-14 / total))
    mid = [float(si * dist.ppf(1 - 1 / (ki + 1))) for si, ki in zip(s, k)]

    def tail(x: float) -> float:  # 1 - CDF of the maximum, via logs for large counts
        return -math.expm1(float(np.sum(k * dist.logcdf(x / s))))

    value, _ = quad(tail, lo, hi, points=sorted(set(mid)), limit=400, epsabs=1e-12, epsrel=1e-10)
    return lo + value


def barrier_idle_fraction(jitter: Jitter, replicas: int, hardware: Hardware = Hardware(),
                          sync_seconds: float = 0.0, compute_seconds: float = 1.0) -> float:
    """Closed form for a global barrier (DiLoCo): each outer step lasts the slowest
    replica's compute time plus the all-reduce, so a replica's idle fraction is
    ``1 - E[Y] / (E[max_N Y] + sync)``, exact because the barrier resets every step.
    Idle counts waiting and communicating alike (the accelerator computes nothing)."""
    N = check_replicas(replicas)
    c = check_positive("compute_seconds", compute_seconds)
    slow = [s for _, s in hardware.classes]
    counts = hardware.counts(N)
    mean = float(np.dot(slow, counts) / N)
    return 1 - mean * c / (c * expected_max(jitter, slow, counts) + sync_seconds)


def group_first_step_idle_fraction(jitter: Jitter, group_size: int, sync_seconds: float = 0.0,
                                   compute_seconds: float = 1.0) -> float:
    """Closed form for the *first* NoLoCo outer step from a common start, homogeneous
    hardware: a replica waits for the slowest of its n group members,
    ``1 - 1 / (E[max_n X] + sync)``. Later steps idle more, because a member's start is
    delayed by its previous group (see :func:`simulate_idle`); this is a lower bound."""
    n = check_group(group_size)
    c = check_positive("compute_seconds", compute_seconds)
    return 1 - c / (c * expected_max(jitter, [1.0], [n]) + sync_seconds)
