"""Synchronisation cost and idle time: all-reduce versus the NoLoCo group exchange.

Two questions a user asks before renting a cluster, answered with explicit models:

1. How long does one synchronisation take? The latency-bandwidth model of Hockney
   (1994): sending one message of ``m`` bytes costs ``L + m b``, adding ``m`` received
   bytes into a local buffer costs ``m r`` (Thakur, Rabenseifner & Gropp 2005, section 4).
   ``L`` is :attr:`Network.latency`, ``b`` :attr:`Network.seconds_per_byte` and ``r``
   :attr:`Network.reduce_seconds_per_byte`; the literature calls them alpha, beta and
   gamma, names that in this toolkit belong to the outer step. Ports are
   *single-ported, full duplex*: a rank sends one message and receives one message at a
   time, both at once. Every formula below is stated in that one convention, so that the
   algorithms can be compared with each other; the sources and where we deviate from
   them are named in each docstring.
2. How long do replicas sit idle waiting for peers? :func:`simulate_idle` runs the
   outer steps of a global barrier (DiLoCo) and of random groups (NoLoCo) on the same
   random compute times; :func:`expected_max` gives the closed forms that exist.

Payloads are bytes per replica (parameters times bytes per value). Times are seconds.
Depends on numpy and scipy, and within ``theory`` on the validators of :mod:`noloco.theory.config`,
:func:`noloco.theory.stats.mean_se`, :func:`noloco.theory.numeric.fast_normal` and ``fast_gamma`` for the
compute times and :data:`noloco.infra.files.SCHEMA_VERSION` for :func:`report`.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import asdict, dataclass

import numpy as np

from noloco.infra import jit
from noloco.infra.errors import ConfigError
from noloco.infra.checks import check_choice, check_divides, check_integer, check_real
from noloco.theory.numeric import fast_gamma, fast_normal
from noloco.theory.stats import mean_se

TREE_ALGORITHMS = ("binary_tree", "double_binary_tree")
JITTER_KINDS = ("lognormal", "gamma")
EXCHANGES = ("root", "direct")


def _at_least(name: str, value, low: int) -> int:
    return check_integer(name, value, f"an integer >= {low}", lambda v: v >= low)


def _nonnegative(name: str, value) -> float:
    return check_real(name, value, f"0 <= {name} < inf", lambda v: 0 <= v < math.inf)


def _positive(name: str, value) -> float:
    return check_real(name, value, f"0 < {name} < inf", lambda v: 0 < v < math.inf)


def _ranks(ranks) -> int:
    return _at_least("replicas", ranks, 1)


def _bytes(nbytes) -> float:
    return _nonnegative("payload_bytes", nbytes)


def _group(group_size, ranks=None) -> int:
    if ranks is None:
        return _at_least("group_size", group_size, 1)
    return check_divides("group_size", group_size, "replicas", ranks)


@dataclass(frozen=True)
class Network:
    """Hockney parameters of one link: ``latency`` (L, seconds per message),
    ``seconds_per_byte`` (b = 1 / bandwidth) and ``reduce_seconds_per_byte`` (r, the
    local reduction cost; 0 over the internet, where it is negligible)."""

    latency: float
    seconds_per_byte: float
    reduce_seconds_per_byte: float = 0.0

    def __post_init__(self):
        for name in ("latency", "seconds_per_byte", "reduce_seconds_per_byte"):
            object.__setattr__(self, name, _nonnegative(name, getattr(self, name)))

    @classmethod
    def from_bandwidth(cls, latency: float, bits_per_second: float, reduce_seconds_per_byte: float = 0.0):
        return cls(latency, 8.0 / _positive("bandwidth", bits_per_second), reduce_seconds_per_byte)

    def message(self, nbytes: float) -> float:
        """One point-to-point message: L + m b (Hockney 1994)."""
        return self.latency + nbytes * self.seconds_per_byte

    def bandwidth_delay_bytes(self) -> float:
        """L / b: the payload whose transfer takes as long as one latency."""
        return math.inf if self.seconds_per_byte == 0 else self.latency / self.seconds_per_byte


# Internet-like defaults of `noloco comm` (documented in docs/comm.md): 50 ms one-way
# latency (a transatlantic round trip is 70-90 ms) and 1 Gbit/s per replica.
INTERNET = Network.from_bandwidth(latency=0.05, bits_per_second=1e9)


# ---------------------------------------------------------------- all-reduce formulas

def ring_allreduce(net: Network, nbytes: float, ranks: int) -> float:
    """Ring all-reduce: reduce-scatter then all-gather around a ring, p - 1 steps each,
    every step one message of m/p bytes:
    ``2 (p-1) L + 2 (p-1)/p m b + (p-1)/p m r``.

    Patarasuk & Yuan (2009), "Bandwidth optimal all-reduce algorithms for clusters of
    workstations", JPDC 69(2); Thakur, Rabenseifner & Gropp (2005), IJHPCA 19(1), sec. 4.5.
    """
    p, m = _ranks(ranks), _bytes(nbytes)
    f = (p - 1) / p
    return 2 * (p - 1) * net.latency + 2 * f * m * net.seconds_per_byte + f * m * net.reduce_seconds_per_byte


def _power_of_two_fold(net: Network, m: float, p: int) -> tuple[int, float]:
    """Largest power of two p' <= p, and the cost of folding the p - p' extra ranks in
    (one full message before and one after: ``2 L + 2 m b + m r``), as
    MPICH does for non-powers of two (Thakur, Rabenseifner & Gropp 2005, sec. 4.5)."""
    p2 = 1 << (p.bit_length() - 1)
    extra = 0.0 if p2 == p else 2 * net.message(m) + m * net.reduce_seconds_per_byte
    return p2, extra


def recursive_doubling_allreduce(net: Network, nbytes: float, ranks: int) -> float:
    """Recursive doubling: lg p steps, each exchanging the full vector with the rank at
    distance 2^k: ``lg p (L + m b + m r)`` for p a power of two, plus the
    fold of :func:`_power_of_two_fold` otherwise.

    Thakur, Rabenseifner & Gropp (2005), sec. 4.5.
    """
    p, m = _ranks(ranks), _bytes(nbytes)
    p2, extra = _power_of_two_fold(net, m, p)
    lg = p2.bit_length() - 1
    return lg * (net.message(m) + m * net.reduce_seconds_per_byte) + extra


def rabenseifner_allreduce(net: Network, nbytes: float, ranks: int) -> float:
    """Rabenseifner: reduce-scatter by recursive halving, then all-gather by recursive
    doubling: ``2 lg p L + 2 (p-1)/p m b + (p-1)/p m r`` for p a power of
    two, plus the fold of :func:`_power_of_two_fold` otherwise.

    Rabenseifner (2004), ICCS; Thakur, Rabenseifner & Gropp (2005), sec. 4.5.
    """
    p, m = _ranks(ranks), _bytes(nbytes)
    p2, extra = _power_of_two_fold(net, m, p)
    lg, f = p2.bit_length() - 1, (p2 - 1) / p2
    return (2 * lg * net.latency + 2 * f * m * net.seconds_per_byte
            + f * m * net.reduce_seconds_per_byte + extra)


def _pipelined_trees(net: Network, m: float, p: int, trees: int, segments: int | None) -> float:
    """Reduce to the root, then broadcast, along ``trees`` binary trees of depth
    D = floor(lg p), each carrying m / trees bytes cut into k segments.

    Per segment an interior node receives from (reduce) or sends to (broadcast) its
    c = min(2, p-1) children one at a time (single port), so each phase is a pipeline
    of D + k - 1 stages of c messages. With two trees every node is interior in one
    and a leaf in the other (Sanders, Speck & Traeff 2009), so its two send slots per
    stage carry one segment of each tree. In total
    ``T(k) = (D + k - 1) c (2 L + m / (trees k) (2 b + r))``, minimised over
    integer k >= 1 unless ``segments`` is given. The broadcast does not overlap the
    reduce (overlap would save at most a quarter of the bandwidth term).
    """
    if p == 1:
        return 0.0
    depth, c = p.bit_length() - 1, min(2, p - 1)
    a = 2 * c * net.latency
    b = c * m / trees * (2 * net.seconds_per_byte + net.reduce_seconds_per_byte)

    def cost(k: int) -> float:
        return (depth + k - 1) * (a + b / k)

    if segments is not None:
        return cost(_at_least("segments", segments, 1))
    # T(k) = (D-1) a + b + k a + (D-1) b / k is convex in k; its real minimiser is
    # sqrt((D-1) b / a), so the integer optimum is its floor or its ceiling.
    if depth <= 1 or b == 0:
        return cost(1)
    best = math.sqrt((depth - 1) * b / a) if a > 0 else max(m, 1.0)
    best = min(best, max(m, 1.0))  # a segment holds at least one byte
    return min(cost(max(1, math.floor(best))), cost(max(1, math.ceil(best))))


def binary_tree_allreduce(net: Network, nbytes: float, ranks: int, segments: int | None = None) -> float:
    """Binary-tree all-reduce: pipelined reduce then broadcast along one binary tree;
    see :func:`_pipelined_trees`. Latency-bound (k = 1): ``4 D (L + m b) + 2 D m r``;
    bandwidth-bound (large k): ``4 m b + 2 m r``.

    Pipelined binary-tree collectives as analysed by Sanders, Speck & Traeff (2009),
    "Two-tree algorithms for full bandwidth broadcast, reduction and scan", Parallel
    Computing 35(12), sec. 2, in the single-port model used here.
    """
    return _pipelined_trees(net, _bytes(nbytes), _ranks(ranks), 1, segments)


def double_binary_tree_allreduce(net: Network, nbytes: float, ranks: int, segments: int | None = None) -> float:
    """Double-binary-tree all-reduce: two complementary binary trees, each reducing and
    broadcasting half of the vector (the scheme NCCL uses). Same latency as one tree,
    half its bandwidth term: ``2 m b + m r`` for large messages, like the ring.

    Sanders, Speck & Traeff (2009), Parallel Computing 35(12) (two-tree algorithms).
    """
    return _pipelined_trees(net, _bytes(nbytes), _ranks(ranks), 2, segments)


ALLREDUCE = {
    "ring": ring_allreduce,
    "recursive_doubling": recursive_doubling_allreduce,
    "rabenseifner": rabenseifner_allreduce,
    "binary_tree": binary_tree_allreduce,
    "double_binary_tree": double_binary_tree_allreduce,
}


# ---------------------------------------------------------------- NoLoCo group exchange

def root_group_exchange(net: Network, nbytes: float, group_size: int, vectors: int = 2) -> float:
    """Root-mediated exchange of the NoLoCo reference implementation (Kolehmainen et
    al. 2025, code ``sparse_optimizer_c.outer_step``): every member sends its slow
    weights and its progress (``vectors`` = 2 messages of m bytes) to the group's
    first rank; the root receives them one at a time, averages, and sends both means
    back to every member: ``vectors (n-1) (2 L + m (2 b + r))``.
    For a pair: ``4 L + 4 m b + 2 m r``.

    The reference loops over parameter tensors with blocking calls, so its latency
    term is paid once per tensor; this model assumes one flattened bucket.
    """
    n, m = _group(group_size), _bytes(nbytes)
    v = _at_least("vectors", vectors, 1)
    return v * (n - 1) * (2 * net.latency + m * (2 * net.seconds_per_byte + net.reduce_seconds_per_byte))


def direct_group_exchange(net: Network, nbytes: float, group_size: int) -> float:
    """Direct exchange: n - 1 rounds of pairwise swaps (round k: send to i + k, receive
    from i - k, mod n), one message of m bytes each way per round, then a local sum:
    ``(n-1) (L + m b + m r)``; a pair costs one message time.

    One vector suffices: the NoLoCo update (outer step beta, gamma) needs only
    mean(beta Delta + gamma phi), since beta mean(Delta) + gamma (mean(phi) - phi_i) =
    mean(beta Delta + gamma phi) - gamma phi_i. The round schedule is the pairwise-exchange all-to-all of Thakur,
    Rabenseifner & Gropp (2005), sec. 4.6.
    """
    n, m = _group(group_size), _bytes(nbytes)
    return (n - 1) * (net.message(m) + m * net.reduce_seconds_per_byte)


def group_exchange(net: Network, nbytes: float, group_size: int, exchange: str = "root") -> float:
    """One NoLoCo group exchange, ``root``-mediated (the reference code) or ``direct``."""
    if check_choice("exchange", exchange, EXCHANGES) == "root":
        return root_group_exchange(net, nbytes, group_size)
    return direct_group_exchange(net, nbytes, group_size)


@dataclass(frozen=True)
class SyncCost:
    """Seconds per synchronisation for one model size, network and replica count."""

    replicas: int
    group_size: int
    payload_bytes: float
    exchange: str
    allreduce_seconds: dict
    group_exchange_seconds: float

    @property
    def tree_seconds(self) -> float:
        """The faster of the two tree all-reduces (the one a library would pick)."""
        return min(self.allreduce_seconds[name] for name in TREE_ALGORITHMS)

    def speedup(self, seconds: float) -> float:
        """seconds / group exchange; a free exchange against a free all-reduce is 1."""
        g = self.group_exchange_seconds
        if g == 0:
            return math.inf if seconds > 0 else 1.0
        return seconds / g

    @property
    def speedup_vs_tree(self) -> float:
        return self.speedup(self.tree_seconds)

    @property
    def speedup_vs_ring(self) -> float:
        return self.speedup(self.allreduce_seconds["ring"])

    @property
    def speedup_vs_best(self) -> float:
        return self.speedup(min(self.allreduce_seconds.values()))

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(tree_seconds=self.tree_seconds, speedup_vs_tree=self.speedup_vs_tree,
                   speedup_vs_ring=self.speedup_vs_ring, speedup_vs_best=self.speedup_vs_best)
        return out


def sync_cost(net: Network, nbytes: float, replicas: int, group_size: int = 2, exchange: str = "root") -> SyncCost:
    """All-reduce by every algorithm of :data:`ALLREDUCE` over N ranks, and one NoLoCo
    group exchange among n."""
    N = _ranks(replicas)
    n = _group(group_size, N)
    return SyncCost(
        replicas=N, group_size=n, payload_bytes=_bytes(nbytes), exchange=exchange,
        allreduce_seconds={name: f(net, nbytes, N) for name, f in ALLREDUCE.items()},
        group_exchange_seconds=group_exchange(net, nbytes, n, exchange),
    )


def payload_at_speedup(net: Network, replicas: int, target: float, group_size: int = 2,
                       exchange: str = "root", lo: float = 1.0, hi: float = 1e13) -> float | None:
    """Payload in bytes at which ``speedup_vs_tree`` falls to ``target`` (it falls as the
    payload grows and the exchange turns bandwidth-bound); ``None`` if it is never
    crossed in [lo, hi], or where the times overflow float64 (a latency of 1e300 s). Bisection
    on log(bytes)."""
    from scipy.optimize import brentq

    def gap(log_m: float) -> float:
        return sync_cost(net, math.exp(log_m), replicas, group_size, exchange).speedup_vs_tree - target

    a, b = math.log(lo), math.log(hi)
    ends = gap(a), gap(b)
    if not all(map(math.isfinite, ends)) or ends[0] < 0 or ends[1] > 0:
        return None
    try:
        return math.exp(brentq(gap, a, b, xtol=1e-6))
    except ValueError:  # a NaN inside the bracket: inf / inf where the model overflows
        return None


# ---------------------------------------------------------------- compute-time jitter

@dataclass(frozen=True)
class Jitter:
    """Per-outer-step compute time multiplier: mean 1, coefficient of variation ``cv``.
    ``lognormal`` (sigma^2 = ln(1 + cv^2)) or ``gamma`` (shape 1 / cv^2); cv = 0 is no
    jitter."""

    kind: str = "lognormal"
    cv: float = 0.1

    def __post_init__(self):
        check_choice("jitter", self.kind, JITTER_KINDS)
        object.__setattr__(self, "cv", check_real("jitter_cv", self.cv, "0 <= jitter_cv <= 10", lambda v: 0 <= v <= 10))

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
        :func:`noloco.theory.numeric.fast_normal` with its fine tail, since the barrier waits for the
        maximum of N draws, which the coarse tail biases low (by 2.8 to 5.5 standard errors at
        N = 10^7); gamma from :func:`noloco.theory.numeric.fast_gamma` (the same fine tail underneath).
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
            _positive("hardware slowdown", s)
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
        N = _ranks(replicas)
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
    N = _ranks(replicas)
    c = _positive("compute_seconds", compute_seconds)
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
    n = _group(group_size)
    c = _positive("compute_seconds", compute_seconds)
    return 1 - c / (c * expected_max(jitter, [1.0], [n]) + sync_seconds)


# ---------------------------------------------------------------- event simulation

@dataclass(frozen=True)
class IdleResult:
    """Mean step time (seconds per outer step, in units of ``compute_seconds``) of a
    barrier and of NoLoCo groups over the same compute times, each with its standard
    error (NoLoCo's across independent trials; the barrier's and the first step's over
    every step or group, which are iid), and the mean compute time per step."""

    replicas: int
    group_size: int
    steps: int
    trials: int
    mean_compute: float
    barrier_step: float
    barrier_step_se: float
    noloco_step: float
    noloco_step_se: float
    noloco_first_step: float
    noloco_first_step_se: float
    #: whether the steps ran compiled (:class:`_CompiledStep`): its groups are other draws of the same law
    compiled: bool = False

    @property
    def barrier_idle_fraction(self) -> float:
        return 1 - self.mean_compute / self.barrier_step

    @property
    def noloco_idle_fraction(self) -> float:
        return 1 - self.mean_compute / self.noloco_step

    @property
    def barrier_idle_se(self) -> float:
        """Delta-method standard error of the idle fraction (mean compute as exact)."""
        return self.mean_compute * self.barrier_step_se / self.barrier_step / self.barrier_step

    @property
    def noloco_idle_se(self) -> float:
        return self.mean_compute * self.noloco_step_se / self.noloco_step / self.noloco_step

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(barrier_idle_fraction=self.barrier_idle_fraction, barrier_idle_se=self.barrier_idle_se,
                   noloco_idle_fraction=self.noloco_idle_fraction, noloco_idle_se=self.noloco_idle_se)
        return out


#: below this many replicas the trials run one after the other (threads cost more than they save)
THREADED_REPLICAS = 1 << 16
#: above this many replicas a permutation is numpy's Fisher-Yates instead of a sort of random keys
SORTED_PERMUTATION_MAX = 1 << 24
#: replica-steps (over all trials) from which the idle simulation compiles by default (noloco.infra.jit):
#: loading numba costs about 0.5 s, and each replica-step compiled saves about 10 ns
COMPILED_REPLICA_STEPS = 1e8


def idle_memory_estimate(replicas: int, workers: int = 2, compiled: bool = False) -> int:
    """Bytes :func:`simulate_idle` allocates: about 56 bytes per replica (times, draws, the
    permutation and its keys; the compiled step's piles need less) for each trial in flight; the
    trials run ``workers`` at a time; numba's compiler when ``compiled``."""
    return int(56 * replicas * workers + (1 << 20) + (jit.COMPILER_BYTES if compiled else 0))


def idle_compiled(replicas: int, steps: int, trials: int) -> bool:
    """Whether :func:`simulate_idle` runs its steps compiled (:mod:`noloco.infra.jit`)."""
    return jit.enabled(float(replicas) * steps * trials, COMPILED_REPLICA_STEPS)


def idle_workers(replicas: int, trials: int) -> int:
    """Trials simulated at once: one per available core (at most two) for large N, else one."""
    if replicas < THREADED_REPLICAS:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(trials, cores, 2))


