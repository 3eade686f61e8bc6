"""The event simulation of idle time: a global barrier (DiLoCo) against random groups (NoLoCo), on the
same random compute times (:mod:`noloco.theory.jitter`), vectorised over replicas, with a compiled step
(numba, :mod:`noloco.infra.jit`) for large N. The closed forms it is checked against are
:func:`noloco.theory.jitter.barrier_idle_fraction` and :func:`~noloco.theory.jitter.group_first_step_idle_fraction`.
"""

from __future__ import annotations

import functools
import math
import os
import threading
from dataclasses import asdict, dataclass

import numpy as np

from noloco.infra import jit
from noloco.infra.checks import check_at_least, check_integer, check_real, check_seed
from noloco.theory.comm import check_group, check_replicas
from noloco.theory.jitter import Hardware, Jitter
from noloco.theory.stats import mean_se


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

    to_json = as_dict  # a report holding this result writes it so (noloco.infra.record)


#: below this many replicas the trials run one after the other (threads cost more than they save)
THREADED_REPLICAS = 1 << 16
#: above this many replicas a permutation is numpy's Fisher-Yates instead of a sort of random keys
SORTED_PERMUTATION_MAX = 1 << 24
#: replica-steps (over all trials) from which the idle simulation compiles by default (noloco.infra.jit):
#: loading numba costs about 0.5 s, and each replica-step compiled saves about 10 ns
COMPILED_REPLICA_STEPS = 1e8


def idle_memory_estimate(replicas: int, workers: int = 2, compiled: bool = False, steps: int = 200,
                         trials: int = 16) -> int:
    """Bytes :func:`simulate_idle` allocates: about 56 bytes per replica (times, draws, the
    permutation and its keys; the compiled step's piles need less) for each trial in flight; the
    trials run ``workers`` at a time; each trial's barrier step times (8 bytes a step) and its result
    are kept until the end; numba's compiler when ``compiled``."""
    return int(56 * replicas * workers + 8 * (steps + 32) * trials + (1 << 20)
               + (jit.COMPILER_BYTES if compiled else 0))


#: the slowdowns of :class:`~noloco.theory.jitter.Hardware` the simulation takes: it keeps compute times in float32,
#: where 1e100 overflows (NaN idle fractions) and 1e308 made the closed form's integral fail (issue 34); a machine a
#: million times slower or faster than the base one is outside any cluster this models
SLOWDOWN_MIN, SLOWDOWN_MAX = 1e-6, 1e6
#: the largest synchronisation time, in units of the mean compute time, the simulation takes: beyond it the start
#: times lose every digit of the compute times (and overflow: NaN idle fractions)
SYNC_MAX = 1e12


def check_idle_inputs(hardware: Hardware = Hardware(), barrier_sync: float = 0.0, group_sync: float = 0.0) -> None:
    """ConfigError (exit 2) where :func:`simulate_idle` would overflow: a slowdown outside
    [:data:`SLOWDOWN_MIN`, :data:`SLOWDOWN_MAX`] or a synchronisation time (in compute times) that is NaN,
    negative or above :data:`SYNC_MAX`."""
    for _, slowdown in hardware.classes:
        check_real("hardware slowdown", slowdown, f"{SLOWDOWN_MIN:g} <= slowdown <= {SLOWDOWN_MAX:g} (relative to the "
                   f"base compute time)", lambda v: SLOWDOWN_MIN <= v <= SLOWDOWN_MAX)
    for name, value in (("barrier_sync", barrier_sync), ("group_sync", group_sync)):
        check_real(name, value, f"0 <= {name} <= {SYNC_MAX:g} compute times", lambda v: 0 <= v <= SYNC_MAX)


#: wall nanoseconds per replica, step and trial of :func:`simulate_idle` on the project's 2-core machine when
#: idle (``python -m noloco.benchmarks comm``, two trials at a time on the two cores):
#: numpy 12, compiled 5 (the upper ends of the measured 9 to 12 and 4 to 5), gamma jitter 3 more
NS_IDLE, NS_IDLE_COMPILED, NS_GAMMA = 12.0, 5.0, 3.0


def idle_time_estimate(replicas: int, steps: int, trials: int, compiled: bool = False, gamma: bool = False) -> float:
    """Seconds of :func:`simulate_idle` at :data:`NS_IDLE` (or compiled) per replica, step and trial."""
    ns = (NS_IDLE_COMPILED if compiled else NS_IDLE) + (NS_GAMMA if gamma else 0.0)
    return 0.5 + float(replicas) * steps * trials * ns * 1e-9


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


class _Stopped(Exception):
    """A trial thread saw the stop flag (the main thread was interrupted): it ends at once."""


def _idle_trial(trial: int, replicas: int, n: int, jitter: Jitter, slow: np.ndarray, steps: int, burn_in: int,
                barrier_sync: float, group_sync: float, seed: int, compiled: bool = False,
                stop: threading.Event | None = None) -> tuple:
    """One independent run: (the barrier's step times, mean compute after burn-in, NoLoCo growth of
    the mean start time after burn-in, the mean group maximum of the first step and the mean of
    its square). ``stop``: checked before every step; once set the trial raises :class:`_Stopped` (so that
    Ctrl-C or SIGTERM in the main thread does not wait for the trials on other threads)."""
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
        if stop is not None and stop.is_set():
            raise _Stopped()
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

    N = check_replicas(replicas)
    n = check_group(group_size, N)
    steps = check_at_least("steps", steps, 2)
    trials = check_at_least("trials", trials, 2)
    seed = check_seed("seed", seed)
    check_idle_inputs(hardware, barrier_sync, group_sync)
    burn_in = steps // 4 if burn_in is None else check_integer(
        "burn_in", burn_in, f"0 <= burn_in < steps={steps}", lambda v: v >= 0 and v < steps)
    slow = hardware.slowdowns(N)
    compiled = idle_compiled(N, steps, trials)
    if compiled:
        _idle_kernel()  # compiled here once, not in each thread
    stop = threading.Event()  # set when the main thread leaves (an interrupt): the trial threads end at their next step
    run = functools.partial(_idle_trial, replicas=N, n=n, jitter=jitter, slow=slow, steps=steps, burn_in=burn_in,
                            barrier_sync=barrier_sync, group_sync=group_sync, seed=seed, compiled=compiled, stop=stop)
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

            pool = ThreadPoolExecutor(workers)  # numpy (and the compiled step) release the GIL in their loops
            try:
                futures = [pool.submit(run, t) for t in range(trials)]
                results = []
                for future in futures:
                    results.append(future.result())
                    bar.update()
            finally:
                # Ctrl-C or SIGTERM (or an error) lands here in the main thread: the trials not started are
                # cancelled and the running ones stop at their next step, so the command ends at once
                stop.set()
                pool.shutdown(wait=True, cancel_futures=True)
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
