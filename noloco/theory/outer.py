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
"""

from __future__ import annotations

from noloco.theory.config import MOMENTUM_CONVENTIONS


def outer_step(phi, delta, group_mean_phi, group_mean_progress, alpha, beta, gamma, momentum="heavy-ball"):
    """One outer step; returns ``(new_phi, new_delta)``.

    ``phi`` outer weights, ``delta`` outer momentum, ``group_mean_phi`` and
    ``group_mean_progress`` the means of phi and of the progress theta - phi over
    the replica's group, broadcast to the shape of ``phi``.
    """
    if momentum not in MOMENTUM_CONVENTIONS:
        raise ValueError(f"momentum={momentum!r} is not allowed; allowed: {', '.join(MOMENTUM_CONVENTIONS)}")
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
