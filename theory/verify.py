"""Independent checks of the closed second-moment recursion.

* :func:`exact_enumeration`: the full 2N x 2N covariance of all replicas, propagated
  by averaging over *every* partition of N replicas into groups of n, with the
  per-partition linear map obtained by applying :func:`theory.outer.outer_step` to
  unit vectors. No closure assumption is made.
* :func:`simulate_scalar`: Monte Carlo of the scalar model (Delta = -c y + eps)
  vectorised over trials and replicas with the shared outer step and partitions.
"""

from __future__ import annotations

import numpy as np

from theory.config import OuterConfig
from theory.outer import outer_step
from theory.partitions import group_mean, random_permutations


def all_partitions(replicas: int, group_size: int):
    """Every partition of range(replicas) into groups of group_size, as a list of groups."""
    def rec(rest):
        if not rest:
            yield []
            return
        first, others = rest[0], rest[1:]
        from itertools import combinations
        for mates in combinations(others, group_size - 1):
            remaining = [r for r in others if r not in mates]
            for tail in rec(remaining):
                yield [(first,) + mates] + tail
    return list(rec(list(range(replicas))))


def averaging_matrix(groups, replicas: int) -> np.ndarray:
    A = np.zeros((replicas, replicas))
    for g in groups:
        A[np.ix_(g, g)] = 1.0 / len(g)
    return A


def step_maps(outer: OuterConfig, c: float, A: np.ndarray):
    """(K, G): the outer step for partition A as x' = K x + G eps, x = (y_1..N, delta_1..N),
    read off by applying the outer step to unit vectors."""
    N = outer.replicas

    def apply(y, d, eps):
        progress = -c * y + eps
        new_y, new_d = outer_step(y, d, A @ y, A @ progress, **outer.rule())
        return np.concatenate([new_y, new_d])

    eye, zero = np.eye(N), np.zeros(N)
    K = np.column_stack([apply(eye[k], zero, zero) for k in range(N)] +
                        [apply(zero, eye[k], zero) for k in range(N)])
    G = np.column_stack([apply(zero, zero, eye[k]) for k in range(N)])
    return K, G


def exact_enumeration(outer: OuterConfig, c: float, s2: float, C0: np.ndarray, steps: int):
    """Per-step (E z^2, E z u, E u^2), averaged over replicas, from the exact full
    covariance recursion averaged over all partitions."""
    N = outer.replicas
    maps = [step_maps(outer, c, averaging_matrix(g, N)) for g in all_partitions(N, outer.group_size)]
    P = np.eye(N) - np.ones((N, N)) / N
    Pfull = np.kron(np.eye(2), P)
    C = C0.copy()
    out = []
    for _ in range(steps + 1):
        D = Pfull @ C @ Pfull
        out.append([np.trace(D[:N, :N]) / N, np.trace(D[:N, N:]) / N, np.trace(D[N:, N:]) / N])
        C = sum(K @ C @ K.T + s2 * G @ G.T for K, G in maps) / len(maps)
    return np.array(out)


def simulate_scalar(outer: OuterConfig, c: float, s2: float, steps: int, trials: int, rng,
                    y0=None, record_from: int = 0):
    """Monte Carlo of the scalar model. Returns the per-trial replica variance
    mean_i (y_i - mean_j y_j)^2 at every step t >= record_from: shape (trials, steps + 1 - record_from)."""
    N, n = outer.replicas, outer.group_size
    y = np.zeros((trials, N)) if y0 is None else np.array(y0, dtype=float)
    d = np.zeros_like(y)
    noise_std = np.sqrt(s2)
    spread = []
    for t in range(steps + 1):
        if t >= record_from:
            spread.append(y.var(axis=1))
        if t == steps:
            break
        perm = random_permutations(rng, (trials,), N)
        progress = -c * y + noise_std * rng.standard_normal(y.shape)
        y, d = outer_step(y, d, group_mean(y, perm, n), group_mean(progress, perm, n), **outer.rule())
    return np.stack(spread, axis=1)
