"""Random groups from ``(seed, step)`` alone.

Every replica calls :func:`partition` with the same seed and outer step and gets
the same partition, so no message is needed to agree on it. A uniformly random
permutation cut into consecutive blocks of n is a uniformly random partition into
groups of n: every partition is hit by the same number, n!^(N/n) (N/n)!, of
permutations.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

from noloco.infra.errors import ConfigError


def _check(replicas: int, group_size: int) -> None:
    for name, value in (("replicas", replicas), ("group_size", group_size)):
        if isinstance(value, bool) or not isinstance(value, Integral):  # 8.0 would pass the modulus below
            raise ConfigError(f"{name}={value!r} is not an integer; allowed: an integer >= 1")
    if replicas < 1 or group_size < 1 or replicas % group_size:
        raise ConfigError(
            f"group_size={group_size} must be >= 1 and divide replicas={replicas}")


def random_permutations(rng: np.random.Generator, shape: tuple, replicas: int) -> np.ndarray:
    """Independent uniform permutations of ``range(replicas)``, shape ``shape + (replicas,)``."""
    return rng.random(tuple(shape) + (replicas,)).argsort(axis=-1)


def partition(seed: int, step: int, replicas: int, group_size: int, stream: int = 0) -> np.ndarray:
    """The groups of outer step ``step``: a uniformly random partition of N replicas into groups of n.

    A uniformly random permutation of range(N) drawn from ``(seed, step)`` alone, cut into consecutive
    blocks of n: every rank computes the same groups with no message.

    Args:
        seed: the run's seed of the groups, >= 0.
        step: the outer step, >= 0.
        replicas: N.
        group_size: n, dividing N.
        stream: which of several sets of groups drawn at once (pipeline stages); 0 for a run without
            stages.

    Returns:
        An int array of shape (N / n, n), each row one group.

    Raises:
        ConfigError: n does not divide N, or a negative seed, step or stream.

    Examples:
        >>> from noloco import partition
        >>> groups = partition(seed=0, step=3, replicas=8, group_size=2)
        >>> groups.shape, sorted(groups.ravel().tolist()) == list(range(8))
        ((4, 2), True)
        >>> (partition(0, 3, 8, 2) == groups).all()   # the same on every rank
        np.True_
    """
    _check(replicas, group_size)
    for name, value in (("seed", seed), ("step", step), ("stream", stream)):
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise ConfigError(f"{name}={value!r} is not an integer; allowed: an integer >= 0")
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
