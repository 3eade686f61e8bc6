"""Synchronisation cost and idle time: all-reduce versus the NoLoCo group exchange.

Two questions a user asks before renting a cluster, answered with explicit models:

1. How long does one synchronisation take? The latency-bandwidth model of Hockney
   (1994): sending one message of ``m`` bytes costs ``alpha + m * beta``, adding ``m``
   received bytes into a local buffer costs ``m * gamma`` (Thakur, Rabenseifner & Gropp
   2005, section 4). Ports are *single-ported, full duplex*: a rank sends one message
   and receives one message at a time, both at once. Every formula below is stated in
   that one convention, so that the algorithms can be compared with each other; the
   sources and where we deviate from them are named in each docstring.
2. How long do replicas sit idle waiting for peers? :func:`simulate_idle` runs the
   outer steps of a global barrier (DiLoCo) and of random groups (NoLoCo) on the same
   random compute times; :func:`expected_max` gives the closed forms that exist.

Payloads are bytes per replica (parameters times bytes per value). Times are seconds.
Depends on numpy and scipy, and within ``theory`` on the validation helpers of
:mod:`theory.config` and on :func:`theory.partitions.random_permutations` for the groups.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from theory.config import ConfigError, check_integer, check_real
from theory.partitions import random_permutations

SCHEMA_VERSION = 1
TREE_ALGORITHMS = ("binary_tree", "double_binary_tree")
JITTER_KINDS = ("lognormal", "gamma")
EXCHANGES = ("root", "direct")


def checked_number(name: str, value, allowed: str, ok, integer: bool = False):
    """Validate one input (ConfigError naming the field, the value and the allowed range)."""
    return (check_integer if integer else check_real)(name, value, allowed, ok)


def _ranks(ranks) -> int:
    return checked_number("replicas", ranks, "an integer >= 1", lambda v: v >= 1, integer=True)


def _bytes(nbytes) -> float:
    return checked_number("payload_bytes", nbytes, "0 <= payload_bytes < inf", lambda v: 0 <= v < math.inf)


def _group(group_size, ranks=None) -> int:
    if ranks is None:
        return checked_number("group_size", group_size, "an integer >= 1", lambda v: v >= 1, integer=True)
    return checked_number("group_size", group_size, f"an integer >= 1 dividing replicas={ranks}",
                   lambda v: v >= 1 and ranks % v == 0, integer=True)


@dataclass(frozen=True)
class Network:
    """Hockney parameters of one link: ``latency`` (alpha, seconds per message),
    ``seconds_per_byte`` (beta = 1 / bandwidth) and ``reduce_seconds_per_byte`` (gamma,
    local reduction cost; 0 over the internet, where it is negligible)."""

    latency: float
    seconds_per_byte: float
    reduce_seconds_per_byte: float = 0.0

    def __post_init__(self):
        for name in ("latency", "seconds_per_byte", "reduce_seconds_per_byte"):
            value = checked_number(name, getattr(self, name), "0 <= value < inf", lambda v: 0 <= v < math.inf)
            object.__setattr__(self, name, value)

    @classmethod
    def from_bandwidth(cls, latency: float, bits_per_second: float, reduce_seconds_per_byte: float = 0.0):
        bw = checked_number("bandwidth", bits_per_second, "0 < bandwidth < inf (bits per second)",
                     lambda v: 0 < v < math.inf)
        return cls(latency, 8.0 / bw, reduce_seconds_per_byte)

    def message(self, nbytes: float) -> float:
        """One point-to-point message: alpha + m beta (Hockney 1994)."""
        return self.latency + nbytes * self.seconds_per_byte

    def bandwidth_delay_bytes(self) -> float:
        """alpha / beta: the payload whose transfer takes as long as one latency."""
        return math.inf if self.seconds_per_byte == 0 else self.latency / self.seconds_per_byte


# Internet-like defaults of `noloco comm` (documented in docs/comm.md): 50 ms one-way
# latency (a transatlantic round trip is 70-90 ms) and 1 Gbit/s per replica.
INTERNET = Network.from_bandwidth(latency=0.05, bits_per_second=1e9)


# ---------------------------------------------------------------- all-reduce formulas

def ring_allreduce(net: Network, nbytes: float, ranks: int) -> float:
    """Ring all-reduce: reduce-scatter then all-gather around a ring, p - 1 steps each,
    every step one message of m/p bytes:
    ``2 (p-1) alpha + 2 (p-1)/p m beta + (p-1)/p m gamma``.

    Patarasuk & Yuan (2009), "Bandwidth optimal all-reduce algorithms for clusters of
    workstations", JPDC 69(2); Thakur, Rabenseifner & Gropp (2005), IJHPCA 19(1), sec. 4.5.
    """
    p, m = _ranks(ranks), _bytes(nbytes)
    f = (p - 1) / p
    return 2 * (p - 1) * net.latency + 2 * f * m * net.seconds_per_byte + f * m * net.reduce_seconds_per_byte


def _power_of_two_fold(net: Network, m: float, p: int) -> tuple[int, float]:
    """Largest power of two p' <= p, and the cost of folding the p - p' extra ranks in
    (one full message before and one after: ``2 alpha + 2 m beta + m gamma``), as
    MPICH does for non-powers of two (Thakur, Rabenseifner & Gropp 2005, sec. 4.5)."""
    p2 = 1 << (p.bit_length() - 1)
    extra = 0.0 if p2 == p else 2 * net.message(m) + m * net.reduce_seconds_per_byte
    return p2, extra


def recursive_doubling_allreduce(net: Network, nbytes: float, ranks: int) -> float:
    """Recursive doubling: lg p steps, each exchanging the full vector with the rank at
    distance 2^k: ``lg p (alpha + m beta + m gamma)`` for p a power of two, plus the
    fold of :func:`_power_of_two_fold` otherwise.

    Thakur, Rabenseifner & Gropp (2005), sec. 4.5.
    """
    p, m = _ranks(ranks), _bytes(nbytes)
    p2, extra = _power_of_two_fold(net, m, p)
    lg = p2.bit_length() - 1
    return lg * (net.message(m) + m * net.reduce_seconds_per_byte) + extra


def rabenseifner_allreduce(net: Network, nbytes: float, ranks: int) -> float:
    """Rabenseifner: reduce-scatter by recursive halving, then all-gather by recursive
    doubling: ``2 lg p alpha + 2 (p-1)/p m beta + (p-1)/p m gamma`` for p a power of
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
    ``T(k) = (D + k - 1) c (2 alpha + m / (trees k) (2 beta + gamma))``, minimised over
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
        return cost(checked_number("segments", segments, "an integer >= 1", lambda v: v >= 1, integer=True))
    # T(k) = (D-1) a + b + k a + (D-1) b / k is convex in k; its real minimiser is
    # sqrt((D-1) b / a), so the integer optimum is its floor or its ceiling.
    if depth <= 1 or b == 0:
        return cost(1)
    best = math.sqrt((depth - 1) * b / a) if a > 0 else max(m, 1.0)
    best = min(best, max(m, 1.0))  # a segment holds at least one byte
    return min(cost(max(1, math.floor(best))), cost(max(1, math.ceil(best))))


