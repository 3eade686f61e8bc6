"""Random groups from ``(seed, step)`` alone.

Every replica calls :func:`partition` with the same seed and outer step and gets
the same partition, so no message is needed to agree on it. A uniformly random
permutation cut into consecutive blocks of n is a uniformly random partition into
groups of n: every partition is hit by the same number, n!^(N/n) (N/n)!, of
permutations.
"""

from __future__ import annotations

import numpy as np

from noloco.infra.errors import ConfigError


def _check(replicas: int, group_size: int) -> None:
    if replicas < 1 or group_size < 1 or replicas % group_size:
        raise ConfigError(
            f"group_size={group_size} must be >= 1 and divide replicas={replicas}")


def random_permutations(rng: np.random.Generator, shape: tuple, replicas: int) -> np.ndarray:
    """Independent uniform permutations of ``range(replicas)``, shape ``shape + (replicas,)``."""
    return rng.random(tuple(shape) + (replicas,)).argsort(axis=-1)


def partition(seed: int, step: int, replicas: int, group_size: int, stream: int = 0) -> np.ndarray:
    """The groups of outer step ``step``: an int array of shape (N / n, n), each row
    one group. Depends on ``(seed, step)`` only, and on ``stream`` where several sets of
    groups are drawn at once (the pipeline stages of :mod:`noloco.llm_check.routing`; stream 0 is
    the one set of a run without stages)."""
    _check(replicas, group_size)
    if seed < 0 or step < 0 or stream < 0:
        raise ConfigError(f"seed={seed}, step={step} and stream={stream} must be >= 0")
    rng = np.random.default_rng([seed, step] + ([stream] if stream else []))
    return random_permutations(rng, (), replicas).reshape(-1, group_size)


def group_mean(x: np.ndarray, perm: np.ndarray, group_size: int) -> np.ndarray:
    """Mean of ``x`` over each replica's group, broadcast back to every member.

    ``perm`` has shape ``batch + (N,)`` (consecutive blocks of ``group_size`` form the
    groups, as :func:`partition` flattened); ``x`` has shape ``batch + (N,) + rest``
    where ``batch`` may be empty (one partition) or e.g. ``(trials,)``.
    """
    axis = perm.ndim - 1
    replicas = perm.shape[-1]
    _check(replicas, group_size)
    if x.shape[: axis + 1] != perm.shape:
        raise ValueError(f"x has shape {x.shape}; expected {perm.shape} + (...)")
    index = perm.reshape(perm.shape + (1,) * (x.ndim - perm.ndim))
    grouped = np.take_along_axis(x, index, axis=axis)
    blocks = grouped.reshape(x.shape[:axis] + (replicas // group_size, group_size) + x.shape[axis + 1:])
    means = np.broadcast_to(blocks.mean(axis=axis + 1, keepdims=True), blocks.shape).reshape(x.shape)
    out = np.empty_like(means)
    np.put_along_axis(out, index, means, axis=axis)
    return out
