"""noloco.theory.conditional: the second-moment recursion along a run's own groups. Averaged over the groups it is
the exchangeable recursion (exactly over every partition for one step; within a Monte-Carlo standard error over
random seeds for many), and along one fixed sequence of groups it is what N simulated replicas give."""

import itertools
import math

import numpy as np

from noloco.theory import conditional, exchangeable
from noloco.theory.config import OuterConfig
from noloco.theory.outer import outer_step
from noloco.theory.partitions import group_mean, partition

PAIRS = OuterConfig(replicas=4, group_size=2, alpha=0.5, beta=0.7, gamma=0.7)
C, S2, RHO, STEPS = 0.1, 1.0, 0.4, 30


def _trajectory(outer, seed, steps=STEPS, c=C, s2=S2, rho=RHO) -> np.ndarray:
    """E z^2 after each step along the groups of ``seed``, from identical replicas."""
    sigma = conditional.lift(exchangeable.initial(s2, rho), outer.replicas)
    out = []
    for A in conditional.partitions(seed, 0, steps, outer.replicas, outer.group_size):
        sigma = conditional.step(outer, sigma, A, c, s2, rho)
        out.append(conditional.spread(sigma, outer.replicas))
    return np.array(out)


def test_one_step_averaged_over_every_partition_is_the_exchangeable_step():
    outer = OuterConfig(replicas=4, group_size=2, alpha=0.5, beta=0.7, gamma=0.7, momentum="nesterov")
    S = exchangeable.stepper(outer)(exchangeable.initial(1.0, 0.3), 0.2, 1.0, 0.3)
    sigma = conditional.lift(S, 4)
    rows = [p for p in itertools.permutations(range(4)) if p[0] < p[1] and p[2] < p[3] and p[0] < p[2]]
    assert len(rows) == 3  # the three pairings of four replicas
    mean = sum(conditional.step(outer, sigma, conditional.averaging(np.reshape(p, (2, 2)), 4), 0.2, 1.5, 0.3)
               for p in rows) / 3
    np.testing.assert_allclose(mean, conditional.lift(exchangeable.stepper(outer)(S, 0.2, 1.5, 0.3), 4), atol=1e-13)
    np.testing.assert_allclose(conditional.pooled(sigma, 4), S, atol=1e-13)


def test_averaged_over_random_seeds_it_is_the_exchangeable_recursion():
    """200 seeds' trajectories at N = 6, n = 2: their mean within 4 standard errors of the exchangeable recursion
    at every step (and the seeds do differ: a recursion that ignored the groups would give a zero error)."""
    outer = OuterConfig(replicas=6, group_size=2, alpha=0.5, beta=0.7, gamma=0.7)
    runs = np.array([_trajectory(outer, seed, steps=15) for seed in range(200)])
    mean, se = runs.mean(0), runs.std(0, ddof=1) / math.sqrt(len(runs))
    S, exact = exchangeable.initial(S2, RHO), []
    for _ in range(15):
        S = exchangeable.stepper(outer)(S, C, S2, RHO)
        exact.append((1 - 1 / 6) * S[0, 0])
    assert np.all(np.abs(mean - exact) < 4 * se + 1e-12)  # step 1 from identical replicas: the same for every seed
    assert se[-1] > 1e-3 * mean[-1]


def _simulate(outer, seed, coords=20000, steps=STEPS, c=C, s2=S2, rho=RHO, rng_seed=0) -> np.ndarray:
    """Per coordinate, mean over replicas of (y_i - mean y)^2 after ``steps`` outer steps of the AR(1) model
    (Delta_i = -c y_i + eps_i, eps AR(1) of variance s2, correlation rho), along the groups of ``seed``."""
    rng = np.random.default_rng(rng_seed)
    N, n = outer.replicas, outer.group_size
    y, delta = np.zeros((N, coords)), np.zeros((N, coords))
    eps = rng.normal(0.0, math.sqrt(s2), (N, coords))
    for t in range(steps):
        eps = rho * eps + math.sqrt((1 - rho * rho) * s2) * rng.normal(size=(N, coords))
        perm = partition(seed, t, N, n).ravel()
        y, delta = outer_step(y, delta, group_mean(y, perm, n), group_mean(-c * y + eps, perm, n), **outer.rule())
    return ((y - y.mean(0)) ** 2).mean(0)


def test_along_one_sequence_of_groups_it_is_what_simulated_replicas_give():
    """Seed 2's groups at N = 4 in pairs (one pairing repeats at outer steps 21 to 25 and another at 26 to 29):
    20,000 independent coordinates of 4 simulated replicas, their mean squared deviation after 30 steps within 4
    standard errors of the recursion along those groups; the exchangeable recursion is more than 4 away."""
    z2 = _simulate(PAIRS, seed=2)
    mean, se = z2.mean(), z2.std(ddof=1) / math.sqrt(len(z2))
    along = _trajectory(PAIRS, seed=2)[-1]
    assert abs(mean - along) < 4 * se
    S = exchangeable.initial(S2, RHO)
    for _ in range(STEPS):
        S = exchangeable.stepper(PAIRS)(S, C, S2, RHO)
    assert abs(mean - 0.75 * S[0, 0]) > 4 * se