def binary_tree_allreduce(net: Network, nbytes: float, ranks: int, segments: int | None = None) -> float:
    """Binary-tree all-reduce: pipelined reduce then broadcast along one binary tree;
    see :func:`_pipelined_trees`. Latency-bound (k = 1): ``4 D (alpha + m beta) + 2 D m
    gamma``; bandwidth-bound (large k): ``4 m beta + 2 m gamma``.

    Pipelined binary-tree collectives as analysed by Sanders, Speck & Traeff (2009),
    "Two-tree algorithms for full bandwidth broadcast, reduction and scan", Parallel
    Computing 35(12), sec. 2, in the single-port model used here.
    """
    return _pipelined_trees(net, _bytes(nbytes), _ranks(ranks), 1, segments)


def double_binary_tree_allreduce(net: Network, nbytes: float, ranks: int, segments: int | None = None) -> float:
    """Double-binary-tree all-reduce: two complementary binary trees, each reducing and
    broadcasting half of the vector (the scheme NCCL uses). Same latency as one tree,
    half its bandwidth term: ``2 m beta + m gamma`` for large messages, like the ring.

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
    back to every member: ``vectors (n-1) (2 alpha + m (2 beta + gamma))``.
    For a pair: ``4 alpha + 4 m beta + 2 m gamma``.

    The reference loops over parameter tensors with blocking calls, so its latency
    term is paid once per tensor; this model assumes one flattened bucket.
    """
    n, m = _group(group_size), _bytes(nbytes)
    v = checked_number("vectors", vectors, "an integer >= 1", lambda x: x >= 1, integer=True)
    return v * (n - 1) * (2 * net.latency + m * (2 * net.seconds_per_byte + net.reduce_seconds_per_byte))