def _permutation(rng: np.random.Generator, size: int, index=None) -> np.ndarray:
    """A uniformly random permutation of ``range(size)``: sort random keys with the index in their
    low bits (numpy's sort of 64-bit integers is vectorised, about twice as fast as its
    Fisher-Yates shuffle); keys that tie, about size^2 / 2^(65 - log2 size) pairs (0.03 for a
    million), are put in a uniformly random order among themselves, so the result is exactly
    uniform. ``index``: ``np.arange(size, dtype=np.uint64)``, to reuse. Fisher-Yates above
    :data:`SORTED_PERMUTATION_MAX`."""
    bits = max(1, (size - 1).bit_length())
    if size < 2 or size > SORTED_PERMUTATION_MAX:
        return rng.permutation(size)
    keys = rng.bit_generator.random_raw(size)
    keys >>= np.uint64(bits)
    keys <<= np.uint64(bits)
    keys |= np.arange(size, dtype=np.uint64) if index is None else index
    keys.sort()
    # sorted keys whose random parts tie differ by less than 2^bits
    close = np.flatnonzero(np.subtract(keys[1:], keys[:-1]) < np.uint64(1 << bits))
    perm = keys.view(np.intp)
    perm &= (1 << bits) - 1
    if close.size:  # runs of equal keys: shuffle each run
        starts = close[np.r_[True, np.diff(close) > 1]]
        ends = close[np.r_[np.diff(close) > 1, True]] + 2
        for a, b in zip(starts, ends):
            perm[a:b] = rng.permutation(perm[a:b])
    return perm


