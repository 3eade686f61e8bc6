"""The paper's latency figures (Section 5.3) regenerated and its Eq 7 checked: Fig 5A, a tree all-reduce
against pair averaging with log-normal message times, and Fig 5B, the total training time of DiLoCo
(a global barrier) against NoLoCo (random pairs) with log-normal inner steps (docs/paper.md).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from noloco.theory import paper as P
from noloco.theory import stats
from noloco.claims.paper import seed_stream
from noloco.infra.record import JsonRecord


def _lognormal(cv: float):
    from noloco.theory.jitter import Jitter

    return Jitter("lognormal", float(cv))


def _draws(jitter, rng, shape) -> np.ndarray:
    return jitter.sample(rng, np.empty(int(np.prod(shape)), np.float64)).reshape(shape)


def tree_allreduce_mc(world_size: int, cv: float, *, trials: int, seed) -> tuple[float, float]:
    """Mean time of a binary-tree all-reduce with iid log-normal message times (mean 1, coefficient of
    variation ``cv``; ``noloco.theory.jitter.Jitter``), and its standard error: up the tree a node forwards
    when both children's messages have arrived (the max over its children of their time plus their
    message), then down the tree every leaf waits for the messages along its path; the all-reduce ends
    when the last leaf has the result (the critical path, not a max per level)."""
    jitter, rng = _lognormal(cv), np.random.default_rng(seed)
    levels = int(round(math.log2(world_size)))
    t = np.zeros((trials, world_size))
    for _ in range(levels):
        t = t + _draws(jitter, rng, t.shape)
        t = np.maximum(t[:, 0::2], t[:, 1::2])
    for _ in range(levels):
        t = np.repeat(t, 2, axis=1)
        t = t + _draws(jitter, rng, t.shape)
    return stats.mean_se(t.max(axis=1))


@functools.lru_cache(maxsize=None)
def _expected_max(cv: float, count: int) -> float:
    """E max of ``count`` mean-1 log-normal times (``noloco.theory.jitter.expected_max``, a quadrature:
    each (cv, count) once)."""
    from noloco.theory.jitter import expected_max

    return float(expected_max(_lognormal(cv), [1.0], [count]))


def level_allreduce(world_size: int, cv: float) -> float:
    """A tree that waits, level by level, for the slowest message of the level (up and down):
    2 sum_l E max of world_size / 2^l messages."""
    levels = int(round(math.log2(world_size)))
    return 2 * sum(_expected_max(float(cv), world_size >> level) for level in range(levels))


@dataclass(frozen=True)
class Fig5A(JsonRecord):
    """Fig 5A's data: per world size N (the dicts' keys), the tree all-reduce's time over pair averaging per
    cv (simulated with its SE, and level by level), Eq 5 and the Hockney model's speed-up; per cv, Eq 7 and the
    pair's Monte Carlo and ``expected_max``."""

    world_sizes: list
    cv: list
    tree: dict
    tree_se: dict
    levels: dict
    eq5: dict
    hockney_speedup: dict
    eq7: list
    pair_mc: list
    pair_mc_se: list
    pair_comm: list
    trials: int


@dataclass(frozen=True)
class TotalTime(JsonRecord):
    """:func:`total_time_mc`'s result (times in units of the mean inner step)."""

    noloco_step: float
    noloco_step_se: float
    replicas: int
    inner_steps: int
    outer_steps: int
    trials: int
    diloco: float
    noloco: float
    ratio: float
    ratio_se: float
    barrier_steps: Any


@dataclass(frozen=True)
class StepCheck(JsonRecord):
    """:func:`check_one_inner_step`'s result: the barrier's and NoLoCo's step against the toolkit's models."""

    barrier_step: float
    barrier_step_se: float
    barrier_closed_form: float
    barrier_z: Optional[float]
    noloco_step: float
    noloco_step_se: float
    noloco_step_simulate_idle: float
    noloco_step_simulate_idle_se: float
    noloco_z: Optional[float]


