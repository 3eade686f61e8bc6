"""Exact enumeration: an independent check of the closed second-moment recursion.

:func:`exact_enumeration` propagates the full 2N x 2N covariance of all replicas by
averaging over *every* partition of N replicas into groups of n, with the per-partition
linear map obtained by applying :func:`noloco.theory.outer.outer_step` to unit vectors. No
closure assumption is made.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from noloco.theory.config import OuterConfig
from noloco.theory.outer import outer_step


def all_partitions(replicas: int, group_size: int):
    """Every partition of range(replicas) into groups of group_size, as a list of groups."""
    def rec(rest):
        if not rest:
            yield []
            return
        first, others = rest[0], rest[1:]
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


def full_maps(step, components: int, replicas: int, A: np.ndarray, innovations: int = 1):
    """(K, G) of a linear step on all replicas' states for partition A, read off by applying
    ``step(w, A, xi)`` to unit vectors: w' = K w + G xi with w of shape (components, N) and xi of
    shape (innovations, N) (independent standard normals per replica), both flattened row-major.
    A step with one innovation per replica may take xi of shape (N,)."""
    size, noise = components * replicas, innovations * replicas
    shape = (replicas,) if innovations == 1 else (innovations, replicas)
    zero_w, zero_xi = np.zeros((components, replicas)), np.zeros(shape)
    K = np.column_stack([np.ravel(step(np.eye(size)[k].reshape(components, replicas), A, zero_xi))
                         for k in range(size)])
    G = np.column_stack([np.ravel(step(zero_w, A, np.eye(noise)[k].reshape(shape))) for k in range(noise)])
    return K, G


def enumerate_moments(step, components: int, replicas: int, group_size: int, C0: np.ndarray, steps: int,
                      innovations: int = 1):
    """Per step, the deviation second moments averaged over replicas, (steps + 1, components,
    components), from the full covariance of all replicas propagated exactly: averaged over every
    partition of ``replicas`` into groups of ``group_size``, each with its own linear map."""
    N = replicas
    maps = [full_maps(step, components, N, averaging_matrix(g, N), innovations)
            for g in all_partitions(N, group_size)]
    project = np.kron(np.eye(components), np.eye(N) - np.ones((N, N)) / N)
    C, out = C0.copy(), []
    for _ in range(steps + 1):
        D = (project @ C @ project).reshape(components, N, components, N)
        out.append(np.einsum("aibi->ab", D) / N)
        C = sum(K @ C @ K.T + G @ G.T for K, G in maps) / len(maps)
    return np.array(out)


def exact_enumeration(outer: OuterConfig, c: float, s2: float, C0: np.ndarray, steps: int):
    """Per-step (E z^2, E z u, E u^2), averaged over replicas, of the i.i.d.-noise model
    x = (y, delta), Delta = -c y + eps, by :func:`enumerate_moments`."""
    noise = np.sqrt(s2)

    def step(w, A, xi):
        y, delta = w
        return np.stack(outer_step(y, delta, A @ y, A @ (-c * y + noise * xi), **outer.rule()))

    moments = enumerate_moments(step, 2, outer.replicas, outer.group_size, C0, steps)
    return np.stack([moments[:, 0, 0], moments[:, 0, 1], moments[:, 1, 1]], axis=1)