def _group_max(x: np.ndarray, n: int) -> np.ndarray:
    """Maximum over consecutive groups of ``n`` (strided slices for small groups: several times
    faster than ``reshape(-1, n).max(1)``)."""
    if n > 8:
        return x.reshape(-1, n).max(1)
    out = x[0::n].copy()
    for j in range(1, n):
        np.maximum(out, x[j::n], out=out)
    return out


def _numpy_step(rng, start, y, n: int, group_sync: float, first: bool, slow, homogeneous: bool, index) -> tuple:
    """One outer step, numpy: (the new start times, the largest and the mean compute time, and on
    the ``first`` step the mean group maximum before ``group_sync`` and the mean of its square, else
    None). Groups from :func:`_permutation`; ``index`` its reusable index."""
    if homogeneous:
        if slow[0] != 1:
            y *= np.float32(slow[0])
        perm = _permutation(rng, y.size, index)
        perm //= n
        gmax = _group_max(start[perm] + y, n)
        y_mean = y.mean(dtype=float)
    else:
        y = slow * y
        perm = _permutation(rng, y.size, index)
        gmax = _group_max((start + y)[perm], n)
        y_mean = y.mean()
    # einsum, not np.dot: BLAS's own threads fought the two trial threads (11.6 s against 7.5 s at 1e6)
    tops = (float(gmax.mean()), float(np.einsum("i,i->", gmax, gmax)) / gmax.size) if first else None
    gmax += group_sync
    if homogeneous:
        start = gmax
    else:
        start[perm] = np.repeat(gmax, n)
    return start, float(y.max()), float(y_mean), tops


