"""The NoLoCo outer step, written once.

Plain arithmetic on whatever it is given, so that ``theory`` applies it to sympy
symbols, ``quadratic`` to numpy arrays, ``llm_check`` to torch tensors, and numba
compiles it for ``noloco.quadratic.fused``. The group means are passed in: computing them
is communication (an index shuffle in one process, point-to-point messages across
processes), not part of the rule.

For replica i in group G(i), with progress ``Delta_i = theta_i - phi_i`` after the
inner phase (the paper writes ``phi - theta`` with a minus in front)::

    u_i     = beta * mean_G(Delta) + gamma * (mean_G(phi) - phi_i)
    delta_i <- alpha * delta_i + u_i
    heavy-ball:  phi_i <- phi_i + delta_i                 (NoLoCo reference code)
    nesterov:    phi_i <- phi_i + u_i + alpha * delta_i   (torch SGD(nesterov=True))

The Nesterov form is torch's ``SGD(momentum=alpha, nesterov=True, lr=beta)``
applied to the pseudo-gradient ``-u_i / beta`` with ``delta = -lr * buf``.

**One phase late** (:func:`late_outer_step`: the exchange in flight during the next inner phase). At sync t
a replica sends its vector (phi_t-1, Delta_t) and trains on from where it stands; at sync t + 1 it has the
group's sums of sync t, takes the unchanged step to (phi_t, delta_t), moves its weights to phi_t plus the
progress of the phase just ended, then sends (phi_t, Delta_t+1). Each progress is thus measured from the
previous phase's end, one outer step behind the phi it is sent with; the first sync only sends, and the
last exchange is waited for when the run ends. The exact theory of this delay is :mod:`noloco.theory.late`.
"""

from __future__ import annotations

from noloco.infra.errors import ConfigError
from noloco.theory.config import MOMENTUM_CONVENTIONS


def outer_step(phi, delta, group_mean_phi, group_mean_progress, alpha, beta, gamma, momentum="heavy-ball"):
    """One outer step of one replica: ``(new_phi, new_delta)``, the rule written once.

    With the progress ``Delta = theta - phi`` and the means over the replica's group G::

        u         = beta * mean_G(Delta) + gamma * (mean_G(phi) - phi)
        new_delta = alpha * delta + u
        new_phi   = phi + new_delta                  (heavy-ball)
                    phi + u + alpha * new_delta      (nesterov)

    Plain arithmetic: numbers, numpy arrays, torch tensors and sympy symbols all work.

    Args:
        phi: the outer weights.
        delta: the outer momentum.
        group_mean_phi: the mean of phi over the group, broadcast to phi's shape.
        group_mean_progress: the mean of theta - phi over the group, broadcast to phi's shape.
        alpha: outer momentum. beta: outer learning rate on the group-mean progress. gamma: pull towards
            the group-mean weights.
        momentum: ``"heavy-ball"`` (the NoLoCo reference code) or ``"nesterov"`` (torch
            ``SGD(nesterov=True)`` on the pseudo-gradient ``-u / beta``).

    Returns:
        ``(new_phi, new_delta)``, of the type given.

    Raises:
        ConfigError: ``momentum`` is not one of the two conventions (a ``ValueError``, as everywhere else).

    Examples:
        >>> from noloco import outer_step
        >>> outer_step(1.0, 0.0, 2.0, 0.5, alpha=0.5, beta=0.5, gamma=0.25)   # u = 0.25 + 0.25
        (1.5, 0.5)
        >>> import numpy as np                       # two replicas of one group, one coordinate each
        >>> phi = np.array([0.0, 2.0]); progress = np.array([1.0, 3.0])
        >>> new_phi, _ = outer_step(phi, 0 * phi, phi.mean(), progress.mean(), 0.0, 1.0, 1.0)
        >>> new_phi.tolist()                          # beta = gamma = 1: both at mean(phi + progress)
        [3.0, 3.0]
    """
    if momentum not in MOMENTUM_CONVENTIONS:
        raise ConfigError(f"momentum={momentum!r} is not allowed; allowed: {', '.join(MOMENTUM_CONVENTIONS)}")
    return outer_arithmetic(phi, delta, group_mean_phi, group_mean_progress, alpha, beta, gamma,
                            momentum == "nesterov")


def outer_arithmetic(phi, delta, group_mean_phi, group_mean_progress, alpha, beta, gamma, nesterov):
    """:func:`outer_step` with the convention as a flag, for compiled loops (numba, in
    ``noloco.quadratic.fused``) that call it once per number: a flag costs nothing there, a string
    compared on every call costs more than the arithmetic."""
    update = beta * group_mean_progress + gamma * (group_mean_phi - phi)
    new_delta = alpha * delta + update
    if nesterov:
        return phi + update + alpha * new_delta, new_delta
    return phi + new_delta, new_delta


def late_outer_step(phi, delta, weights, anchor, group_mean_phi, group_mean_progress, alpha, beta, gamma,
                    momentum="heavy-ball"):
    """The one-phase-late outer step at sync t + 1: ``(new_phi, new_delta, new_weights)``.

    The group means are those of sync t (of phi_t-1 and of the progress of phase t); :func:`outer_step`,
    unchanged, gives (phi_t, delta_t); the weights keep the progress made since sync t
    (``weights - anchor``, ``anchor`` the weights where the phase began) on top of phi_t. The progress
    sent next is ``new_weights - new_phi``, and ``new_weights`` is the next phase's anchor.

    Examples:
        >>> late_outer_step(0.0, 0.0, 3.0, 2.0, 0.0, 2.0, alpha=0.0, beta=1.0, gamma=0.0)  # phi 2, then +1
        (2.0, 2.0, 3.0)
    """
    new_phi, new_delta = outer_step(phi, delta, group_mean_phi, group_mean_progress, alpha, beta, gamma, momentum)
    return new_phi, new_delta, new_phi + (weights - anchor)
