"""The second-moment recursion along a run's own groups, not averaged over them.

:mod:`noloco.theory.exchangeable` averages every outer step over a fresh uniform partition: its state is one
k x k covariance S of a replica's deviation (k = 4 for the AR(1) model: y, delta, eps_prev, drift). Given the
actual partitions (drawn ahead from the run's groups seed, :func:`noloco.theory.partitions.partition`) the same
linear step of the stacked replicas, w' = (I (x) F0 + A (x) F1) w + (I (x) g0 + A (x) g1) xi with A the step's
averaging matrix, moves the full (N k) x (N k) covariance of the replicas' deviations from their mean::

    Sigma' = B Sigma B^T + (1 - rho^2) s2 (P C)(P C)^T,   B = I (x) F0 + A (x) F1,  C = I (x) g0 + A (x) g1,

P = (I - J) (x) I the projection onto deviations (A commutes with J, so B keeps Sigma in that subspace).
Averaged over a uniform A this is the exchangeable step (E[A (I - J) A] = kappa (I - J)): a start of the
form (I - J) (x) S stays of that form in expectation, so the mean of this recursion over random seeds is the
exchangeable one (a test checks it). What the meter measures pools replicas: :func:`pooled` is the k x k S
that the exchangeable recursion would hold with the same pooled moments, tr over replicas / (N - 1).

Replica-major order: entry i k + a is replica i's component a.
"""

from __future__ import annotations

import numpy as np

from noloco.theory import exchangeable
from noloco.theory.partitions import partition


#: k, the size of one replica's state (y, delta, eps_prev, drift)
K = len(exchangeable.initial())

#: the most replicas the advice steps this recursion for: its state is (N k) x (N k), a step costs (N k)^3 per
#: tensor; beyond it the advice uses the exchangeable recursion (how far a run's own groups then move it: not measured)
MAX_REPLICAS = 16


def averaging(groups: np.ndarray, replicas: int) -> np.ndarray:
    """The N x N matrix that replaces each replica's value by its group's mean (rows of ``groups`` the groups)."""
    A = np.zeros((replicas, replicas))
    for row in np.asarray(groups):
        A[np.ix_(row, row)] = 1.0 / len(row)
    return A


def partitions(seed: int, first: int, last: int, replicas: int, group_size: int) -> list[np.ndarray]:
    """The averaging matrices of the outer steps ``first`` to ``last - 1`` (0-based: outer step t + 1 of a run
    uses :func:`partition` (seed, t), as the exchange does)."""
    return [averaging(partition(seed, t, replicas, group_size), replicas) for t in range(first, last)]


def lift(S: np.ndarray, replicas: int) -> np.ndarray:
    """The full covariance (I - J) (x) S of exchangeable replicas whose deviation covariance is S."""
    N = replicas
    return np.kron(np.eye(N) - np.full((N, N), 1.0 / N), S)


def pooled(sigma: np.ndarray, replicas: int) -> np.ndarray:
    """The k x k covariance pooled over replicas (tr over replica blocks / (N - 1)); :func:`lift`'s inverse."""
    k = sigma.shape[0] // replicas
    return np.einsum("iaib->ab", sigma.reshape(replicas, k, replicas, k)) / (replicas - 1)


def step(outer, sigma: np.ndarray, A: np.ndarray, c: float, s2: float, rho: float = 0.0) -> np.ndarray:
    """One outer step of the full deviation covariance with averaging matrix ``A`` (module docstring); the maps
    are :class:`noloco.theory.exchangeable.Stepper`'s (F0, F1 affine in c and rho)."""
    st = exchangeable.stepper(outer)
    F0 = st.F0 + c * st.F0c + rho * st.F0r
    F1 = st.F1 + c * st.F1c + rho * st.F1r
    N = A.shape[0]
    eye, centre = np.eye(N), np.eye(N) - np.full((N, N), 1.0 / N)
    B = np.kron(eye, F0) + np.kron(A, F1)
    # the innovations (one per replica, unit variance) mapped onto the deviations: an (N k) x N matrix
    C = np.kron(centre, st.g0[:, None]) + np.kron(centre @ A, (st.g - st.g0)[:, None])
    return B @ sigma @ B.T + (1 - rho * rho) * s2 * (C @ C.T)


def as_pooled(S: np.ndarray, replicas: int) -> np.ndarray:
    """The k x k state either recursion reads: ``S`` itself where it is one replica's (the exchangeable
    recursion's), else :func:`pooled` of the replicas' full covariance."""
    return S if len(S) != replicas * K else pooled(S, replicas)


def advance(outer, S: np.ndarray, A: np.ndarray | None, c: float, s2: float, rho: float = 0.0) -> np.ndarray:
    """One outer step of either recursion: along the averaging matrix ``A`` (:func:`step`, ``S`` the full
    covariance), or, where ``A`` is None, averaged over groups (:mod:`noloco.theory.exchangeable`, ``S`` one
    replica's k x k covariance)."""
    if A is None:
        return exchangeable.stepper(outer)(S, c, s2, rho)
    return step(outer, S, A, c, s2, rho)


def spread(S: np.ndarray, replicas: int) -> float:
    """E z^2 per coordinate (z a replica's distance from the replicas' mean), averaged over replicas, from
    either recursion's state (:func:`as_pooled`)."""
    return (1 - 1 / replicas) * float(as_pooled(S, replicas)[0, 0])
