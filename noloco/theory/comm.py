"""Synchronisation cost: all-reduce versus the NoLoCo group exchange.

How long does one synchronisation take? The latency-bandwidth model of Hockney
(1994): sending one message of ``m`` bytes costs ``L + m b``, adding ``m`` received
bytes into a local buffer costs ``m r`` (Thakur, Rabenseifner & Gropp 2005, section 4).
``L`` is :attr:`Network.latency`, ``b`` :attr:`Network.seconds_per_byte` and ``r``
:attr:`Network.reduce_seconds_per_byte`; the literature calls them alpha, beta and
gamma, names that in this toolkit belong to the outer step. Ports are
*single-ported, full duplex*: a rank sends one message and receives one message at a
time, both at once. Every formula below is stated in that one convention, so that the
algorithms can be compared with each other; the sources and where we deviate from
them are named in each docstring.

Payloads are bytes per replica (parameters times bytes per value). Times are seconds.
How long replicas sit idle waiting for peers is :mod:`noloco.theory.jitter` (closed forms) and
:mod:`noloco.quadratic.idle` (the event simulation).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from noloco.infra.checks import (check_at_least, check_choice, check_divides, check_nonnegative,
                                 check_positive)

#: the all-reduce algorithms' names, the keys of :data:`ALLREDUCE` and of ``SyncCost.allreduce_seconds``
RING, RECURSIVE_DOUBLING, RABENSEIFNER, BINARY_TREE, DOUBLE_BINARY_TREE = (
    "ring", "recursive_doubling", "rabenseifner", "binary_tree", "double_binary_tree")
TREE_ALGORITHMS = (BINARY_TREE, DOUBLE_BINARY_TREE)
EXCHANGES = ("root", "direct")


def check_replicas(ranks) -> int:
    return check_at_least("replicas", ranks, 1)


def check_payload(nbytes) -> float:
    return check_nonnegative("payload_bytes", nbytes)


def check_group(group_size, ranks=None) -> int:
    """A group size >= 1, dividing ``ranks`` when given."""
    if ranks is None:
        return check_at_least("group_size", group_size, 1)
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
            object.__setattr__(self, name, check_nonnegative(name, getattr(self, name)))

    @classmethod
    def from_bandwidth(cls, latency: float, bits_per_second: float, reduce_seconds_per_byte: float = 0.0):
        return cls(latency, 8.0 / check_positive("bandwidth", bits_per_second), reduce_seconds_per_byte)

    def message(self, nbytes: float) -> float:
        """One point-to-point message: L + m b (Hockney 1994)."""
        return self.latency + nbytes * self.seconds_per_byte

    def bandwidth_delaycheck_payload(self) -> float:
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
    p, m = check_replicas(ranks), check_payload(nbytes)
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
    p, m = check_replicas(ranks), check_payload(nbytes)
    p2, extra = _power_of_two_fold(net, m, p)
    lg = p2.bit_length() - 1
    return lg * (net.message(m) + m * net.reduce_seconds_per_byte) + extra


def rabenseifner_allreduce(net: Network, nbytes: float, ranks: int) -> float:
    """Rabenseifner: reduce-scatter by recursive halving, then all-gather by recursive
    doubling: ``2 lg p L + 2 (p-1)/p m b + (p-1)/p m r`` for p a power of
    two, plus the fold of :func:`_power_of_two_fold` otherwise.

    Rabenseifner (2004), ICCS; Thakur, Rabenseifner & Gropp (2005), sec. 4.5.
    """
    p, m = check_replicas(ranks), check_payload(nbytes)
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
        return cost(check_at_least("segments", segments, 1))
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
    return _pipelined_trees(net, check_payload(nbytes), check_replicas(ranks), 1, segments)


def double_binary_tree_allreduce(net: Network, nbytes: float, ranks: int, segments: int | None = None) -> float:
    """Double-binary-tree all-reduce: two complementary binary trees, each reducing and
    broadcasting half of the vector (the scheme NCCL uses). Same latency as one tree,
    half its bandwidth term: ``2 m b + m r`` for large messages, like the ring.

    Sanders, Speck & Traeff (2009), Parallel Computing 35(12) (two-tree algorithms).
    """
    return _pipelined_trees(net, check_payload(nbytes), check_replicas(ranks), 2, segments)


ALLREDUCE = {
    RING: ring_allreduce,
    RECURSIVE_DOUBLING: recursive_doubling_allreduce,
    RABENSEIFNER: rabenseifner_allreduce,
    BINARY_TREE: binary_tree_allreduce,
    DOUBLE_BINARY_TREE: double_binary_tree_allreduce,
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
    n, m = check_group(group_size), check_payload(nbytes)
    v = check_at_least("vectors", vectors, 1)
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
    n, m = check_group(group_size), check_payload(nbytes)
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
        return self.speedup(self.allreduce_seconds[RING])

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
    N = check_replicas(replicas)
    n = check_group(group_size, N)
    return SyncCost(
        replicas=N, group_size=n, payload_bytes=check_payload(nbytes), exchange=exchange,
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