class _CompiledStep:
    """The same step as :func:`_numpy_step` in one compiled loop (:func:`_grouped_arrivals`), two to
    three times as fast. Its groups come from another shuffle and other random numbers: the same
    law, so the two paths agree in distribution, not number for number.

    The state is a list of records in no particular order (a fresh uniform partition each step
    makes the order irrelevant): one start time per group on homogeneous hardware, else a start
    time and a slowdown per replica, which travel together."""

    def __init__(self, start: np.ndarray, slow: np.ndarray, homogeneous: bool):
        replicas = slow.size
        self.slow = slow[:1].copy() if homogeneous else slow.astype(float)
        self.homogeneous = homogeneous
        self.pile = np.empty(replicas)
        self.pile_slow = np.empty(1 if homogeneous else replicas)
        self.spare, self.spare_slow = np.empty_like(start), np.empty_like(self.slow)
        self.bits = pile_bits(replicas)
        self.counts = np.empty(1 << self.bits, np.int64)

    def __call__(self, rng, start, y, n: int, group_sync: float, first: bool) -> tuple:
        # the kernel sums the group maxima as it goes: they cost nothing, so every step has them
        out = self.spare
        seed = np.uint64(rng.bit_generator.random_raw())
        y_max, y_sum, top_sum, top_sq, _ = _idle_kernel()(start, self.slow, y, self.homogeneous, n, group_sync,
                                                          seed, self.bits, self.pile, self.pile_slow,
                                                          self.counts, out, self.spare_slow)
        self.spare = start
        if not self.homogeneous:
            self.slow, self.spare_slow = self.spare_slow, self.slow
        groups = y.size // n
        return out, y_max, y_sum / y.size, (top_sum / groups, top_sq / groups)