def direct_group_exchange(net: Network, nbytes: float, group_size: int) -> float:
    """Direct exchange: n - 1 rounds of pairwise swaps (round r: send to i + r, receive
    from i - r, mod n), one message of m bytes each way per round, then a local sum:
    ``(n-1) (alpha + m beta + m gamma)``; a pair costs one message time.

    One vector suffices: the NoLoCo update needs mean(beta Delta + gamma phi) only,
    since beta mean(Delta) + gamma (mean(phi) - phi_i) = mean(beta Delta + gamma phi)
    - gamma phi_i. The round schedule is the pairwise-exchange all-to-all of Thakur,
    Rabenseifner & Gropp (2005), sec. 4.6.
    """
    n, m = _group(group_size), _bytes(nbytes)
    return (n - 1) * (net.message(m) + m * net.reduce_seconds_per_byte)


def group_exchange(net: Network, nbytes: float, group_size: int, exchange: str = "root") -> float:
    if exchange == "root":
        return root_group_exchange(net, nbytes, group_size)
    if exchange == "direct":
        return direct_group_exchange(net, nbytes, group_size)
    raise ConfigError(f"exchange={exchange!r} is not allowed; allowed: {', '.join(EXCHANGES)}")


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
    crossed in [lo, hi]. Bisection on log(bytes)."""
    from scipy.optimize import brentq

    def gap(log_m: float) -> float:
        return sync_cost(net, math.exp(log_m), replicas, group_size, exchange).speedup_vs_tree - target

    a, b = math.log(lo), math.log(hi)
    if gap(a) < 0 or gap(b) > 0:
        return None
    return math.exp(brentq(gap, a, b, xtol=1e-6))


# ---------------------------------------------------------------- compute-time jitter

@dataclass(frozen=True)
class Jitter:
    """Per-outer-step compute time multiplier: mean 1, coefficient of variation ``cv``.
    ``lognormal`` (sigma^2 = ln(1 + cv^2)) or ``gamma`` (shape 1 / cv^2); cv = 0 is no
    jitter."""

    kind: str = "lognormal"
    cv: float = 0.1

    def __post_init__(self):
        if self.kind not in JITTER_KINDS:
            raise ConfigError(f"jitter={self.kind!r} is not allowed; allowed: {', '.join(JITTER_KINDS)}")
        cv = checked_number("jitter_cv", self.cv, "0 <= jitter_cv <= 10", lambda v: 0 <= v <= 10)
        object.__setattr__(self, "cv", cv)

    def dist(self):
        """The frozen scipy distribution (mean 1), or None when cv = 0."""
        from scipy import stats

        if self.cv == 0:
            return None
        if self.kind == "lognormal":
            s2 = math.log1p(self.cv ** 2)
            return stats.lognorm(s=math.sqrt(s2), scale=math.exp(-s2 / 2))
        return stats.gamma(a=1 / self.cv ** 2, scale=self.cv ** 2)

    def sample(self, rng: np.random.Generator, shape) -> np.ndarray:
        if self.cv == 0:
            return np.ones(shape)
        if self.kind == "lognormal":
            s2 = math.log1p(self.cv ** 2)
            return rng.lognormal(-s2 / 2, math.sqrt(s2), shape)
        return rng.gamma(1 / self.cv ** 2, self.cv ** 2, shape)


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
            checked_number("hardware fraction", f, "0 < fraction <= 1", lambda v: 0 < v <= 1)
            checked_number("hardware slowdown", s, "0 < slowdown < inf", lambda v: 0 < v < math.inf)
        total = sum(f for f, _ in classes)
        if abs(total - 1) > 1e-9:
            raise ConfigError(f"hardware fractions sum to {total!r}; allowed: fractions summing to 1")
        object.__setattr__(self, "classes", classes)

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


def checked_compute_seconds(value) -> float:
    return checked_number("compute_seconds", value, "0 < compute_seconds < inf", lambda v: 0 < v < math.inf)


def barrier_idle_fraction(jitter: Jitter, replicas: int, hardware: Hardware = Hardware(),
                          sync_seconds: float = 0.0, compute_seconds: float = 1.0) -> float:
    """Closed form for a global barrier (DiLoCo): each outer step lasts the slowest
    replica's compute time plus the all-reduce, so a replica's idle fraction is
    ``1 - E[Y] / (E[max_N Y] + sync)``, exact because the barrier resets every step.
    Idle counts waiting and communicating alike (the accelerator computes nothing)."""
    N = _ranks(replicas)
    c = checked_compute_seconds(compute_seconds)
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
    c = checked_compute_seconds(compute_seconds)
    return 1 - c / (c * expected_max(jitter, [1.0], [n]) + sync_seconds)


# ---------------------------------------------------------------- event simulation

@dataclass(frozen=True)
class IdleResult:
    """Mean step time (seconds per outer step, in units of ``compute_seconds``) of a
    barrier and of NoLoCo groups over the same compute times, each with its standard
    error across independent trials, and the mean compute time per step."""

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

    @property
    def barrier_idle_fraction(self) -> float:
        return 1 - self.mean_compute / self.barrier_step

    @property
    def noloco_idle_fraction(self) -> float:
        return 1 - self.mean_compute / self.noloco_step

    @property
    def barrier_idle_se(self) -> float:
        """Delta-method standard error of the idle fraction (mean compute as exact)."""
        return self.mean_compute * self.barrier_step_se / self.barrier_step ** 2

    @property
    def noloco_idle_se(self) -> float:
        return self.mean_compute * self.noloco_step_se / self.noloco_step ** 2

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(barrier_idle_fraction=self.barrier_idle_fraction, barrier_idle_se=self.barrier_idle_se,
                   noloco_idle_fraction=self.noloco_idle_fraction, noloco_idle_se=self.noloco_idle_se)
        return out


def _mean_se(per_trial: np.ndarray) -> tuple[float, float]:
    se = per_trial.std(ddof=1) / math.sqrt(per_trial.size) if per_trial.size > 1 else math.nan
    return float(per_trial.mean()), float(se)


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
    quarter). With n = N both are the same process. Vectorised over trials and replicas.
    """
    from tqdm.auto import tqdm

    N = _ranks(replicas)
    n = _group(group_size, N)
    T = checked_number("steps", steps, "an integer >= 2", lambda v: v >= 2, integer=True)
    R = checked_number("trials", trials, "an integer >= 2", lambda v: v >= 2, integer=True)
    T0 = T // 4 if burn_in is None else checked_number("burn_in", burn_in, f"0 <= burn_in < steps={T}",
                                                 lambda v: 0 <= v < T, integer=True)
    rng = np.random.default_rng(seed)
    slow = hardware.slowdowns(N)
    start = np.zeros((R, N))
    start_at_burn_in = start
    barrier_total = np.zeros(R)
    compute_total = np.zeros(R)
    first_group_max = None
    for t in tqdm(range(T), desc=f"idle N={N} n={n}", disable=not progress, leave=False):
        y = slow * jitter.sample(rng, (R, N))
        barrier_total += y.max(axis=1) + barrier_sync
        if t >= T0:
            compute_total += y.mean(axis=1)
        perm = random_permutations(rng, (R,), N)
        arrive = np.take_along_axis(start + y, perm, axis=1).reshape(R, N // n, n)
        gmax = np.repeat(arrive.max(axis=2), n, axis=1)
        if t == 0:
            first_group_max = gmax.mean(axis=1)
        start = np.empty_like(start)
        np.put_along_axis(start, perm, gmax + group_sync, axis=1)
        if t + 1 == T0:
            start_at_burn_in = start
    barrier, barrier_se = _mean_se(barrier_total / T)
    span = T - T0
    noloco, noloco_se = _mean_se((start - start_at_burn_in).mean(axis=1) / span)
    first, first_se = _mean_se(first_group_max)
    return IdleResult(N, n, T, R, float(compute_total.mean() / span), barrier, barrier_se,
                      noloco, noloco_se, first, first_se)
