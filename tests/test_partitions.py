from collections import Counter

import numpy as np
import pytest

from noloco.infra.errors import ConfigError
from noloco.theory.partitions import group_mean, partition, random_permutations


def test_same_seed_and_step_same_partition():
    a = partition(7, 12, 16, 2)
    assert np.array_equal(a, partition(7, 12, 16, 2))
    assert sorted(a.ravel().tolist()) == list(range(16))
    assert a.shape == (8, 2)
    assert not all(np.array_equal(a, partition(7, s, 16, 2)) for s in range(13, 16))


def _canonical(groups):
    return tuple(sorted(tuple(sorted(g)) for g in groups))


@pytest.mark.parametrize("group_size,count", [(2, 15), (3, 10)])
def test_uniform_over_all_partitions_of_six(group_size, count):
    draws = 6000
    seen = Counter(_canonical(partition(3, step, 6, group_size).tolist()) for step in range(draws))
    assert len(seen) == count  # every partition of 6 into groups of n occurs
    observed = np.array(list(seen.values()))
    from scipy import stats  # here, not at the top: collecting the tests should not import scipy.stats

    p = stats.chisquare(observed).pvalue
    assert p > 1e-3, f"chi-square p = {p:.2e}: partitions are not uniform"


def test_group_mean_single_and_batched():
    groups = np.array([[0, 3], [1, 2]])
    x = np.array([1.0, 2.0, 4.0, 5.0])
    assert group_mean(x, groups.ravel(), 2).tolist() == [3.0, 3.0, 3.0, 3.0]
    groups = np.array([[0, 1], [2, 3]])
    assert group_mean(x, groups.ravel(), 2).tolist() == [1.5, 1.5, 4.5, 4.5]
    rng = np.random.default_rng(1)
    perms = random_permutations(rng, (5,), 6)
    xs = rng.normal(size=(5, 6, 3))
    batched = group_mean(xs, perms, 3)
    for t in range(5):
        assert np.allclose(batched[t], group_mean(xs[t], perms[t], 3))
        assert np.allclose(batched[t].mean(axis=0), xs[t].mean(axis=0))  # averaging keeps the mean


def test_bad_partition_input():
    with pytest.raises(ConfigError, match="divide"):
        partition(0, 0, 6, 4)
    with pytest.raises(ConfigError, match="seed"):
        partition(-1, 0, 6, 2)