#: slots per pile of the compiled shuffle: 32 KiB of float64, which stays in the core's first cache
PILE_SLOTS = 4096


def pile_bits(size: int) -> int:
    """log2 of the piles the compiled shuffle of ``size`` slots scatters into (at most 4096 piles)."""
    return min(12, max(0, math.ceil(math.log2(max(size, 1) / PILE_SLOTS))))


def _splitmix(state):
    """SplitMix64 (Steele, Lea & Flood 2014): the next state and a 64-bit random word. Seeded from
    the trial's numpy generator each step; its words pass BigCrush."""
    state = state + np.uint64(0x9E3779B97F4A7C15)
    z = (state ^ (state >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return state, z ^ (z >> np.uint64(31))


def _grouped_arrivals(start, slow, y, per_group, n, sync, seed, bits, pile, pile_slow, counts, out, out_slow):
    """Compiled by :func:`_idle_kernel`: one step of the groups, with the records in a uniformly
    random order by Rao and Sandelius's shuffle, which stays in cache: each slot goes to one of
    ``2^bits`` piles at random, each pile is shuffled by Fisher-Yates (indices exactly uniform:
    Lemire's multiply and reject), and the piles are read one after the other. Slot s carries the
    arrival ``start + slow y[s]`` of group ``s // n`` (``per_group``) or of record s; each run of n
    shuffled slots is a new group, whose maximum plus ``sync`` is its members' new start, into
    ``out`` (and their slowdowns into ``out_slow``). Returns the largest and the sum of the compute
    times, the sum of the group maxima and of their squares, and a sum of the piles (returned so
    that the compiler keeps the sequential reads that bring each pile into cache)."""
    size = y.size
    mask, per_word = np.uint64((1 << bits) - 1), 64 // bits if bits else 0
    counts[:] = 0
    if bits:
        state, word, left = np.uint64(seed), np.uint64(0), 0
        for s in range(size):
            if left == 0:
                state, word = _mix(state)
                left = per_word
            counts[np.int64(word & mask)] += 1
            word >>= np.uint64(bits)
            left -= 1
    else:
        counts[0] = size
    total = 0
    for p in range(counts.size):  # counts become the piles' next free slots
        total, counts[p] = total + counts[p], total
    # the same pile of each slot again (same seed): scatter the arrivals
    state, word, left = np.uint64(seed), np.uint64(0), 0
    factor = slow[0]
    y_max, y_sum = -np.inf, 0.0
    for group in range(size // n):
        for s in range(group * n, group * n + n):
            p = 0
            if bits:
                if left == 0:
                    state, word = _mix(state)
                    left = per_word
                p = np.int64(word & mask)
                word >>= np.uint64(bits)
                left -= 1
            record = group if per_group else s
            f = factor if per_group else slow[record]
            time = y[s] * f
            y_max, y_sum = max(y_max, time), y_sum + time
            k = counts[p]
            pile[k] = start[record] + time
            if not per_group:
                pile_slow[k] = f
            counts[p] = k + 1
    # each pile shuffled in place, then the groups it completes
    two32 = np.uint64(1 << 32)
    half, lo, group, top_sum, top_sq, warm = 0, 0, 0, 0.0, 0.0, 0.0
    for p in range(counts.size):
        hi = counts[p]
        for i in range(lo, hi):  # one sequential read brings the pile into cache for the random swaps
            warm += pile[i]
        for i in range(hi - 1, lo, -1):
            bound = np.uint64(i - lo + 1)
            while True:
                if half == 0:
                    state, word = _mix(state)
                    x, half = word >> np.uint64(32), 1
                else:
                    x, half = word & np.uint64(0xFFFFFFFF), 0
                product = x * bound
                low = product & np.uint64(0xFFFFFFFF)
                # the 2^32 mod bound lowest values of low are the biased ones; nested, so that the
                # division runs only when low < bound (about never), not speculatively every time
                if low < bound:
                    if low < (two32 - bound) % bound:
                        continue
                break
            j = lo + np.int64(product >> np.uint64(32))
            pile[i], pile[j] = pile[j], pile[i]
            if not per_group:
                pile_slow[i], pile_slow[j] = pile_slow[j], pile_slow[i]
        while (group + 1) * n <= hi:
            first = group * n
            top = pile[first]
            for k in range(first + 1, first + n):
                top = max(top, pile[k])
            top_sum, top_sq = top_sum + top, top_sq + top * top
            if per_group:
                out[group] = top + sync
            else:
                for k in range(first, first + n):
                    out[k], out_slow[k] = top + sync, pile_slow[k]
            group += 1
        lo = hi
    return y_max, y_sum, top_sum, top_sq, warm


# numba's compiled forms, made on first use: _grouped_arrivals calls _splitmix by this name
_compiled_kernel = _mix = None


def _idle_kernel():
    """:func:`_grouped_arrivals`, compiled on first use (without the GIL: trials run on threads)."""
    global _compiled_kernel
    if _compiled_kernel is None:
        _compiled_kernel = jit.compile_with_cache(_compile_kernel, nogil=True)
    return _compiled_kernel


def _compile_kernel(compile_one):
    global _mix
    _mix = compile_one(_splitmix)
    return compile_one(_grouped_arrivals)


def _idle_trial(trial: int, replicas: int, n: int, jitter: Jitter, slow: np.ndarray, steps: int, burn_in: int,
                barrier_sync: float, group_sync: float, seed: int, compiled: bool = False) -> tuple:
    """One independent run: (the barrier's step times, mean compute after burn-in, NoLoCo growth of
    the mean start time after burn-in, the mean group maximum of the first step and the mean of
    its square)."""
    rng = np.random.default_rng([seed, trial])
    homogeneous = bool(np.all(slow == slow[0]))
    # homogeneous hardware: all n members of a group start together, so one time per group is the
    # state, and a member's group is all a fresh partition needs (perm // n)
    start = np.zeros(replicas // n if homogeneous else replicas)
    draws = np.empty(replicas, np.float32)
    scratch = np.empty((replicas + 1) // 2, np.float32)
    step = _CompiledStep(start, slow, homogeneous) if compiled else functools.partial(
        _numpy_step, slow=slow, homogeneous=homogeneous, index=np.arange(replicas, dtype=np.uint64))
    barrier, compute = np.empty(steps), 0.0
    start_at_burn_in, first = 0.0, (0.0, 0.0)
    for t in range(steps):
        y = jitter.sample(rng, draws, scratch)
        start, y_max, y_mean, tops = step(rng, start, y, n=n, group_sync=group_sync, first=t == 0)
        barrier[t] = y_max + barrier_sync
        if t >= burn_in:
            compute += y_mean
        if t == 0:
            first = tops
        if t + 1 == burn_in:
            start_at_burn_in = float(start.mean())
    return barrier, compute, float(start.mean()) - start_at_burn_in, first


def simulate_idle(replicas: int, group_size: int = 2, jitter: Jitter = Jitter(), hardware: Hardware = Hardware(),
                  steps: int = 200, trials: int = 16, barrier_sync: float = 0.0, group_sync: float = 0.0,
                  burn_in: int | None = None, seed: int = 0, progress: bool = False) -> IdleResult:
    """Event simulation of ``steps`` outer steps for ``trials`` independent runs.

    Replica i's compute time in step t is ``slowdown_i * X_it`` (X_it iid ~ ``jitter``;
    compute time 1 on average for slowdown 1). Barrier: every step lasts
    ``max_i Y_it + barrier_sync``. NoLoCo: replica i reaches the exchange at
    ``S_i + Y_it`` and starts the next step when the last member of its fresh random
    group has arrived, ``S_i <- max_{j in G_t(i)} (S_j + Y_jt) + group_sync``, so a
    straggler delays its partners, who delay theirs in the next step. The NoLoCo step
    time is the growth rate of the mean of S after ``burn_in`` steps (default a
    quarter). With n = N both are the same process. Vectorised over replicas (a sort of random
    keys gives each step's groups); trial t draws from ``default_rng([seed, t])``, and for large N
    the trials run two at a time on threads (:func:`idle_workers`), with the same results.
    From :data:`COMPILED_REPLICA_STEPS`, where numba is installed (``NOLOCO_JIT``, :mod:`noloco.infra.jit`),
    each step is one compiled loop that shuffles instead of sorting: the same law, other numbers
    (``IdleResult.compiled`` says which). Memory: :func:`idle_memory_estimate`.
    """
    from tqdm.auto import tqdm

    N = _ranks(replicas)
    n = _group(group_size, N)
    steps = _at_least("steps", steps, 2)
    trials = _at_least("trials", trials, 2)
    seed = _at_least("seed", seed, 0)
    burn_in = steps // 4 if burn_in is None else check_integer(
        "burn_in", burn_in, f"0 <= burn_in < steps={steps}", lambda v: v >= 0 and v < steps)
    slow = hardware.slowdowns(N)
    compiled = idle_compiled(N, steps, trials)
    if compiled:
        _idle_kernel()  # compiled here once, not in each thread
    run = functools.partial(_idle_trial, replicas=N, n=n, jitter=jitter, slow=slow, steps=steps, burn_in=burn_in,
                            barrier_sync=barrier_sync, group_sync=group_sync, seed=seed, compiled=compiled)
    workers = idle_workers(N, trials)
    bar = tqdm(total=trials, desc=f"idle N={N} n={n}", disable=not progress, leave=False)
    try:
        if workers == 1:
            results = []
            for t in range(trials):
                results.append(run(t))
                bar.update()
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(workers) as pool:  # numpy releases the GIL in its loops
                results = []
                for r in pool.map(run, range(trials)):
                    results.append(r)
                    bar.update()
    finally:
        bar.close()
    barrier_steps, compute, growth, first = (np.array(x) for x in zip(*results))
    span = steps - burn_in
    # the barrier's step times are iid over steps and trials (each step draws afresh, and the barrier
    # resets), and so are the first step's group maxima (everyone starts at 0; with mixed hardware
    # a partition makes them slightly negatively dependent, which this SE ignores, conservatively):
    # their SEs come from every step or group, not from a few trials. NoLoCo's later steps carry
    # their past, so its rate's SE is over the trials.
    barrier, barrier_se = mean_se(barrier_steps.ravel())
    noloco, noloco_se = mean_se(growth / span)
    groups = trials * (N // n)
    first_mean = float(first[:, 0].mean())
    first_var = max(float(first[:, 1].mean()) - first_mean ** 2, 0.0) * groups / max(groups - 1, 1)
    first_se = math.sqrt(first_var / groups)
    return IdleResult(N, n, steps, trials, float(compute.mean() / span), barrier, barrier_se,
                      noloco, noloco_se, first_mean, first_se, compiled)


# ---------------------------------------------------------------- the report of `noloco comm`

#: replica-steps of the idle simulation above which the default trial count shrinks (at least 2):
#: each trial already averages over N replicas, so a large N needs fewer of them for a small SE
IDLE_REPLICA_STEPS = 8e8


def default_trials(replicas: int, steps: int, most: int = 8) -> int:
    """Trials of the idle simulation when none are asked for: ``most``, fewer for a huge N."""
    return int(max(2, min(most, IDLE_REPLICA_STEPS // max(replicas * steps, 1))))


def report(*, params: float = 1e6, bytes_per_value: float = 2.0, replicas: int = 256, group_size: int = 2,
           latency: float = 0.05, bandwidth: float = 1e9, reduce_seconds_per_byte: float = 0.0,
           algorithm: str = "best", exchange: str = "root", jitter: str = "lognormal", jitter_cv: float = 0.1,
           hardware: str = "1:1", compute_seconds: float = 30.0, steps: int = 200, trials: int | None = None,
           seed: int = 0, progress: bool = False) -> dict:
    """Everything `noloco comm` prints, as data: seconds per synchronisation for every all-reduce
    and the NoLoCo exchange, the speed-ups, where the speed-up falls with the payload, and the
    idle fractions (closed forms and :func:`simulate_idle`). ``bandwidth`` is in bits per second,
    ``hardware`` the text of :meth:`Hardware.parse`, ``algorithm`` the all-reduce the barrier pays
    (``best``: the fastest); ``trials`` None: :func:`default_trials`. Every input is validated
    before any work (ConfigError)."""
    from noloco.infra.files import SCHEMA_VERSION

    params = _nonnegative("params", params)
    seed = _at_least("seed", seed, 0)
    steps = _at_least("steps", steps, 2)
    trials = default_trials(_ranks(replicas), steps) if trials is None else _at_least("trials", trials, 2)
    width = check_real("bytes_per_value", bytes_per_value, "0 < bytes_per_value <= 16", lambda v: 0 < v <= 16)
    net = Network.from_bandwidth(latency, bandwidth, reduce_seconds_per_byte)
    compute = _positive("compute_seconds", compute_seconds)
    check_choice("algorithm", algorithm, ("best",) + tuple(ALLREDUCE))
    payload = params * width
    cost = sync_cost(net, payload, replicas, group_size, exchange)
    latency_only = sync_cost(Network(net.latency, 0.0), payload, replicas, group_size, exchange)
    jitter_model, machines = Jitter(jitter, jitter_cv), Hardware.parse(hardware)

    name = min(cost.allreduce_seconds, key=cost.allreduce_seconds.get) if algorithm == "best" else algorithm
    barrier_sync, group_sync = cost.allreduce_seconds[name], cost.group_exchange_seconds
    sim = simulate_idle(replicas, group_size, jitter_model, machines, steps=steps, trials=trials,
                        barrier_sync=barrier_sync / compute, group_sync=group_sync / compute, seed=seed,
                        progress=progress)
    log2n = math.log2(replicas)

    def share(part: float, whole: float) -> float:  # of a time, what latency alone accounts for
        return part / whole if whole else 1.0

    return {
        "schema_version": SCHEMA_VERSION,
        "inputs": {
            "params": params, "bytes_per_value": width, "payload_bytes": payload,
            "replicas": replicas, "group_size": group_size, "latency_s": net.latency,
            "bandwidth_bits_per_s": float(bandwidth),
            "reduce_seconds_per_byte": net.reduce_seconds_per_byte, "exchange": exchange,
            "algorithm": name, "jitter": jitter, "jitter_cv": jitter_model.cv,
            "hardware": [list(c) for c in machines.classes], "compute_seconds": compute,
            "steps": steps, "trials": trials, "seed": seed,
        },
        "allreduce_seconds": cost.allreduce_seconds,
        "tree_seconds": cost.tree_seconds,
        "group_exchange_seconds": cost.group_exchange_seconds,
        "group_exchange_seconds_by_kind": {
            kind: group_exchange(net, payload, group_size, kind) for kind in EXCHANGES},
        "speedup_vs_tree": cost.speedup_vs_tree,
        "speedup_vs_ring": cost.speedup_vs_ring,
        "speedup_vs_best": cost.speedup_vs_best,
        "log2_replicas": log2n,
        "bandwidth_delay_bytes": net.bandwidth_delay_bytes(),
        "latency_share": {
            "group_exchange": share(latency_only.group_exchange_seconds, cost.group_exchange_seconds),
            "tree": share(latency_only.tree_seconds, cost.tree_seconds),
        },
        "payload_bytes_where_speedup_vs_tree": {
            "half_log2N": payload_at_speedup(net, replicas, log2n / 2, group_size, exchange),
            "1": payload_at_speedup(net, replicas, 1.0, group_size, exchange),
        },
        "idle_fraction_barrier": sim.barrier_idle_fraction,
        "idle_fraction_noloco": sim.noloco_idle_fraction,
        "idle": {
            "barrier_closed_form": barrier_idle_fraction(jitter_model, replicas, machines, barrier_sync, compute),
            "noloco_first_step_closed_form": group_first_step_idle_fraction(
                jitter_model, group_size, group_sync, compute) if machines.homogeneous else None,
            "simulation": sim.as_dict(),
        },
    }


def _human_bytes(x) -> str:
    if x is None:
        return "never"
    if math.isinf(x):
        return "inf"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(x) < 1000 or unit == "TB":
            return f"{x:.3g} {unit}"
        x /= 1000


def format_report(r: dict) -> str:
    """The table ``noloco comm`` prints for a :func:`report`."""
    i, idle = r["inputs"], r["idle"]
    lines = [
        f"N={i['replicas']} replicas, groups of n={i['group_size']}, payload {_human_bytes(i['payload_bytes'])} "
        f"({i['params']:.3g} params x {i['bytes_per_value']:g} B)",
        f"network: latency {i['latency_s'] * 1e3:g} ms/message, {i['bandwidth_bits_per_s'] / 1e9:g} Gbit/s, "
        f"bandwidth-delay product {_human_bytes(r['bandwidth_delay_bytes'])}",
        "",
        f"{'synchronisation':<28}{'seconds':>12}{'NoLoCo speed-up':>18}",
    ]
    g = r["group_exchange_seconds"]
    for name, sec in r["allreduce_seconds"].items():
        lines.append(f"{'all-reduce ' + name:<28}{sec:>12.4g}{(sec / g if g else math.inf):>18.3g}")
    for kind, sec in r["group_exchange_seconds_by_kind"].items():
        lines.append(f"{'NoLoCo exchange ' + kind + (' *' if kind == i['exchange'] else ''):<28}{sec:>12.4g}")
    share, cross = r["latency_share"]["group_exchange"], r["payload_bytes_where_speedup_vs_tree"]
    sim, first = idle["simulation"], idle["noloco_first_step_closed_form"]
    lines += [
        "",
        f"speed-up vs tree {r['speedup_vs_tree']:.3g} (log2 N = {r['log2_replicas']:.3g}), vs ring "
        f"{r['speedup_vs_ring']:.3g}, vs fastest all-reduce {r['speedup_vs_best']:.3g}",
        f"exchange is {'latency' if share >= 0.5 else 'bandwidth'}-bound ({share:.0%} of it is latency); "
        f"speed-up vs tree falls to log2(N)/2 at {_human_bytes(cross['half_log2N'])}, to 1 at {_human_bytes(cross['1'])}",
        "",
        f"idle fraction ({i['compute_seconds']:g} s compute/outer step, {i['jitter']} cv {i['jitter_cv']:g}, "
        f"barrier pays {i['algorithm']}):",
        f"  barrier (DiLoCo)  {r['idle_fraction_barrier']:.4f} +- {sim['barrier_idle_se']:.1e}"
        f"   closed form {idle['barrier_closed_form']:.4f}",
        f"  NoLoCo groups     {r['idle_fraction_noloco']:.4f} +- {sim['noloco_idle_se']:.1e}"
        + (f"   first step, closed form {first:.4f}" if first is not None else ""),
        f"  (the NoLoCo SE is over {i['trials']} trials; the barrier's over every step of them)",
    ]
    return "\n".join(lines)