@dataclass(frozen=True)
class Fig5B(JsonRecord):
    """Fig 5B's data: per world size N (the dicts' keys), DiLoCo / NoLoCo total time per H, and the H = 1 check."""

    NESTED = {"check_h1": (dict, StepCheck)}

    world_sizes: list
    inner_steps: list
    outer_steps: int
    trials: int
    ratio: dict
    ratio_se: dict
    check_h1: dict


def fig5a(world_sizes=(4, 16, 64, 256, 1024), cvs=tuple(np.linspace(0, 2.5, 11)), *, trials: int = 400,
          pair_samples: int = 200_000, seed: int = 0) -> Fig5A:
    """The paper's Fig 5A: tree all-reduce time over pair averaging time (2 E max(t1, t2), Eq 7)
    against std(t)/E(t), by world size; Eq 7 against Monte Carlo and ``comm.expected_max``; the
    toolkit's Hockney model (``comm.sync_cost``, latency only) at cv = 0."""
    from noloco.theory.comm import Network, sync_cost

    out = Fig5A(world_sizes=list(world_sizes), cv=[float(x) for x in cvs], tree={}, tree_se={}, levels={}, eq5={},
                hockney_speedup={}, eq7=[], pair_mc=[], pair_mc_se=[], pair_comm=[], trials=trials)
    rng = np.random.default_rng([seed, 0])
    for cv in cvs:
        eq7 = float(P.pair_max_mean(-P.lognormal_sigma(cv) ** 2 / 2, P.lognormal_sigma(cv)))  # mean-1 messages
        pair = _draws(_lognormal(cv), rng, (2, pair_samples)).max(axis=0)
        mean, se = stats.mean_se(pair)
        out.eq7.append(eq7)
        out.pair_mc.append(mean)
        out.pair_mc_se.append(se)
        out.pair_comm.append(_expected_max(float(cv), 2))
    for k, n in enumerate(world_sizes):
        runs = [tree_allreduce_mc(n, cv, trials=max(trials, trials * 64 // n), seed=[seed, 1, k, j])
                for j, cv in enumerate(cvs)]
        pair_time = 2 * np.array(out.eq7)
        out.tree[n] = list(np.array([m for m, _ in runs]) / pair_time)
        out.tree_se[n] = list(np.array([s for _, s in runs]) / pair_time)
        out.levels[n] = list(np.array([level_allreduce(n, cv) for cv in cvs]) / pair_time)
        out.eq5[n] = float(P.tree_allreduce_time(1.0, n) / 2)
        out.hockney_speedup[n] = sync_cost(Network(latency=1.0, seconds_per_byte=0.0), 1.0, n, 2).speedup_vs_tree
    return out


# ------------------------------------------------------------------ Fig 5B: total training time

def _idle_simulation():
    """The toolkit's idle-time simulation, imported here only."""
    from noloco.quadratic.idle import simulate_idle

    return simulate_idle


def total_time_mc(replicas: int, inner_steps: int, *, outer_steps: int = 500, mu: float = 1.0, sigma2: float = 0.5,
                  group_size: int = 2, trials: int = 4, seed=0) -> TotalTime:
    """Wall time of ``outer_steps`` outer steps, each of ``inner_steps`` inner steps of iid
    LogNormal(mu, sigma2) time per replica, communication free (Section 5.3's Fig 5B). DiLoCo: every
    outer step ends at a global barrier, so it lasts the slowest replica's compute. NoLoCo: replica i
    starts its next step when the last member of its fresh random group has arrived,
    S_i <- max_{j in G(i)} (S_j + Y_j), and the run ends when the last replica finishes (max_i S_i).
    Returns the totals (in units of the mean inner-step time exp(mu + sigma2 / 2)), the ratio
    DiLoCo / NoLoCo per trial, its mean and standard error over trials, the barrier's per-step times and
    NoLoCo's step time as the growth of the replicas' mean start time after a quarter of the steps (the
    estimator of ``noloco.quadratic.idle.simulate_idle``), with its standard error over trials."""
    jitter = _lognormal(math.sqrt(math.expm1(sigma2)))
    ratios, diloco, noloco, steps, rates = [], [], [], [], []
    burn_in = outer_steps // 4
    for trial in range(trials):
        rng = np.random.default_rng(seed_stream(seed, trial))
        start, barrier, at_burn_in = np.zeros(replicas), np.empty(outer_steps), 0.0
        buffer, scratch = np.empty(inner_steps * replicas, np.float32), np.empty((inner_steps * replicas + 1) // 2,
                                                                                  np.float32)
        for t in range(outer_steps):
            compute = jitter.sample(rng, buffer, scratch).reshape(inner_steps, replicas).sum(0, dtype=float)
            barrier[t] = compute.max()
            perm = rng.permutation(replicas)
            arrival = (start + compute)[perm].reshape(-1, group_size).max(axis=1)
            start[perm] = np.repeat(arrival, group_size)
            if t + 1 == burn_in:
                at_burn_in = start.mean()
        rates.append((start.mean() - at_burn_in) / (outer_steps - burn_in))
        diloco.append(barrier.sum())
        noloco.append(start.max())
        ratios.append(diloco[-1] / noloco[-1])
        steps.append(barrier)
    ratio, se = stats.mean_se(ratios)
    rate, rate_se = stats.mean_se(rates)
    return TotalTime(noloco_step=rate, noloco_step_se=rate_se, replicas=replicas, inner_steps=inner_steps,
                     outer_steps=outer_steps, trials=trials, diloco=float(np.mean(diloco)),
                     noloco=float(np.mean(noloco)), ratio=ratio, ratio_se=se, barrier_steps=np.concatenate(steps))


def fig5b(world_sizes=(16, 64, 256, 1024), inner_steps=(1, 2, 5, 10, 20, 40, 60, 80, 100, 120), *,
          outer_steps: int = 500, trials: int = 3, check_trials: int = 8, seed: int = 0) -> Fig5B:
    """The paper's Fig 5B: total time DiLoCo / NoLoCo against inner steps per outer step, by world
    size, and :func:`check_one_inner_step` for each world size."""
    out = Fig5B(world_sizes=list(world_sizes), inner_steps=list(inner_steps), outer_steps=outer_steps, trials=trials,
                ratio={}, ratio_se={}, check_h1={})
    for k, N in enumerate(world_sizes):
        runs = [total_time_mc(N, H, outer_steps=outer_steps, trials=trials, seed=[seed, k, j])
                for j, H in enumerate(inner_steps)]
        out.ratio[N] = [r.ratio for r in runs]
        out.ratio_se[N] = [r.ratio_se for r in runs]
        out.check_h1[N] = check_one_inner_step(N, outer_steps, trials=check_trials, seed=[seed, k])
    return out


def check_one_inner_step(replicas: int, outer_steps: int, *, trials: int, seed) -> StepCheck:
    """At H = 1 a step's compute time is one log-normal draw, the case the toolkit's idle model covers:
    the barrier's mean step against ``noloco.theory.jitter.expected_max`` (closed form) and NoLoCo's step
    time against ``noloco.quadratic.idle.simulate_idle`` (other random numbers), each with its z."""
    cv = math.sqrt(math.expm1(0.5))
    run = total_time_mc(replicas, 1, outer_steps=outer_steps, trials=trials, seed=seed)
    barrier, barrier_se = stats.mean_se(run.barrier_steps)
    idle = _idle_simulation()(replicas, 2, _lognormal(cv), steps=outer_steps, trials=trials,
                              seed=int(np.random.SeedSequence(seed_stream(seed, 1)).generate_state(1)[0]))
    closed = _expected_max(cv, replicas)
    return StepCheck(barrier_step=barrier, barrier_step_se=barrier_se, barrier_closed_form=closed,
                     barrier_z=stats.z_score(barrier, barrier_se, closed), noloco_step=run.noloco_step,
                     noloco_step_se=run.noloco_step_se, noloco_step_simulate_idle=idle.noloco_step,
                     noloco_step_simulate_idle_se=idle.noloco_step_se,
                     noloco_z=stats.z_score(run.noloco_step, math.hypot(run.noloco_step_se, idle.noloco_step_se),
                                            idle.noloco_step))
